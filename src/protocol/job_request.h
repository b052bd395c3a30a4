// The job request: the input half of the job protocol, what one job is asked to do. trainerd
// builds it (backend::JobSpec is a JobRequest plus the claim's resources), a backend hands it
// to the job as TRAINER_* environment variables (job_environment(), the one writer), and the
// job reads it back with job_request_from_environment() (the one reader). The resolved plan,
// output folder and events file are the job's arguments (--plan, --output, --events), its log
// where the backend sends its output; they travel in the request but not in the environment.
// docs/job-protocol.md, "Environment", lists every variable. Torch-free, depends on common only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainer::protocol {

// What the job does. `train` (a run's attempt), `evaluate` (an evaluation) and `serve` (an
// endpoint's serving process) start through a backend; `curate` has its name reserved so a
// request of a newer trainerd is refused by name, not misread.
enum class JobKind { kTrain, kEvaluate, kServe, kCurate };

std::string_view job_kind_name(JobKind kind);  // "train", "evaluate", "serve", "curate"

// Who the job works for: names its telemetry resource. Empty: not passed (a local run uses
// the plan's workload, method and base model, and the profile "local").
struct JobIdentity {
  std::string workload;        // workload name (TRAINER_WORKLOAD)
  std::string method;          // "sft" | "grpo" | "gspo" (TRAINER_METHOD)
  std::string base_model;      // the user-facing base model name (TRAINER_BASE_MODEL)
  std::string base_model_sha;  // content hash of the cached model (TRAINER_BASE_MODEL_SHA)
  std::string profile;         // accelerator profile of the run's pool, e.g. "cpu" (TRAINER_PROFILE)
  // A pipeline stage's run: its pipeline's id and the stage's name (TRAINER_PIPELINE_ID,
  // TRAINER_PIPELINE_STAGE); "" = not started by a pipeline.
  std::string pipeline_id;
  std::string pipeline_stage;
};

// How the job reaches an S3 artifact store, from trainerd's configuration and environment
// (docs/api.md, "Artifact store"). Empty: not passed (a folder store needs none).
struct StoreAccess {
  std::string s3_endpoint;        // TRAINER_S3_ENDPOINT
  std::string region;             // AWS_REGION
  std::string access_key_id;      // AWS_ACCESS_KEY_ID
  std::string secret_access_key;  // AWS_SECRET_ACCESS_KEY
  std::string input_cache;        // the node's cache of fetched inputs (TRAINER_INPUT_CACHE)
  int64_t publish_deadline_seconds = 0;  // one publication's deadline (TRAINER_PUBLISH_DEADLINE_SECONDS); 0: the job's default
};

// The values TRAINER_BRANCH_RESTORE takes (protocol/snapshot.h's artifact kinds).
inline constexpr const char* kRestoreWeights = "weights";
inline constexpr const char* kRestoreTrainingState = "trainingState";

struct JobRequest {
  JobKind kind = JobKind::kTrain;  // TRAINER_JOB_KIND, passed when not train
  std::string run_id;              // TRAINER_RUN_ID: the run's id (an evaluate job: the evaluation's); "" = a local run
  int64_t attempt = 1;             // 1-based (TRAINER_ATTEMPT)
  JobIdentity identity;
  std::string otlp_endpoint;       // base URL the job pushes OTLP/HTTP JSON metrics to; "" = none (TRAINER_OTLP_ENDPOINT)
  int64_t otlp_interval_ms = 5000; // export interval, passed with the endpoint (TRAINER_OTLP_INTERVAL_MS)
  // Traces (docs/traces.md): the collector's full traces URL the job posts its spans to
  // (TRAINER_OTLP_TRACES_ENDPOINT; "" = no spans), and the W3C trace context its spans join
  // (TRACEPARENT: the run's trace, parent the run's root span), passed with the endpoint.
  std::string otlp_traces_endpoint;
  std::string traceparent;
  // trainerd's API base URL for the snapshot catalog's callbacks (TRAINER_CATALOG_URL); with
  // replicas on one store, each live one's, comma separated: the job uses whichever answers.
  std::string catalog_url;
  // The PEM CA bundle the job verifies an https:// catalog_url (and an https:// otlp_endpoint of
  // trainerd's) with (TRAINER_CATALOG_CA_FILE); "" = the system's store. trainerd passes its
  // tls.caFile (else its certificate) when it serves TLS.
  std::string catalog_ca_file;
  // The attempt's identity to trainerd's API: the job posts its events and log lines to
  // CATALOG_URL/v1/jobs/{job_id}/events and /logs with this token (TRAINER_JOB_ID,
  // TRAINER_JOB_TOKEN). "" = the job posts nothing (its events file is all trainerd reads).
  std::string job_id;
  std::string job_token;
  // The lease fence of the step that started this job (TRAINER_LAUNCH_FENCE; 0 = not passed: the
  // job trains without asking). A run's job asks trainerd's leave with it before it opens its
  // events file (POST CATALOG_URL/v1/jobs/{job_id}/start): a job started by a replica that had lost
  // the run's lease is refused and exits without training (docs/durability.md, "Replicas").
  int64_t launch_fence = 0;
  std::string artifact_root;       // where snapshots are published: a folder, or s3://BUCKET[/PREFIX] (TRAINER_ARTIFACT_ROOT)
  StoreAccess store;
  std::string resume_snapshot;     // the snapshot this attempt restores (TRAINER_RESUME_SNAPSHOT); "" = none
  // Seconds between the job's `heartbeat` events (TRAINER_HEARTBEAT_SECONDS); 0 = none. trainerd
  // stops a job silent for limits.jobSilenceSeconds as hung.
  int64_t heartbeat_seconds = 0;
  // A child run's first attempt: the parent's snapshot it starts from (TRAINER_BRANCH_SNAPSHOT)
  // and what it restores of it, kRestoreWeights or kRestoreTrainingState (TRAINER_BRANCH_RESTORE;
  // read as weights when absent).
  std::string branch_snapshot;
  std::string branch_restore;
  // A warm-started run's attempt that restores no snapshot: the storage key of the registered
  // adapter folder it starts from (TRAINER_WARM_START_ADAPTER; its adapter_config.json and
  // adapter_model.safetensors), the weights alone, steps counted from zero.
  std::string warm_start_adapter;
  // Where URLs the plan names (http: reward terms and graders) may be called: trainerd's
  // outbound.allow as a JSON list of HOST:PORT rules (TRAINER_OUTBOUND_ALLOW, common/outbound.h),
  // checked as each call connects. "" = not passed: no check (a job started by hand).
  std::string outbound_allow;
  // A serving process's secret (TRAINER_SERVE_SECRET, job kind serve): it answers only requests
  // that carry `Authorization: Bearer SECRET` (docs/security.md, "Serving processes"). Passed in
  // the environment, never on the command line. "" = not passed: no check (a process started by hand).
  std::string serve_secret;
  // outbound.proxy: the HTTP proxy those calls go through, "http://HOST:PORT"
  // (TRAINER_OUTBOUND_PROXY); "" = directly.
  std::string outbound_proxy;
  // Not in the environment: the job's arguments and output.
  std::string plan_path;    // the resolved plan (JSON), already written (--plan); evaluate: its spec (--spec)
  std::string output_dir;   // the job's output folder (--output)
  std::string events_path;  // the job's events file (--events)
  std::string log_path;     // where the job's stdout and stderr go
};

// The request's environment variables (name, value), in a fixed order; a value the request
// leaves empty is not passed. The paths are not among them.
std::vector<std::pair<std::string, std::string>> job_environment(const JobRequest& request);

// The job's command line after trainer-job's path, from its kind and paths: `run --plan PLAN
// --output DIR --events FILE`, `evaluate --spec SPEC --output DIR --events FILE`, or `serve --spec
// SPEC [--events FILE]` (the serving process's flags by name, docs/serving.md; its events file, for
// its hello and heartbeat, when the request names one). Every backend
// starts the job with it (the one place a job kind becomes a command).
std::vector<std::string> job_arguments(const JobRequest& request);

using Getenv = std::function<const char*(const char*)>;

// The request the environment carries (empty variables read as absent); the paths stay empty.
// InvalidArgument names a malformed variable: TRAINER_ATTEMPT, TRAINER_OTLP_INTERVAL_MS or
// TRAINER_PUBLISH_DEADLINE_SECONDS not a positive integer, TRAINER_BRANCH_RESTORE not weights
// or trainingState, TRAINER_JOB_KIND not a job kind.
Result<JobRequest> job_request_from_environment(const Getenv& getenv);

}  // namespace trainer::protocol

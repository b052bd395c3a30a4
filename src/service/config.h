// The deployment configuration of trainerd: what it offers and how much of it.
//
// Read from the file given with `trainerd --config FILE` (JSON; see docs/api.md,
// "Deployment configuration"), or the embedded default when none is given. Validated where
// it is parsed: every error names the field.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "common/outbound.h"
#include "common/path_policy.h"
#include "common/status.h"

namespace trainer::service {

// A run shape the deployment admits for a base model: one row of `base-models get`'s table.
struct AdmittedShape {
  std::string method;     // config.method: "sft" | "grpo" | "gspo"
  std::string precision;  // config.model.precision: "BF16" | "FP32"
  int gpus = 0;           // execution.gpus (0 = a CPU run)
};

// A base model the deployment allows: a name users write, and the folder its files are in.
struct AllowedBaseModel {
  std::string name;  // e.g. "Qwen/Qwen3-0.6B"
  std::string path;  // a Hugging Face model folder on this host
  // The run shapes it admits (baseModels[].shapes); empty = every shape.
  std::vector<AdmittedShape> shapes = {};
};

// What submission does with a run whose shape is on no admitted row (shapeCatalog).
enum class ShapeCatalog {
  kStrict,    // refuses it, naming the nearest row
  kAdvisory,  // admits it with a warning naming the nearest row
};

// Devices a pool has for a bounded time (a reservation, a lent node): added to its declared
// devices from opens_at (included) to closes_at (excluded), UTC.
struct CapacityWindow {
  int devices = 0;          // devices added while open (> 0)
  double opens_at = 0;      // seconds since the epoch
  double closes_at = 0;     // seconds since the epoch; after opens_at
  // The device indices it adds, distinct from the pool's and its other windows'; filled in by
  // parse_config (the next free indices after the pool's) when the file lists none.
  std::vector<int> device_ids = {};
};

// A set of devices the deployment schedules.
struct PoolConfig {
  std::string name;                 // pool key, e.g. "training"
  std::string accelerator = "any";  // device profile ("cpu", "any", "nvidia-h100-80gb")
  bool serving = false;             // true: serving endpoints draw from it; runs never do
  int declared = 0;                 // devices admitted against (>= 0)
  // Largest single claim it accepts (<= its peak size: declared plus the most devices its
  // windows add at one time; by default that peak).
  int max_claim = 0;
  // The device indices it grants from (CUDA_VISIBLE_DEVICES values on the local backend), one
  // per declared device; empty = 0..declared-1.
  std::vector<int> device_ids = {};
  std::vector<CapacityWindow> windows = {};  // bounded-time additions, in the file's order
  double host_ram_gib = 0;                   // host memory of one of its nodes, GiB; 0 = not stated
};

// The devices `pool` admits against at time `t`: declared plus its windows open at t.
int declared_at(const PoolConfig& pool, double t);
// The device indices `pool` grants from at time `t`: its own, then those of its windows open at t.
std::vector<int> device_ids_at(const PoolConfig& pool, double t);
// The most devices `pool` will declare at any time from `t` on (declared, or more while windows
// overlap); what a claim must fit to be admissible at all.
int peak_from(const PoolConfig& pool, double t);
// A window for messages: "+2 from 2026-01-31T18:00:00Z to 2026-01-31T22:00:00Z (ended)" (or
// "(open)", or nothing for one still to come) at time `t`.
std::string window_text(const CapacityWindow& w, double t);

struct Limits {
  size_t max_request_bytes = 1 << 20;         // any JSON body except dataset uploads
  size_t max_dataset_bytes = 64 << 20;        // a dataset upload's body
  int cancel_grace_seconds = 10;              // SIGTERM, then SIGKILL after this long
  int pause_deadline_seconds = 900;           // a pause's save, publication and release must end within this
  int max_adapter_rank = 64;                  // the largest LoRA rank `trained-models register` imports
  // How long a job retries one snapshot's publication (reserve, upload, commit) before that
  // publication fails with its reason (TRAINER_PUBLISH_DEADLINE_SECONDS); later saves go on.
  int publish_deadline_seconds = 300;
  // How old a publication's leftovers must be before trainerd removes them: reservations never
  // committed (with their uploaded bytes) and the artifact folder's `.tmp.` temporaries of a
  // publish that died. At least publish_deadline_seconds: no live job still works on one.
  int abandoned_publication_seconds = 3600;
  // A run's job silent this long (no event, not even its heartbeat) is hung: stopped (SIGTERM,
  // then SIGKILL after cancel_grace_seconds) and counted as a lost attempt. 0 = never.
  int job_silence_seconds = 300;
  // Wait before a run's next attempt after a lost one; doubled for each further lost attempt.
  int attempt_backoff_seconds = 10;
  // Requests per second one API token may make, on average (a token bucket; the public routes and
  // a job's own calls are not counted); past it 429 with Retry-After. 0 = no limit.
  int requests_per_second = 0;
  // Requests one token may make at once before the rate applies (the bucket's size); 0 = as many
  // as requests_per_second (at least 1).
  int request_burst = 0;
  // Long polls and streams (an events wait, a metrics stream, a streamed chat answer) one token
  // may hold open at once; past it 429 with Retry-After. 0 = no limit.
  int long_polls_per_token = 0;
  // Requests per second, on average, all tokens together may make that name one workload or touch
  // its objects (a token bucket per workload); past it 429 with Retry-After. 0 = no limit.
  int workload_requests_per_second = 0;
  // The workload's bucket size; 0 = as many as workload_requests_per_second (at least 1).
  int workload_request_burst = 0;
};

// Where jobs send their metrics when the operator runs a collector.
struct TelemetryConfig {
  std::string otlp_endpoint;     // base URL of an OTLP/HTTP collector; "" = trainerd's own route
  int otlp_interval_ms = 5000;   // how often jobs push (TRAINER_OTLP_INTERVAL_MS), > 0
  // The collector's OTLP/HTTP traces URL (http://HOST:PORT/v1/traces; a base URL gets the path)
  // trainerd and its jobs post spans to (docs/traces.md); "" = no traces.
  std::string otlp_traces_endpoint;
  // How long a job's series stay on trainerd's /metrics after its run ended (embedded relay).
  double job_series_retention_seconds = 300;
};

// A judge model:NAME reward terms may use: any OpenAI-compatible /v1/chat/completions.
struct JudgeConfig {
  std::string name;         // what plans write after "model:"
  std::string url;          // base URL, http(s)://HOST:PORT[/PREFIX]; calls go to url + "/v1/chat/completions"
  std::string model;        // the request's `model`; "" = name
  std::string api_key_env;  // the jobs' environment variable holding its bearer token; "" = none
  std::string ca_file;      // PEM file of the CAs trusted for an https url (trainerd and its jobs); "" = the system's
  // How long a run waits in WAITING_FOR_GRADER for the judge to answer before it fails (> 0).
  int ready_timeout_seconds = 300;
  // Not a field of the judge: outbound.proxy, copied here when the configuration is read (the
  // operator's judges are called through it, by trainerd and its jobs); "" = directly.
  std::string proxy;
};

// Where jobs publish snapshots and restore them from (docs/api.md, "Artifact store"): "" = the
// folder of trainerd's data directory; "s3://BUCKET[/PREFIX]" = an S3-compatible object store.
// The keys are read from trainerd's own environment, from the variables named here, and
// handed to the job in its environment; the configuration file never holds them.
struct ArtifactStoreConfig {
  std::string uri;                                   // "" or "s3://bucket/prefix"
  std::string endpoint;                              // http(s)://HOST:PORT of the S3 API
  std::string region = "us-east-1";
  std::string access_key_env = "AWS_ACCESS_KEY_ID";  // variables of trainerd's environment
  std::string secret_key_env = "AWS_SECRET_ACCESS_KEY";
  // Folder on a cluster node where its jobs cache the inputs they fetch from the store
  // (TRAINER_INPUT_CACHE); "" = the job's default, $TMPDIR/trainer-inputs.
  std::string input_cache;
};

// Where trainerd keeps its durable state (src/store/store.h): SQLite in the data folder (the
// embedded default) or a PostgreSQL database.
struct StoreConfig {
  std::string kind = "sqlite";  // "sqlite" | "postgres"
  // sqlite: the database file ("" = DATA/state.db; a relative path is under the data folder).
  // postgres (required): postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAM=VALUE...]
  std::string url;
  // postgres: the most connections the store keeps (1-64, store::kMaxPostgresPoolSize): reads
  // outside a transaction take any free one, a transaction holds one to its end.
  int pool_size = 8;  // store::kDefaultPostgresPoolSize
};

// HTTPS on trainerd's API (docs/security.md, "TLS"): both files or neither.
struct TlsConfig {
  std::string cert_file;  // PEM certificate (chain, leaf first) served on the API; "" = plain HTTP
  std::string key_file;   // PEM private key of cert_file (unencrypted)
  // PEM CA bundle trainerd's own jobs verify the API with (TRAINER_CATALOG_CA_FILE); "" = cert_file
  // itself (right for a self-signed certificate).
  std::string ca_file;
};

struct DeploymentConfig {
  std::vector<AllowedBaseModel> base_models;
  ShapeCatalog shape_catalog = ShapeCatalog::kStrict;  // how the base models' admitted shapes bind
  std::vector<PoolConfig> pools;
  int default_workload_quota = 8;             // devices a workload may hold at once, across pools
  std::map<std::string, int> workload_quotas; // per workload name, overriding the default at creation
  // Bytes of datasets and bundles each workload may upload (and the shared catalog, for uploads
  // naming none), unless the workload's storageQuotaBytes says otherwise; 0 = no limit.
  int64_t default_storage_quota_bytes = int64_t{1} << 30;
  Limits limits;
  std::string job_binary;                     // trainer-job; "" = beside trainerd
  backend::ComputeConfig compute;             // which compute backend runs jobs
  TelemetryConfig telemetry;                  // where jobs push metrics
  std::vector<JudgeConfig> judges;            // judges of model: reward terms, by name
  OutboundPolicy outbound;                    // where URLs that plans name may be called (outbound.allow)
  // Host folders plans and requests may name files in (paths.allow; docs/security.md, "Paths").
  // Unset: trainerd's user's home and the temporary folder. The service adds its data folder as
  // denied (confined_paths()).
  std::optional<std::vector<std::string>> paths_allow;
  PathPolicy paths;                           // what is checked: filled by confined_paths()
  ArtifactStoreConfig artifact_store;         // where snapshots are published
  StoreConfig store;                          // where the service's state is kept
  TlsConfig tls;                              // HTTPS on the API (tls.certFile, tls.keyFile, tls.caFile)
  std::string source = "embedded default";    // where this configuration came from
};

// The embedded default: no base models, one CPU pool of one device, quota 8.
DeploymentConfig default_config();

// Parses the JSON configuration file's text. `source` names it in messages.
Result<DeploymentConfig> parse_config(const std::string& text, const std::string& source);

// The paths policy of a service whose data folder is `data_dir`: `config.paths_allow`, else its
// user's home ($HOME) and temporary folder ($TMPDIR, else /tmp); never the data folder, save its
// registered bundles (DATA/bundles), nor the folder of the token file (common/token_file.h).
PathPolicy confined_paths(const DeploymentConfig& config, const std::string& data_dir);

// The judge called `name`; nullptr when the configuration declares none of that name.
const JudgeConfig* find_judge(const DeploymentConfig& config, const std::string& name);

// "strict" | "advisory".
const char* shape_catalog_name(ShapeCatalog c);
// Admitted shapes as JSON rows {method, precision, gpus}.
nlohmann::json shapes_to_json(const std::vector<AdmittedShape>& shapes);
// `url` with its password, if any, replaced by "***" (for messages and `info`).
std::string redact_password(const std::string& url);

// The configuration as `info` shows it.
nlohmann::json config_to_json(const DeploymentConfig& config);

}  // namespace trainer::service

// The trainer service: base models, datasets, workloads, the run lifecycle, pools, claims and
// quotas, snapshots, evaluations, comparisons and the model registry. No HTTP here: src/api
// translates requests into these calls and their JSON back.
//
// Every state change is committed to the Store before the service acts on it (starts a job,
// grants a claim, answers a request). A driver thread steps the task kernel (service/tasks/):
// each open run, base-model preparation and registration moves through its kind's phase table,
// and a run's step follows its job's events; the same pass admits queued claims and advances
// evaluations. After a restart, start() finds the jobs of open runs again or ends their runs
// with a named failure.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "common/clock.h"
#include "common/http_client.h"
#include "common/status.h"
#include "service/config.h"
#include "service/identity.h"
#include "store/store.h"

namespace trainer::service {

using json = nlohmann::json;

// Where the service keeps its files and how it behaves; see DeploymentConfig for what it offers.
struct ServiceOptions {
  std::string data_dir;                  // state.db, datasets/, models/, runs/ live here
  DeploymentConfig config;               // allowed base models, pools, quotas, limits
  std::string instance;                  // the `instance` attribute of every service metric
  // This replica's name on the task leases it takes and in the replicas table: unique per process
  // start on a shared store (trainerd: the instance name and a random suffix), so that two
  // processes never both think they hold one lease.
  std::string replica = "trainerd";
  double lease_seconds = 30;             // seconds a task lease lasts unless renewed (renewed at half)
  std::chrono::milliseconds heartbeat{2000};  // how often this replica beats in the replicas table
  // Test hook (TRAINER_TEST_KILL_AFTER=KIND:PHASE): trainerd SIGKILLs itself right after the commit
  // of the step that moved a task of KIND into PHASE (tasks/task_kernel.h). "" = none.
  std::string kill_after;
  std::chrono::milliseconds tick{100};   // how often the driver looks at open runs
  // Every timestamp, deadline and duration the service reads (tests pass a ManualClock).
  std::shared_ptr<Clock> clock = system_clock();
  // Where jobs push their OTLP metrics (TRAINER_OTLP_ENDPOINT), set by the wiring to trainerd's
  // own loopback route; "" = jobs get none. config.telemetry.otlp_endpoint takes precedence.
  std::string job_otlp_endpoint;
  // Test hook (trainerd reads TRAINER_TEST_REGISTRATION_PAUSE_MS): how long a registration waits
  // between its copy and recording REGISTERED, so a test can kill trainerd there. 0 = none.
  std::chrono::milliseconds registration_pause{0};
  // Test hook (TRAINER_TEST_SWEEP_PAUSE_MS): how long a sweep waits after submitting each child
  // but the last, so a test can kill trainerd in the middle of a sweep's submission. 0 = none.
  std::chrono::milliseconds sweep_pause{0};
  // Test hook (TRAINER_TEST_COMMIT_PAUSE_MS, TRAINER_TEST_COMMIT_PAUSE_AT): how long the first
  // snapshot commit this process serves holds, with the catalog locked, either after verifying the
  // upload and before the durable write (commit_pause_stored false) or after the durable write and
  // before answering the job (true), so a test can kill trainerd there. 0 = none.
  std::chrono::milliseconds commit_pause{0};
  bool commit_pause_stored = false;
  // Test hook (TRAINER_TEST_LAUNCH_HOLD=FILE): the first start of a run's job this process makes
  // holds, inside its step, after the step's last lease check and before the backend starts the
  // job, for as long as FILE exists, so a test can let another replica take the run over
  // meanwhile and then release it. "" = none.
  std::string launch_hold_file;
};

// Most children one parent may have: a comparison covers at most this many branch models.
inline constexpr int64_t kMaxFan = 50;
// Most axes one sweep's grid may have (runs sweep --grid).
inline constexpr int64_t kMaxSweepAxes = 16;

// Largest OTLP push trainerd's relay takes from a job (POST /otlp/v1/metrics).
inline constexpr size_t kMaxOtlpBodyBytes = size_t{4} << 20;

// One startup step and how it went, for `info`.
struct StartupStep {
  std::string name;
  bool ok = false;
  std::string message;
};

struct RunListQuery {
  std::string phase;     // "", "open", or a phase name
  std::string workload;  // name or id; "" = all
  int64_t limit = 50;    // 1..1000
  int64_t offset = 0;
};

// Which rollouts of a reinforcement run to show (`runs rollouts`).
inline constexpr int64_t kMaxRollouts = 200;  // most rollouts one answer carries
struct RolloutQuery {
  std::optional<int64_t> step;  // the generation batch this step trained on; absent = the latest
  std::optional<int64_t> best;   // the `best` highest rewards, highest first (1..kMaxRollouts)
  std::optional<int64_t> worst;  // the `worst` lowest rewards, lowest first (not with best)
  int64_t limit = 50;           // at most this many, 1..kMaxRollouts
};

struct EvaluationListQuery {
  std::string phase;     // "", "open", or a phase name
  std::string workload;  // name or id; "" = all
  std::string model;     // the model reference as given at start; "" = all
  int64_t limit = 50;    // 1..1000
};

// Which evaluations a workload's score table shows (`workloads scores`); empty fields take the
// workload's current evaluation setting.
struct ScoreQuery {
  std::string dataset;  // name, hash or unique prefix
  std::string grader;   // a grader as `workloads set-evaluation` takes it
};

// Which comparisons to list (`comparisons list`), newest first.
inline constexpr int64_t kMaxComparisonsPage = 100;  // most comparisons one page lists (and the default)
struct ComparisonListQuery {
  std::string source;                  // a snapshot id or unique prefix; "" = all
  int64_t limit = kMaxComparisonsPage;  // 1..kMaxComparisonsPage
  int64_t offset = 0;
};

// Which registered models to list (`trained-models list`); empty fields do not filter.
struct TrainedModelQuery {
  std::string workload;    // name or id
  std::string base_model;  // base model name, id or unique id prefix
};

// The job attempt a catalog callback comes from (docs/job-protocol.md, "Snapshots"): the id its
// request names (X-Trainer-Job: TRAINER_JOB_ID) and the token that proves it (Authorization:
// Bearer TRAINER_JOB_TOKEN). Either may be "" when the request did not send it.
struct JobCredentials {
  std::string job_id;
  std::string token;
};
// A catalog callback's refusal of its caller blames the header at fault: invalid_argument when
// the credentials are missing or wrong (HTTP 401), failed_precondition when the attempt is not
// the run's current one (HTTP 403, blaming kJobIdHeader).
inline constexpr const char* kJobIdHeader = "X-Trainer-Job";
inline constexpr const char* kJobTokenHeader = "Authorization";
// The HTTP status of such a refusal: 401, 403, or 0 for any other status (its code's own).
inline int job_refusal_http_status(const Status& st) {
  if (st.field() != kJobIdHeader && st.field() != kJobTokenHeader) return 0;
  if (st.code() == StatusCode::kInvalidArgument) return 401;
  return st.code() == StatusCode::kFailedPrecondition ? 403 : 0;
}

// An answer trainerd passes on as it came (an endpoint's serving process): status and JSON body.
struct ForwardedAnswer {
  int status = 200;
  std::string body;
  // Set instead of status and body for a streamed request (`stream: true`): the call to make,
  // its answer relayed to the client as it comes (http::relay).
  std::optional<HttpRequest> stream_call = std::nullopt;
  std::function<void(const HttpResponse&)> stream_done = {};  // with stream_call: told the call's end
};

class Service {
 public:
  virtual ~Service() = default;

  // Runs the startup steps (recovering open runs, reading capacity) and starts the driver.
  // Steps are recorded whether they pass or fail; see startup_steps().
  virtual Status start() = 0;
  // Stops the driver thread. Jobs keep running; a restarted service finds them again.
  virtual void stop() = 0;
  virtual bool ready() const = 0;
  virtual std::vector<StartupStep> startup_steps() const = 0;
  // Replaces ServiceOptions::job_otlp_endpoint (the wiring knows trainerd's port only once its
  // server listens). Call before start().
  virtual void set_job_otlp_endpoint(const std::string& url) = 0;
  // trainerd's own API base URL ("http://127.0.0.1:9001"), which jobs call back for the snapshot
  // catalog (TRAINER_CATALOG_URL). Call before start(); empty: jobs publish no snapshots.
  virtual void set_catalog_url(const std::string& url) = 0;
  // `info`: backend, build, configuration (without secrets), startup.
  virtual json info() const = 0;

  // ---- base models
  virtual Result<json> list_base_models(bool all) = 0;               // {baseModels:[...]}
  virtual Result<json> get_base_model(const std::string& ref) = 0;    // name or id (prefix)
  // {catalog, measurements: [...]}: each base model's admitted shapes and what completed runs
  // measured per shape (docs/api.md, "Envelopes").
  virtual Result<json> base_model_envelopes() = 0;
  virtual Result<json> select_base_model(const std::string& name) = 0;

  // ---- datasets
  // Registers chat JSONL; returns the dataset and whether its content was new. New content counts
  // against the storage quota of `workload` (a name or id), else of the shared catalog
  // (service/storage_quotas.h).
  virtual Result<std::pair<json, bool>> register_dataset(const std::optional<std::string>& name,
                                                         const std::string& rows,
                                                         const std::optional<std::string>& workload) = 0;
  virtual Result<json> list_datasets() = 0;
  virtual Result<json> get_dataset(const std::string& ref) = 0;  // name, hash or unique prefix
  // Moves (or gives) the name `name` to the dataset body {"dataset": REF}, without an upload.
  virtual Result<json> name_dataset(const std::string& name, const json& body) = 0;
  // Token length distribution under a base model's tokenizer (runs `trainer-job analyze`).
  virtual Result<json> measure_dataset(const std::string& ref, const std::string& base_model,
                                       std::optional<int> max_seq_length) = 0;
  // The same measurement in the background (dataset_analyses.h): body {baseModel, maxSeqLength?};
  // the new analysis and true, or the one already started or completed alike and false.
  virtual Result<std::pair<json, bool>> analyze_dataset(const std::string& ref, const json& body) = 0;
  virtual Result<json> list_dataset_analyses(const std::string& ref) = 0;  // {dataset, analyses} newest first
  virtual Result<json> get_dataset_analysis(const std::string& ref, const std::string& id) = 0;

  // ---- sessions and curations (docs/curations.md)
  // body {source, content}: a raw conversation corpus stored by the hash of its bytes; the session
  // {hash, source, candidates, dropped, ...} and whether it is new.
  virtual Result<std::pair<json, bool>> create_session(const json& body) = 0;
  virtual Result<json> get_session(const std::string& hash) = 0;
  // body {curationId, sessionHashes, source, threshold, dataset, systemPrompt?, judge,
  // graderInstructions?}: the new curation and true, or the one of that id and false.
  virtual Result<std::pair<json, bool>> apply_curation(const json& body) = 0;
  virtual Result<json> get_curation(const std::string& id) = 0;
  virtual Result<json> list_curations() = 0;  // {curations} newest first

  // ---- distillations (docs/distillations.md); `ref` is an id or an unambiguous prefix of one
  // body {workload, teacher, from, to, replicas?, maxTokens?, temperature?, topP?, seed?,
  // instructions?, smoke?}: the new distillation.
  virtual Result<json> create_distillation(const json& body) = 0;
  virtual Result<json> get_distillation(const std::string& ref) = 0;
  virtual Result<json> list_distillations() = 0;  // {distillations} newest first
  // {distillationId, rejections: [{row, message, reason, chunk}], total}; at most `limit` (0 = all).
  virtual Result<json> distillation_rejections(const std::string& ref, int64_t limit) = 0;
  virtual Result<json> pause_distillation(const std::string& ref) = 0;
  virtual Result<json> resume_distillation(const std::string& ref) = 0;
  virtual Result<json> cancel_distillation(const std::string& ref) = 0;

  // ---- scoring bundles (docs/graders.md, "Registered bundles")
  // body {name, files: [{path, content}], workload?}: stores a Python package folder's files,
  // content-addressed, as the next version of `name`; returns it and whether it is new (the same
  // files under the same name are the version that holds them). A new version counts against the
  // storage quota of `workload`, else of the shared catalog (service/storage_quotas.h).
  virtual Result<std::pair<json, bool>> register_bundle(const json& body) = 0;
  virtual Result<json> list_bundles() = 0;                      // {bundles: [version, ...]} by name, version
  virtual Result<json> get_bundle(const std::string& ref) = 0;  // NAME (latest), NAME:VERSION or a hash prefix

  // ---- API tokens (docs/security.md)
  // body {name, roles, workloads?, expiresAt?}: the new token with its secret under "token" (shown
  // this once; only its hash is stored).
  virtual Result<json> create_token(const json& body) = 0;
  virtual Result<json> list_tokens() = 0;                        // {tokens: [...]}, no secrets
  virtual Result<json> revoke_token(const std::string& ref) = 0;  // id or unique prefix
  // The identity of a request's bearer secret; Unauthenticated when it is none, unknown, revoked
  // or expired.
  virtual Result<Identity> authenticate_token(const std::string& secret) = 0;

  // ---- the audit log (docs/security.md, "Audit log")
  // Appends `entry`, what the API records of one write request ({tokenId, tokenName, roles, from,
  // method, route, path, target?, workload?, status, error?}; never its body), stamped "at" now.
  virtual Status record_audit(json entry) = 0;
  // The entries recorded at `since` (RFC 3339; "" = from the first) or later whose token's id or
  // name is `token` and whose workload (a name or id) is `workload` ("" = any): the newest
  // `limit` (1 to 10000), oldest first.
  virtual Result<std::vector<json>> list_audit(const std::string& since, const std::string& token,
                                               const std::string& workload, int64_t limit) = 0;

  // ---- workloads
  virtual Result<json> create_workload(const json& body) = 0;
  // `archived`: "" hides archived workloads, "include" lists them too, "only" lists only them.
  virtual Result<json> list_workloads(const std::string& archived) = 0;
  virtual Result<json> get_workload(const std::string& ref) = 0;
  // {usedBytes, quotaBytes} of the workload's uploaded datasets and bundles (storage_quotas.h).
  virtual Result<json> workload_storage(const std::string& ref) = 0;
  virtual Result<json> update_workload(const std::string& ref, const json& body) = 0;
  // Hides a workload from the list and refuses it new work (refused while it has work in
  // progress, naming each item); unarchive undoes it. Both answer the workload.
  virtual Result<json> archive_workload(const std::string& ref) = 0;
  virtual Result<json> unarchive_workload(const std::string& ref) = 0;
  virtual Result<json> set_evaluation(const std::string& ref, const json& body) = 0;
  virtual Result<json> get_ref(const std::string& ref, const std::string& which) = 0;
  virtual Result<json> set_ref(const std::string& ref, const std::string& which, const json& body) = 0;

  // ---- runs
  // Submits a plan (JSON). Returns the run and whether it was created (false when its
  // submissionId was seen before). A dry run returns {plan: resolved} and creates nothing.
  virtual Result<std::pair<json, bool>> submit_run(const json& plan, bool dry_run) = 0;
  virtual Result<json> list_runs(const RunListQuery& query) = 0;
  // The same answer as list_runs(), already serialised (the API's hot path).
  virtual Result<std::string> list_runs_text(const RunListQuery& query) = 0;
  virtual Result<json> get_run(const std::string& ref) = 0;
  // Long poll: events after `after`, waiting up to `wait` for one to arrive (0: answer at once).
  virtual Result<json> run_events(const std::string& ref, int64_t after, std::chrono::milliseconds wait) = 0;
  // Calls `on_change` after every change to any run (phase, progress, events), from the thread
  // that made it; it must be quick and must not call back into the service. Lets a server park
  // long polls without holding a thread each. Callbacks live as long as the service.
  virtual void subscribe_run_changes(std::function<void()> on_change) = 0;
  // The count of run changes so far (the changes subscribe_run_changes() reports), and a wait
  // until it passes `seen` or `until` comes: what a stream that follows a run waits on, on its own
  // thread, instead of asking the store again and again.
  virtual uint64_t run_change_version() = 0;
  virtual void wait_for_run_change(uint64_t seen, std::chrono::steady_clock::time_point until) = 0;
  virtual Result<json> cancel_run(const std::string& ref) = 0;
  virtual Result<json> annotate_run(const std::string& ref, const json& body) = 0;
  // Pauses an active run ({checkpoint: save|latest}); returns once accepted (PAUSING). The run's
  // `pause` object reports the save and the release; the phase becomes PAUSED.
  virtual Result<json> pause_run(const std::string& ref, const json& body) = 0;
  // Resumes a PAUSED run as a new attempt from the snapshot its pause stopped against.
  virtual Result<json> resume_run(const std::string& ref) = 0;
  virtual Result<json> run_metrics(const std::string& ref, int64_t limit) = 0;
  virtual Result<json> run_hparams(const std::string& ref) = 0;
  // The engine's resolved configuration beside the plan's config as submitted ({runId, attempt,
  // requested, resolved: {engine, config}}); not found until the job writes it.
  virtual Result<json> run_engine_config(const std::string& ref) = 0;
  // The latest attempt's engine runtime report ({runId, engine, attempt, rolloutEngine, trainer:
  // {changedBySetup}, model, memory}); not found until the job writes it.
  virtual Result<json> run_engine_runtime(const std::string& ref) = 0;
  // A grpo/gspo run's rollouts of one generation batch: {runId, phase, step, steps, total, order,
  // rollouts:[{step, index, promptIndex, prompt, completion, reward, terms:[{name, weight, raw,
  // share, failed}], completionTokens, terminated}]}. An SFT run is FailedPrecondition.
  virtual Result<json> run_rollouts(const std::string& ref, const RolloutQuery& query) = 0;
  // The run's TensorBoard event files, one per attempt, as its jobs copied them to the artifacts
  // (docs/tensorboard.md): {runId, phase, ended, files: [{name, bytes}]}, by name (so by start
  // time); `ended`: the run is in a terminal phase and its files will not change.
  virtual Result<json> run_event_files(const std::string& ref) = 0;
  // The bytes of one of them; not_found naming the file when the run has no such file.
  virtual Result<std::string> run_event_file(const std::string& ref, const std::string& name) = 0;

  // ---- a job's reports (docs/job-protocol.md, "Reporting to trainerd"; job_reports.cpp)
  // Whether `token` is the job attempt's (TRAINER_JOB_TOKEN): not_found for an unknown attempt,
  // invalid_argument for another token (the route answers 403). Nothing changes either way.
  virtual Status authenticate_job(const std::string& job_id, const std::string& token) = 0;
  // The id of the workload of the run whose attempt `job_id` is, once its `token` is checked (the
  // attempt's credentials on trainerd's own routes a job reads: docs/security.md, "Jobs").
  virtual Result<std::string> job_workload(const std::string& job_id, const std::string& token) = 0;
  // An authenticated job's events ({events: [{seq, event}]}) or log lines ({lines: [{seq, text}]}),
  // stored by (attempt, seq): a seq posted before changes nothing. Returns {received, stored}.
  virtual Result<json> post_job_events(const std::string& job_id, const json& body) = 0;
  virtual Result<json> post_job_logs(const std::string& job_id, const json& body) = 0;
  // An authenticated job's leave to train ({launchFence: N}, its TRAINER_LAUNCH_FENCE), asked
  // before it opens its events file: {train: true} when the run's recorded job of that attempt was
  // started under that fence (or under one the backend could not tell, an adopted job's);
  // failed_precondition (409) for a job started by a replica that had lost the run's lease, or for
  // an attempt that is not the run's current one: that job exits without training; unavailable
  // (503) while the attempt's start is not committed yet: the job asks again. Changes nothing.
  virtual Result<json> confirm_job_start(const std::string& job_id, const json& body) = 0;

  // ---- the snapshot catalog (protocol/snapshot.h)
  // The job's two callbacks come from the current attempt of the snapshot's run: `job` must be an
  // attempt whose token it carries (else 401: none named, no such attempt, no or another token)
  // and the run's current attempt (else 403: another run's attempt, or an earlier one); see
  // job_refusal_http_status(). A refused callback changes nothing.
  // The job's callback before uploading: reserves the snapshot (body: protocol::Reservation).
  // Returns it and whether it is new; the same reservation again returns it unchanged (the id
  // derives from the content, so the same id is the same content).
  virtual Result<std::pair<json, bool>> reserve_snapshot(const JobCredentials& job, const std::string& run_ref,
                                                         const json& body) = 0;
  // The job's callback after uploading one kind ({kind}): verifies the upload against the
  // reservation (manifest digest, identity, every file's size and digest) and commits it. Returns
  // once the commit is durable; committing a committed kind again returns it unchanged.
  virtual Result<json> commit_snapshot(const JobCredentials& job, const std::string& snapshot_ref,
                                       const json& body) = 0;
  // A run's committed snapshots, newest saved step first: {runId, snapshots, total, nextOffset?}.
  virtual Result<json> list_run_snapshots(const std::string& run_ref, int64_t limit, int64_t offset) = 0;
  // One committed snapshot by id or unambiguous prefix.
  virtual Result<json> get_snapshot(const std::string& ref) = 0;

  // ---- evaluations (docs/evaluations.md): a model answers a dataset's prompts, a grader scores
  // the answers. Started at once on trainerd's host; restarted after a trainerd restart.
  // body: {model, dataset?, grader?, graderInstructions?, workload?, maxNewTokens?, description?}.
  virtual Result<json> start_evaluation(const json& body) = 0;
  virtual Result<json> list_evaluations(const EvaluationListQuery& query) = 0;  // {evaluations:[...]}
  virtual Result<json> get_evaluation(const std::string& ref) = 0;
  // The report of a COMPLETED evaluation (FailedPrecondition before).
  virtual Result<json> evaluation_report(const std::string& ref) = 0;
  // Its per-row results, in file order: {evaluationId, rows:[...], total, nextOffset?}.
  virtual Result<json> evaluation_rows(const std::string& ref, int64_t limit, int64_t offset) = 0;
  virtual Result<json> cancel_evaluation(const std::string& ref) = 0;
  virtual Result<json> annotate_evaluation(const std::string& ref, const json& body) = 0;  // {description}

  // ---- endpoints (docs/serving.md, "Endpoints"): a model served by `trainer-job serve`.
  // body: {model, workload?}; a base model needs a workload, a candidate carries its own.
  virtual Result<json> create_endpoint(const json& body) = 0;
  // {endpoints:[...]}, newest first; `phase` "" = all, "active" = not DELETED or FAILED.
  virtual Result<json> list_endpoints(const std::string& phase) = 0;
  virtual Result<json> get_endpoint(const std::string& ref) = 0;
  // What an endpoint of this deployment can serve: maxAdapterRank, maxAdaptersLoaded, ...
  virtual Result<json> endpoint_info() = 0;
  // Stops serving one model (name, run id, model id or prefix); the last one takes the endpoint
  // down. Refused for a model the endpoint does not serve.
  virtual Result<json> detach_endpoint_model(const std::string& ref, const std::string& model) = 0;
  // Keeps the model attached but makes trainerd answer 409 for it (enabled = false), or undoes that.
  virtual Result<json> set_endpoint_model_enabled(const std::string& ref, const std::string& model, bool enabled) = 0;
  // Asks its process to stop (DELETING); DELETED, its claim released, once the process is gone.
  virtual Result<json> delete_endpoint(const std::string& ref) = 0;
  // POST /v1/chat/completions of a READY endpoint's process, the answer passed on as it came.
  virtual Result<ForwardedAnswer> endpoint_chat(const std::string& ref, const std::string& body) = 0;

  // ---- the model registry (docs/registry.md)
  // Registers a descriptor ({servingModel: {variant: BASE|ADAPTER, ...}, workload?}): a base model
  // for baselines, or an import of a PEFT LoRA folder, checked before anything is stored. Returns
  // the model and whether it is new (the id derives from the descriptor's content).
  virtual Result<std::pair<json, bool>> register_trained_model(const json& descriptor) = 0;
  virtual Result<json> list_trained_models(const TrainedModelQuery& query) = 0;  // {models:[...]}
  virtual Result<json> get_trained_model(const std::string& ref) = 0;            // id or unique prefix
  // The bytes of one file of a REGISTERED adapter model's PEFT folder (`adapter_config.json` or
  // `adapter_model.safetensors`), as the registry holds it; not_found naming the file otherwise;
  // FailedPrecondition for a model that is not REGISTERED or is a BASE model.
  virtual Result<std::string> trained_model_file(const std::string& ref, const std::string& name) = 0;
  // A REGISTERED adapter model merged into its base model's weights, as a Hugging Face model
  // folder (config.json, the tokenizer files, model.safetensors): {modelId, format: "hf",
  // baseModel, files: [{name, bytes}]}. Made on the first call by `trainer-job merge` (minutes
  // for a large model), then kept. FailedPrecondition for a BASE model or one not REGISTERED, or
  // a base revision no longer in the model cache.
  virtual Result<json> merged_trained_model(const std::string& ref) = 0;
  // One file of that folder; NotFound naming the file when it has none of that name.
  virtual Result<std::string> merged_trained_model_file(const std::string& ref, const std::string& name) = 0;
  // Registers a committed snapshot's weights as a candidate model: returns once the registration
  // is durable (status PENDING); it copies the weights in durable steps (COPYING, REGISTERED or
  // FAILED), holding the snapshot while it copies. The id derives from the snapshot (again: the
  // same model, false). A snapshot without weights is FailedPrecondition.
  virtual Result<std::pair<json, bool>> register_snapshot(const std::string& snapshot_ref) = 0;
  // The registration of a snapshot's weights: {snapshotId, modelId, status, ...}; NotFound when none.
  virtual Result<json> snapshot_candidate(const std::string& snapshot_ref) = 0;
  // A workload's audit log, oldest first: {workload, history:[{time, change, ref?, from?, to?, by?}]}.
  virtual Result<json> workload_history(const std::string& ref) = 0;
  // The workload's score tables (docs/evaluations.md): completed evaluations under one setting,
  // {workload, setting:{dataset, grader, graderInstructions?, current}, tables:[{baseModel,
  // revision, baseline, columns:[...]}], otherSettings:[{dataset, grader, evaluations}]}.
  virtual Result<json> workload_scores(const std::string& ref, const ScoreQuery& query) = 0;
  // ---- lineage (docs/lineage.md): child runs from a parent's snapshot, and the views of them
  // `runs branch PARENT` (body: {snapshot, steps, restore?: weights|trainingState, overrides?,
  // submissionId?}) and `runs continue RUN` (the same without restore; snapshot defaults to the
  // newest with training state). A child is a new run with the parent's plan, its own budget of
  // `steps` updates and the overrides applied; it holds its source snapshot until it ends. A dry
  // run returns {plan, child} and creates nothing. Returns the run and whether it was created.
  virtual Result<std::pair<json, bool>> branch_run(const std::string& parent_ref, const json& body, bool dry_run) = 0;
  virtual Result<std::pair<json, bool>> continue_run(const std::string& ref, const json& body, bool dry_run) = 0;
  // `runs sweep PARENT` (body: {snapshot, steps, restore?, grid: {axes: [{path, values}]},
  // submissionId?}): one child per point of the grid's Cartesian product (last axis fastest), each
  // point's values its override document. Every point is validated before any is submitted; the
  // parent's children may not pass kMaxFan. Answers {parentRunId, points: [{index, values, runId |
  // plan}], total}.
  virtual Result<json> sweep_run(const std::string& parent_ref, const json& body, bool dry_run) = 0;
  // A run's direct children, newest first: {runId, branches:[run], total, nextOffset?}.
  // `submission` non-empty: only the children that submission made (a branch's or continue's
  // submissionId, or a sweep's: its children carry SUBMISSION-INDEX), all of them, with a count by
  // phase; not_found when it made none.
  virtual Result<json> run_branches(const std::string& ref, int64_t limit, int64_t offset,
                                    const std::string& submission) = 0;
  // Every descendant of `ref` to `depth` generations (0 = all), depth first, children newest
  // first: {runId, runs:[{runId, depth, parentRunId, sourceSnapshotId, sourceStep, phase, ...}]}.
  virtual Result<json> run_tree(const std::string& ref, int64_t depth) = 0;
  // The chain from the root run down to `ref`: {runId, runs:[root, ..., ref]}.
  virtual Result<json> run_ancestry(const std::string& ref) = 0;

  // ---- pipelines (docs/pipelines.md): stages in one submission, each a run or an evaluation
  // linked to the pipeline. start: the plan {kind: pipeline, stages} checked whole (nothing is
  // created when any stage is refused); the new pipeline and true, or with `dry_run` each stage's
  // resolution ({dryRun, stages}) and false.
  virtual Result<std::pair<json, bool>> start_pipeline(const json& plan, bool dry_run, bool show_resolved) = 0;
  virtual Result<json> list_pipelines(const std::string& phase) = 0;  // {pipelines:[...]} newest first
  virtual Result<json> get_pipeline(const std::string& ref) = 0;
  virtual Result<json> resume_pipeline(const std::string& ref) = 0;  // {resumed, message?, pipeline}
  virtual Result<json> cancel_pipeline(const std::string& ref) = 0;
  virtual Result<json> annotate_pipeline(const std::string& ref, const json& body) = 0;  // {description}

  // ---- comparisons (docs/comparisons.md): a source snapshot against candidate and branch models
  // under one pinned contract (dataset hash, grader, completion-token ceiling).
  // body: {source, candidates?: [MODEL], branches?: [RUN], allBranches?: [PARENT], dataset, grader?,
  // maxNewTokens?, submissionId?}. Returns once the comparison is durable (PREPARING) and whether
  // it was created (false: the same source and submissionId were seen before). The source is
  // registered as a registration task; the comparison's own task starts one evaluation per target
  // and records the outcome.
  virtual Result<std::pair<json, bool>> create_comparison(const json& body) = 0;
  virtual Result<json> get_comparison(const std::string& ref) = 0;  // id or unique prefix
  // {comparisons:[...], total, nextOffset?}, newest first.
  virtual Result<json> list_comparisons(const ComparisonListQuery& query) = 0;

  // ---- holds on snapshots against retention (snapshot_holds.cpp)
  // Operator pins ({kinds?: [weights|trainingState]}, both by default). Idempotent; the answer is
  // the snapshot with `changed` (false: it was already pinned / was not pinned) and `message`.
  virtual Result<json> pin_snapshot(const std::string& ref, const json& body) = 0;
  virtual Result<json> unpin_snapshot(const std::string& ref, const json& body) = 0;
  // Drops the snapshot's registration holds and holds of branches that have ended.
  virtual Result<json> release_snapshot(const std::string& ref) = 0;

  // ---- capacity and telemetry
  // Pools, claims, quotas and warnings (GET /v1/capacity); `workload` (a name; "" = all) keeps
  // only its claims, quota and warnings, never changing the pools' totals.
  virtual Result<json> capacity(const std::string& workload) = 0;
  // Device-hours the claims held in [from, to) (GET /v1/capacity/device-hours): UTC times, ""
  // for the defaults (to = now, from = to - 24 h; at most 366 days apart), grouped `by` pool
  // (""), endpoint or workload. InvalidArgument naming the parameter for a bad value.
  virtual Result<json> device_hours(const std::string& from, const std::string& to, const std::string& by) = 0;
  // A short read-only scan of the backend's nodes (POST /v1/capacity/scan): {backend, nodes:[{node,
  // version, devices, disks, jobFolders}]}. A node's failed reading is in its answer, not an error.
  virtual Result<json> scan_capacity() = 0;
  // Prometheus text exposition of every service metric, followed by the series jobs pushed to
  // ingest_job_metrics() (a family the service emits itself is never repeated from a job).
  virtual std::string metrics_text() = 0;
  // One OTLP/HTTP JSON push of a job's metrics (POST /otlp/v1/metrics) by the job attempt
  // `job_id` (X-Trainer-Job) carrying `token` (its TRAINER_JOB_TOKEN): Unauthenticated without
  // them or for an unknown attempt, PermissionDenied (blaming X-Trainer-Job) for another token,
  // or (blaming the resource) for metrics of a run other than the one the attempt works for.
  // InvalidArgument naming the field of a malformed body, ResourceExhausted past the relay's
  // series bound. A refused push changes nothing.
  virtual Status ingest_job_metrics(std::string_view otlp_json, const std::string& job_id,
                                    const std::string& token) = 0;
};

// Builds the service on `store` and `backend` (both owned). Creates the data folders.
Result<std::unique_ptr<Service>> make_service(ServiceOptions options, std::unique_ptr<store::Store> store,
                                              std::unique_ptr<backend::Backend> backend);

}  // namespace trainer::service

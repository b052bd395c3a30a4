// The service's implementation: ServiceImpl behind the Service facade. It owns the shared core
// (service_core.h: options, store, backend, storage, the task kernel, telemetry, the mutex mu and
// the locking contract every file of src/service follows) and one object per resource, each with
// its own header; its facade methods for those resources forward to them:
//
//   bundles.h           Bundles: scoring bundles (bundles.cpp)
//   base_models.h       BaseModels: allowed models, selection, preparation (base_models.cpp, a task kind)
//   datasets.h          Datasets: registration, listing, measuring (datasets.cpp)
//   capacity.h          Capacity: admission of claims, cost, capacity and /metrics (capacity.cpp,
//                       admission_glue.cpp)
//   endpoints.h         Endpoints: models served by `trainer-job serve` (endpoints.cpp,
//                       endpoint_tasks.cpp, a task kind)
//   snapshot_catalog.h  SnapshotCatalog: the snapshot catalog, holds, retention, restorability
//                       checks, leftovers of dead publications (snapshots.cpp,
//                       snapshot_holds.cpp, snapshot_check.cpp, leftovers.cpp)
//   evaluations.h       Evaluations: a model answers a dataset, a grader scores it; their claims
//                       and their jobs (evaluations.cpp, evaluation_admission.cpp,
//                       evaluation_tasks.cpp, a task kind)
//   workloads.h         Workloads: workloads, their evaluation setting, refs, history and score
//                       tables (workloads.cpp, score_tables.cpp)
//   model_registry.h    ModelRegistry: registered models, imports, list, get (trained_models.cpp),
//                       and registrations of snapshot weights (registration.cpp, a task kind);
//                       registry.h: the names and helpers it shares with the other files
//   comparisons.h       Comparisons: a source snapshot against candidates and branches under one
//                       pinned contract (comparisons.cpp, comparison_steps.cpp, a task kind)
//   pipelines.h         Pipelines: stages in one submission, each a run, an evaluation or a
//                       curation
//                       (pipelines.cpp, pipeline_plan.cpp: the stage-type table; a task kind)
//
// ServiceImpl itself keeps the runs, each concern in its own file:
//
//   service.cpp           construction, start/stop, startup steps, info
//   ref_targets.cpp       what a workload's ref may point at (the registry's side of set_ref)
//   run_submission.cpp    plans in: validation, resolution, the new run; cancel, annotate
//   run_presentation.cpp  runs out: get, list (with its cache), events, metrics, hparams
//   driver.cpp            the driver thread (the task kernel's passes) and the run's phase machine
//   tasks/                the task kernel: phase tables, tasks under leases, one driver
//   job_events.cpp        following a job: its events file, its exit, finalizing
//   pause.cpp             pause (PAUSING, PAUSED) and resume (a new attempt from the snapshot)
//   attempts.cpp          a run's attempts: their entries, a new one after a lost job, hung jobs
//   lineage.cpp, sweep.cpp  child runs from a parent's snapshot (branch, continue, sweep) and their views
//   rollouts.cpp          a reinforcement run's rollouts
//
// Locking: service_core.h. The small mutexes below guard only the members listed under them and
// are never held while taking mu_ or calling the store.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/repeated_errors.h"
#include "protocol/job_protocol.h"
#include "service/audit.h"
#include "service/base_models.h"
#include "service/bundles.h"
#include "service/capacity.h"
#include "service/comparisons.h"
#include "service/curations.h"
#include "service/distillations.h"
#include "service/dataset_analyses.h"
#include "service/sessions.h"
#include "service/datasets.h"
#include "service/endpoints.h"
#include "service/evaluations.h"
#include "service/judges.h"
#include "service/lost_attempts.h"
#include "service/model_registry.h"
#include "service/phases.h"
#include "service/pipelines.h"
#include "service/service_core.h"
#include "service/snapshot_catalog.h"
#include "service/tokens.h"
#include "service/storage_quotas.h"
#include "service/workloads.h"

namespace trainer::plan {
struct Plan;
}

namespace trainer::service {


// attempts.cpp: the run's execution.maxAttempts (3 when its plan has none), and how an attempt's
// entry says it ended ("killed, code 137").
int max_attempts_of(const RunRecord& run);

class ServiceImpl final : public Service {
 public:
  ServiceImpl(ServiceOptions options, std::unique_ptr<store::Store> store, std::unique_ptr<backend::Backend> backend,
              std::unique_ptr<storage::Storage> storage);
  ~ServiceImpl() override;

  Status start() override;
  void stop() override;
  bool ready() const override { return ready_; }
  std::vector<StartupStep> startup_steps() const override;
  void set_job_otlp_endpoint(const std::string& url) override { job_otlp_endpoint_ = url; }
  void set_catalog_url(const std::string& url) override { core_.catalog_url = url; }
  json info() const override;

  Result<json> list_base_models(bool all) override { return base_models_.list(all); }
  Result<json> get_base_model(const std::string& ref) override { return base_models_.get(ref); }
  Result<json> base_model_envelopes() override { return base_models_.envelopes(); }
  Result<json> select_base_model(const std::string& name) override { return base_models_.select(name); }

  Result<std::pair<json, bool>> register_dataset(const std::optional<std::string>& name, const std::string& rows,
                                                 const std::optional<std::string>& workload) override;
  Result<json> list_datasets() override { return datasets_.list(); }
  Result<json> get_dataset(const std::string& ref) override { return datasets_.get(ref); }
  Result<json> name_dataset(const std::string& name, const json& body) override {
    TRAINER_RETURN_IF_ERROR(check_fields(body, {"dataset"}));
    if (!body.contains("dataset") || !body["dataset"].is_string()) {
      return invalid_field("dataset", "required: the dataset's name, hash or hash prefix");
    }
    return datasets_.name(name, body["dataset"].get<std::string>());
  }
  Result<json> measure_dataset(const std::string& ref, const std::string& base_model,
                               std::optional<int> max_seq_length) override {
    return datasets_.measure(ref, base_model, max_seq_length);
  }
  Result<std::pair<json, bool>> analyze_dataset(const std::string& ref, const json& body) override {
    return analyses_.create(ref, body);
  }
  Result<json> list_dataset_analyses(const std::string& ref) override { return analyses_.list(ref); }
  Result<json> get_dataset_analysis(const std::string& ref, const std::string& id) override {
    return analyses_.get(ref, id);
  }
  Result<std::pair<json, bool>> create_session(const json& body) override { return sessions_.create(body); }
  Result<json> get_session(const std::string& hash) override { return sessions_.get(hash); }
  Result<std::pair<json, bool>> apply_curation(const json& body) override { return curations_.apply(body); }
  Result<json> get_curation(const std::string& id) override { return curations_.get(id); }
  Result<json> list_curations() override { return curations_.list(); }
  Result<json> create_distillation(const json& body) override { return distillations_.create(body); }
  Result<json> get_distillation(const std::string& ref) override { return distillations_.get(ref); }
  Result<json> list_distillations() override { return distillations_.list(); }
  Result<json> distillation_rejections(const std::string& ref, int64_t limit) override {
    return distillations_.rejections(ref, limit);
  }
  Result<json> pause_distillation(const std::string& ref) override { return distillations_.pause(ref); }
  Result<json> resume_distillation(const std::string& ref) override { return distillations_.resume(ref); }
  Result<json> cancel_distillation(const std::string& ref) override { return distillations_.cancel(ref); }
  // Datasets::measure_cached() of a plan's dataset, base model and maxSeqLength; none when a name
  // does not resolve (submit_run() reports that), the model is not ready yet or the measurement fails.
  std::optional<json> measure_plan(const plan::Plan& p);

  Result<std::pair<json, bool>> register_bundle(const json& body) override;
  Result<json> list_bundles() override { return bundles_.list(); }
  Result<json> get_bundle(const std::string& ref) override { return bundles_.get(ref); }

  Result<json> create_token(const json& body) override { return tokens_.create(body); }
  Result<json> list_tokens() override { return tokens_.list(); }
  Result<json> revoke_token(const std::string& ref) override { return tokens_.revoke(ref); }
  Result<Identity> authenticate_token(const std::string& secret) override { return tokens_.authenticate(secret); }
  Status record_audit(json entry) override { return audit_.record(std::move(entry)); }
  Result<std::vector<json>> list_audit(const std::string& since, const std::string& token, const std::string& workload,
                                       int64_t limit) override {
    return audit_.list(since, token, workload, limit);
  }
  Result<json> create_workload(const json& body) override { return workloads_.create(body); }
  Result<json> list_workloads(const std::string& archived) override { return workloads_.list(archived); }
  Result<json> archive_workload(const std::string& ref) override { return workloads_.archive(ref); }
  Result<json> unarchive_workload(const std::string& ref) override { return workloads_.unarchive(ref); }
  Result<json> get_workload(const std::string& ref) override { return workloads_.get(ref); }
  Result<json> workload_storage(const std::string& ref) override;
  // Whose upload names `workload` (a name or id; none: the shared catalog), with its quota.
  Result<StorageOwner> storage_owner_of(const std::optional<std::string>& workload, const std::string& field);
  Result<json> update_workload(const std::string& ref, const json& body) override {
    return workloads_.update(ref, body);
  }
  Result<json> set_evaluation(const std::string& ref, const json& body) override {
    return workloads_.set_evaluation(ref, body);
  }
  Result<json> get_ref(const std::string& ref, const std::string& which) override {
    return workloads_.get_ref(ref, which);
  }
  Result<json> set_ref(const std::string& ref, const std::string& which, const json& body) override {
    return workloads_.set_ref(ref, which, body);
  }
  Result<json> workload_history(const std::string& ref) override { return workloads_.history(ref); }
  Result<json> workload_scores(const std::string& ref, const ScoreQuery& query) override {
    return workloads_.scores(ref, query);
  }

  Result<std::pair<json, bool>> submit_run(const json& plan, bool dry_run) override;
  Result<json> list_runs(const RunListQuery& query) override;
  Result<std::string> list_runs_text(const RunListQuery& query) override;
  Result<json> get_run(const std::string& ref) override;
  Result<json> run_events(const std::string& ref, int64_t after, std::chrono::milliseconds wait) override;
  void subscribe_run_changes(std::function<void()> on_change) override;
  uint64_t run_change_version() override { return core_.change_version(); }
  void wait_for_run_change(uint64_t seen, std::chrono::steady_clock::time_point until) override {
    core_.wait_for_change(seen, until);
  }
  Result<json> cancel_run(const std::string& ref) override;
  Result<json> annotate_run(const std::string& ref, const json& body) override;
  Result<json> run_metrics(const std::string& ref, int64_t limit) override;
  Result<json> run_hparams(const std::string& ref) override;
  Result<json> run_engine_config(const std::string& ref) override;
  Result<json> run_engine_runtime(const std::string& ref) override;
  Result<json> run_rollouts(const std::string& ref, const RolloutQuery& query) override;
  Result<json> run_event_files(const std::string& ref) override;
  Result<std::string> run_event_file(const std::string& ref, const std::string& name) override;

  Status authenticate_job(const std::string& job_id, const std::string& token) override;
  Result<std::string> job_workload(const std::string& job_id, const std::string& token) override;
  Result<json> post_job_events(const std::string& job_id, const json& body) override;
  Result<json> post_job_logs(const std::string& job_id, const json& body) override;
  Result<json> confirm_job_start(const std::string& job_id, const json& body) override;
  Result<std::pair<json, bool>> reserve_snapshot(const JobCredentials& job, const std::string& run_ref,
                                                 const json& body) override {
    return catalog_.reserve(job, run_ref, body);
  }
  Result<json> commit_snapshot(const JobCredentials& job, const std::string& snapshot_ref, const json& body) override {
    return catalog_.commit(job, snapshot_ref, body);
  }
  Result<json> list_run_snapshots(const std::string& run_ref, int64_t limit, int64_t offset) override {
    return catalog_.list_for_run(run_ref, limit, offset);
  }
  Result<json> get_snapshot(const std::string& ref) override { return catalog_.get(ref); }
  Result<json> pause_run(const std::string& ref, const json& body) override;
  Result<json> resume_run(const std::string& ref) override;

  Result<json> start_evaluation(const json& body) override { return evaluations_.start(body); }
  Result<json> list_evaluations(const EvaluationListQuery& query) override { return evaluations_.list(query); }
  Result<json> get_evaluation(const std::string& ref) override { return evaluations_.get(ref); }
  Result<json> evaluation_report(const std::string& ref) override { return evaluations_.report(ref); }
  Result<json> evaluation_rows(const std::string& ref, int64_t limit, int64_t offset) override {
    return evaluations_.rows(ref, limit, offset);
  }
  Result<json> cancel_evaluation(const std::string& ref) override { return evaluations_.cancel(ref); }
  Result<json> annotate_evaluation(const std::string& ref, const json& body) override {
    return evaluations_.annotate(ref, body);
  }
  Result<json> create_endpoint(const json& body) override { return endpoints_.create(body); }
  Result<json> list_endpoints(const std::string& phase) override { return endpoints_.list(phase); }
  Result<json> get_endpoint(const std::string& ref) override { return endpoints_.get(ref); }
  Result<json> endpoint_info() override { return endpoints_.info(); }
  Result<json> detach_endpoint_model(const std::string& ref, const std::string& model) override {
    return endpoints_.detach(ref, model);
  }
  Result<json> set_endpoint_model_enabled(const std::string& ref, const std::string& model, bool enabled) override {
    return endpoints_.set_enabled(ref, model, enabled);
  }
  Result<json> delete_endpoint(const std::string& ref) override { return endpoints_.remove(ref); }
  Result<ForwardedAnswer> endpoint_chat(const std::string& ref, const std::string& body) override {
    return endpoints_.chat(ref, body);
  }
  Result<std::pair<json, bool>> register_trained_model(const json& descriptor) override {
    return registry_.register_model(descriptor);
  }
  Result<json> list_trained_models(const TrainedModelQuery& query) override { return registry_.list(query); }
  Result<json> get_trained_model(const std::string& ref) override { return registry_.get(ref); }
  Result<std::string> trained_model_file(const std::string& ref, const std::string& name) override {
    return registry_.file(ref, name);
  }
  Result<json> merged_trained_model(const std::string& ref) override { return registry_.merged(ref); }
  Result<std::string> merged_trained_model_file(const std::string& ref, const std::string& name) override {
    return registry_.merged_file(ref, name);
  }
  Result<std::pair<json, bool>> register_snapshot(const std::string& snapshot_ref) override {
    return registry_.register_snapshot(snapshot_ref);
  }
  Result<json> snapshot_candidate(const std::string& snapshot_ref) override {
    return registry_.snapshot_candidate(snapshot_ref);
  }
  Result<std::pair<json, bool>> branch_run(const std::string& parent_ref, const json& body, bool dry_run) override;
  Result<std::pair<json, bool>> continue_run(const std::string& ref, const json& body, bool dry_run) override;
  Result<json> sweep_run(const std::string& parent_ref, const json& body, bool dry_run) override;
  Result<json> run_branches(const std::string& ref, int64_t limit, int64_t offset,
                            const std::string& submission) override;
  Result<json> submission_branches(const RunRecord& parent, const std::string& submission);  // lineage.cpp
  Result<json> run_tree(const std::string& ref, int64_t depth) override;
  Result<json> run_ancestry(const std::string& ref) override;
  Result<std::pair<json, bool>> create_comparison(const json& body) override { return comparisons_.create(body); }
  Result<json> get_comparison(const std::string& ref) override { return comparisons_.get(ref); }
  Result<json> list_comparisons(const ComparisonListQuery& query) override { return comparisons_.list(query); }

  Result<std::pair<json, bool>> start_pipeline(const json& plan, bool dry_run, bool show_resolved) override {
    return pipelines_.start(plan, dry_run, show_resolved);
  }
  Result<json> list_pipelines(const std::string& phase) override { return pipelines_.list(phase); }
  Result<json> get_pipeline(const std::string& ref) override { return pipelines_.get(ref); }
  Result<json> resume_pipeline(const std::string& ref) override { return pipelines_.resume(ref); }
  Result<json> cancel_pipeline(const std::string& ref) override { return pipelines_.cancel(ref); }
  Result<json> annotate_pipeline(const std::string& ref, const json& body) override {
    return pipelines_.annotate(ref, body);
  }
  Result<json> pin_snapshot(const std::string& ref, const json& body) override { return catalog_.pin(ref, body); }
  Result<json> unpin_snapshot(const std::string& ref, const json& body) override { return catalog_.unpin(ref, body); }
  Result<json> release_snapshot(const std::string& ref) override { return catalog_.release(ref); }

  Result<json> capacity(const std::string& workload) override { return capacity_.report(workload); }
  Result<json> device_hours(const std::string& from, const std::string& to, const std::string& by) override {
    return capacity_.device_hours(from, to, by);
  }
  Result<json> scan_capacity() override { return capacity_.scan(); }
  std::string metrics_text() override {
    return capacity_.metrics_text() + endpoints_.metrics_text() + audit_.metrics_text();
  }
  Status ingest_job_metrics(std::string_view otlp_json, const std::string& job_id, const std::string& token) override;

  // Runs one pass of the driver over every open run (the driver thread calls it every tick;
  // tests call it directly to step without a thread).
  void drive_once();

 private:
  // ---- the core's time, notice and run lookup, under the names the runs' files use
  double now() const { return core_.now(); }
  std::string now_rfc3339() const { return core_.now_rfc3339(); }
  void notify() { core_.notify(); }
  storage::Storage& artifacts() { return core_.artifacts(); }
  Result<RunRecord> resolve_run(const std::string& ref, const std::string& field) {
    return core_.resolve_run(ref, field);
  }

  // ---- startup (service.cpp)
  void add_step(const std::string& name, bool ok, const std::string& message);
  Status recover_runs(std::string* summary);
  void drive();

  // ---- the snapshot catalog (snapshot_catalog.h), under the name the runs' files use
  Result<std::string> resolve_snapshot_id(const std::string& ref, const std::string& field) {
    return catalog_.resolve_id(ref, field);
  }

  // ---- runs in (run_submission.cpp). `on_insert`, when given, runs with mu_ held inside the
  // transaction that inserts the new run, before the insert: a child run records its lineage
  // and its hold there (lineage.cpp). The dry run's answer gets `dry_extra`'s fields.
  // The plan's warmStartModelId checked against the registry and the plan (warm_start.cpp):
  // {modelId, artifactKey} of a REGISTERED adapter of `base_model` with the plan's LoRA shape.
  Result<json> resolve_warm_start(const plan::Plan& p, const json& base_model);
  Result<std::pair<json, bool>> submit_plan(const json& body, bool dry_run,
                                            const std::function<Status(RunRecord&)>& on_insert,
                                            const json& dry_extra);
  // The checks of a run plan that need no lock: parsed, kind "run", its grader and reward terms.
  Result<plan::Plan> parse_run_plan(const json& body);
  // submit_plan()'s admission and insert, mu_ held; `fit` as measure_plan() answered (none: the
  // run's sizing step measures it).
  Result<std::pair<json, bool>> admit_plan_locked(const json& body, plan::Plan p, const std::optional<json>& fit,
                                                  bool dry_run, const std::function<Status(RunRecord&)>& on_insert,
                                                  const json& dry_extra);
  // A pipeline's train stage (Pipelines::Hooks): the run of plan `body`, mu_ held, inside the
  // caller's transaction; `on_insert` records its id with the pipeline in the same transaction.
  Result<json> submit_stage_run_locked(const json& body, const std::function<Status(RunRecord&)>& on_insert);
  // cancel_run() with mu_ held.
  Result<json> cancel_run_locked(const std::string& ref);

  // ---- lineage (lineage.cpp)
  // `sweep_point`, when not null, labels the child (its document's sweepPoint).
  Result<std::pair<json, bool>> start_child(const std::string& parent_ref, const json& body, bool dry_run,
                                            bool continuation, const json& sweep_point = nullptr);
  // The snapshot a child starts from: the one `body` names, or (continue) the newest with
  // training state.
  Result<json> child_source_snapshot(const json& body, const std::string& parent_id, bool continuation);

  // ---- pause and resume (pause.cpp); mu_ held, inside a store transaction
  Status signal_pause(RunRecord& run);
  Status step_pausing(RunRecord& run);
  Status finish_pause(RunRecord& run, std::optional<telemetry::ServiceFailureReason> failed);
  // The job paused by itself (its `paused` event has a reason: a save met a full disk): PAUSING,
  // then PAUSED against the newest committed restorable snapshot, or FAILED when there is none.
  Status pause_after_job(RunRecord& run);
  // The job saved and stopped at the plan's pauseAtStep: PAUSED as a save-pause is.
  Status pause_at_plan_step(RunRecord& run);


  // ---- workloads (workloads.h), under the name the runs' files use
  Result<json> resolve_workload(const std::string& ref, const std::string& field) {
    return workloads_.resolve(ref, field);
  }

  // ---- the model registry (model_registry.h), under the name the runs' files use
  Result<json> resolve_trained_model(const std::string& ref, const std::string& field) {
    return registry_.resolve(ref, field);
  }
  // The REGISTERED model a ref of workload `w` may point at (ref_targets.cpp; Workloads::Hooks); mu_ held.
  Result<json> ref_target_locked(const json& w, const std::string& which, const std::string& target);

  // ---- runs (run_presentation.cpp)
  json present_run(const RunRecord& run, const std::map<std::string, store::ClaimRow>* claims = nullptr,
                   const std::map<std::string, std::string>* workload_names = nullptr);

  // ---- the phase machine (driver.cpp); mu_ held, inside a store transaction
  struct OpenRun {
    std::string id;
    std::string workload_id;
    std::string doc;
    std::string phase;  // as stored in the run's column
  };
  Result<std::vector<OpenRun>> open_runs();
  // One step of the run `id` (the kernel's "run" kind, mu_ held, inside the step's transaction).
  Status step_run_task(const std::string& id);
  Status step_run(RunRecord& run);
  Status fail_unreadable_run_locked(const OpenRun& row, const Status& why);
  Status after_dataset(RunRecord& run);
  Status claim_devices(RunRecord& run);
  // run_judges.cpp: DEPLOYING_GRADER finds or creates the endpoints of judges on our own models;
  // WAITING_FOR_GRADER waits until every judge answers; what the job's plan is given for them;
  // what calls an endpoint's model (Endpoints::Hooks::judge_users).
  Status deploy_judges(RunRecord& run);
  Status wait_for_judges(RunRecord& run);
  std::map<std::string, json> endpoint_judges(const RunRecord& run) const;
  Result<std::vector<std::string>> judge_users(const std::string& endpoint_id, const std::string& model);
  backend::JobSpec job_spec(const RunRecord& run) const;
  Status submit_job(RunRecord& run);
  Status transition(RunRecord& run, Phase to);
  // A request's transaction that changes run `id`: the run's task row locked first, as a step of
  // the run locks it, then `body` (docs/durability.md, "Lock order"). A step of the run in flight on
  // any replica ends first; the request then meets its writes (transition()'s version check).
  Status run_transaction(const std::string& id, const std::function<Status()>& body) {
    return store_->transaction([&]() -> Status {
      TRAINER_RETURN_IF_ERROR(store_->lock_task("run", id));
      return body();
    });
  }
  Status finish(RunRecord& run, Phase terminal);
  Status fail(RunRecord& run, const std::string& reason);
  Status fail_in_cleanup(RunRecord& run, const std::string& reason);

  // ---- attempts (attempts.cpp); mu_ held, inside a store transaction
  // Opens the current attempt's entry in the run's `attempts` list (its job starts at `started`).
  Status open_attempt(RunRecord& run, double started);
  // Closes the current attempt's entry, if open, with how it ended.
  void close_attempt(RunRecord& run, double t, const std::string& cause, std::optional<int> exit_code = std::nullopt,
                     const std::string& reason = "");
  // A new attempt after a backoff (SUBMITTING), or FAILED when execution.maxAttempts is spent.
  Status attempt_lost(RunRecord& run, const LostAttempt& lost);
  // Stops a running job silent past limits.jobSilenceSeconds (hung).
  Status watch_silence(RunRecord& run);

  // ---- the job (job_events.cpp); mu_ held, inside a store transaction
  Status follow_job(RunRecord& run);
  // `ended`: the job ended, so its events file's lines past what it posted are read too.
  Status read_events(RunRecord& run, bool ended = false);
  // The storage key of the weights of the run's latest committed snapshot; "" when it has none.
  Result<std::string> committed_weights_key(const RunRecord& run);
  Status apply_event(RunRecord& run, const protocol::Event& event, const json& doc);
  Status finalize(RunRecord& run);

  // ---- members

  // The state every part shares (service_core.h), and its members under the names the runs' files
  // use. Constant after construction.
  ServiceCore core_;
  const ServiceOptions& opt_ = core_.options;
  store::Store* const store_ = core_.store.get();
  backend::Backend* const backend_ = core_.backend.get();
  storage::Storage* const storage_ = core_.storage.get();
  const std::unique_ptr<storage::Storage>& artifact_store_ = core_.artifact_store;
  tasks::TaskKernel* const kernel_ = core_.kernel.get();
  ServiceTelemetry& metrics_ = core_.metrics;
  std::atomic<int64_t>& driver_errors_ = core_.driver_errors;
  RepeatedErrors admission_said_;  // guarded by mu_: admission errors, said once with a count
  std::mutex& mu_ = core_.mu;

  // The resources, each over the core and the siblings it calls (constructed in this order).
  Bundles bundles_{core_};
  BaseModels base_models_{core_};
  Datasets datasets_{core_, base_models_};
  DatasetAnalyses analyses_{core_, datasets_, base_models_};
  Sessions sessions_{core_};
  Curations curations_{core_, sessions_, datasets_};
  Capacity capacity_{core_};
  Endpoints endpoints_{core_, capacity_,
                      Endpoints::Hooks{[this](const std::string& ref) { return evaluations_.resolve_model(ref); },
                                       [this](const std::string& ref, const std::string& field) {
                                         return resolve_workload(ref, field);
                                       },
                                       [this](const std::string& endpoint_id, const std::string& model) {
                                         return judge_users(endpoint_id, model);
                                       }}};
  SnapshotCatalog catalog_{core_};
  Workloads workloads_{core_, base_models_, datasets_, capacity_,
                       Workloads::Hooks{[this](const json& w, const std::string& which, const std::string& target) {
                         return ref_target_locked(w, which, target);
                       }}};
  ModelRegistry registry_{core_, base_models_, workloads_, catalog_};
  Evaluations evaluations_{core_, base_models_, datasets_, bundles_, capacity_, workloads_, registry_};
  Comparisons comparisons_{core_, datasets_, catalog_, registry_, evaluations_};
  Distillations distillations_{core_, datasets_, workloads_};
  Pipelines pipelines_{core_, datasets_, evaluations_, curations_, distillations_,
                       Pipelines::Hooks{[this](const json& plan) -> Result<json> {
                                          TRAINER_ASSIGN_OR_RETURN(auto dry, submit_run(plan, true));
                                          return std::move(dry.first);
                                        },
                                        [this](const json& plan, const std::string& pipeline_id,
                                               const std::string& stage) {
                                          return submit_stage_run_locked(plan, [&](RunRecord& run) {
                                            run.view["pipeline"] = {{"pipelineId", pipeline_id}, {"stage", stage}};
                                            return Status::ok();
                                          });
                                        },
                                        [this](const std::string& id) { return cancel_run_locked(id); }}};
  Tokens tokens_{core_, workloads_};
  AuditLog audit_{core_, workloads_};

  // ServiceOptions::job_otlp_endpoint, or what the wiring set before start(); read by the driver.
  std::string job_otlp_endpoint_;

  mutable std::mutex steps_mu_;
  std::vector<StartupStep> steps_;  // guarded by steps_mu_

  // Presented text of ended runs, by run id, with the key of what it was made from.
  static constexpr size_t kPresentedCacheSize = 20000;
  std::mutex presented_mu_;
  std::map<std::string, std::pair<size_t, std::string>> presented_;  // guarded by presented_mu_

  // Pages of runs as listed, by query, with the store's change_count() they were made at.
  static constexpr size_t kPagesCacheSize = 256;
  std::mutex pages_mu_;
  std::map<std::string, std::pair<uint64_t, std::string>> pages_;  // guarded by pages_mu_

  // Whether the judges of model: reward terms answer (WAITING_FOR_GRADER); thread-safe.
  JudgeProbes judge_probes_;

  // The kinds on the core's task kernel that ServiceImpl steps. Every run's phase change goes
  // through kernel_->move() (transition()), which checks run_phase_table().
  tasks::FunctionKind run_tasks_;         // driver.cpp

  // Writes this replica's heartbeat into the replicas table (start(), then the driver thread).
  Status beat();
  // The live replicas, for info().
  Result<json> live_replicas() const;
  double last_beat_ = 0;  // wall seconds of the last heartbeat written; the driver thread's (and start()'s)
  // Other trainerds may share the store (PostgreSQL): this one beats in its replicas table and
  // listens for their changes. false on SQLite: no heartbeat writes, and info lists this one
  // only. Set by start() before the driver runs, then constant.
  bool shared_store_ = false;

  // The listener thread's loop (start() runs it when the store has other processes).
  void listen(store::ChangeListener& listener);

  std::thread driver_;
  std::thread listener_;  // other replicas' changes; not started on SQLite
  std::atomic<bool> stopping_{false};
  std::atomic<bool> ready_{false};
};

}  // namespace trainer::service

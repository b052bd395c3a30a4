// The phase driver: every pass the task kernel steps each due run through its phases (phases.h,
// run_phase_table()), then admission runs. Every step runs with mu_ held inside one store
// transaction under the run's lease; a run whose stored document cannot be read is failed by name
// and the driver goes on.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "plan/plan.h"
#include "service/artifact_store.h"
#include "service/input_staging.h"
#include "service/lost_attempts.h"
#include "service/service_state.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;


// The launch test hook (ServiceOptions::launch_hold_file) holds the first start of a run's job this
// process makes, after the step's last lease check, while the file exists (docs/durability.md,
// "Test hooks").
std::atomic<bool> launch_held{false};

void hold_launch(const std::string& file, const RunRecord& run) {
  if (file.empty() || launch_held.exchange(true)) return;
  std::fprintf(stderr, "trainerd: test hook: start of run %s attempt %d held after its lease check while %s exists\n",
               run.id.c_str(), run.attempt, file.c_str());
  std::fflush(stderr);
  std::error_code ec;
  while (fs::exists(file, ec)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::fprintf(stderr, "trainerd: test hook: start of run %s attempt %d released\n", run.id.c_str(), run.attempt);
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

}  // namespace

Result<std::vector<ServiceImpl::OpenRun>> ServiceImpl::open_runs() {
  store::RunFilter f;
  for (int i = 0; i < kPhaseCount; ++i) {
    Phase p = phase_at(i);
    if (!is_terminal(p) && p != Phase::kPaused) f.phases.push_back(phase_name(p));
  }
  f.limit = 100000;
  auto page = store_->list_run_rows(f);
  if (!page.is_ok()) return page.status();
  std::vector<OpenRun> out;
  out.reserve(page->rows.size());
  for (auto it = page->rows.rbegin(); it != page->rows.rend(); ++it) {  // oldest first
    out.push_back(OpenRun{it->id, it->workload_id, std::move(it->doc), it->phase});
  }
  return out;
}

void ServiceImpl::drive_once() {
  std::lock_guard<std::mutex> lock(mu_);
  kernel_->drive_once();  // every due task, each in its own transaction
  Status st = store_->transaction([&]() -> Status { return capacity_.admit_locked(); });
  const std::optional<std::string> line =
      st.is_ok() ? admission_said_.succeeded("admission", now()) : admission_said_.failed("admission", st.to_string(), now());
  if (line) std::fprintf(stderr, "trainerd: %s\n", line->c_str());
}

// One step of a run's task (the kernel's "run" kind).
Status ServiceImpl::step_run_task(const std::string& id) {
  auto row = store_->get_run_row(id);
  if (!row.is_ok()) return row.status();
  if (!row->has_value()) return internal_error("run " + id + " has a task but no stored document");
  auto record = parse_run_record((*row)->doc, id);
  if (!record.is_ok()) {
    std::fprintf(stderr, "trainerd: warning: %s; failing the run\n", record.status().message().c_str());
    ++driver_errors_;
    return fail_unreadable_run_locked(OpenRun{id, (*row)->workload_id, std::move((*row)->doc), (*row)->phase},
                                      record.status());
  }
  RunRecord run = std::move(*record);
  return step_run(run);
}

// Replaces an unreadable document with a FAILED run naming why, and releases its claim. Its job,
// if one runs, cannot be found without the document: the reason says so.
Status ServiceImpl::fail_unreadable_run_locked(const OpenRun& row, const Status& why) {
  const double t = now();
  RunRecord run;
  run.id = row.id;
  run.workload_id = row.workload_id;
  run.phase = Phase::kFailed;
  run.outcome = "FAILED";
  run.failure_reason = "trainerd could not read the stored document of run " + row.id + " (" + why.message() +
                       "); the run was failed, and a job it may have started was not stopped";
  run.created_at = t;
  run.entered_at = t;
  run.view = {{"createdAt", rfc3339(t)},
              {"updatedAt", rfc3339(t)},
              {"endedAt", rfc3339(t)},
              {"phaseHistory", json::array({{{"phase", phase_name(Phase::kFailed)}, {"enteredAt", rfc3339(t)}}})},
              {"progress", json::object()},
              {"latest", json::object()},
              {"cost", run_cost_json(json::object(), 0.0, true)},
              {"plan", json::object()}};
  TRAINER_RETURN_IF_ERROR(capacity_.release_claim(run.id));
  TRAINER_RETURN_IF_ERROR(kernel_->move("run", run.id, phase_name(Phase::kFailed)));
  TRAINER_RETURN_IF_ERROR(store_->update_run(run.to_json()));
  TRAINER_RETURN_IF_ERROR(store_->append_run_event(run.id, {{"time", rfc3339(t)},
                                                            {"type", "outcome"},
                                                            {"outcome", "FAILED"},
                                                            {"failureReason", *run.failure_reason}})
                              .status());
  notify();
  return capacity_.admit_locked();
}

Status ServiceImpl::step_run(RunRecord& run) {
  switch (run.phase) {
    case Phase::kSizingDataset: {
      auto p = plan::plan_from_json(run.view["plan"], "plan");
      if (p.is_ok()) run.view["progress"]["totalSteps"] = plan::total_steps(p->config, run.rows);
      run.view["progress"]["rowsTotal"] = run.rows;
      return after_dataset(run);
    }
    case Phase::kWaitingForBaseModel:
      return after_dataset(run);
    case Phase::kDeployingGrader:
      return deploy_judges(run);
    case Phase::kWaitingForGrader:
      return wait_for_judges(run);
    case Phase::kWaitingForDevices: {
      // The run's own claim, by its owner. The phase waits for its claim (phases.cpp): the run
      // is stepped when admission grants it (TaskKernel::wake_claim_owner), else only every
      // claim recheck, when the window check below fails a claim no window can hold any more.
      auto claim = store_->get_claim(run.id);
      if (!claim.is_ok()) return claim.status();
      if (!claim->has_value()) return claim_devices(run);  // never lose a waiting run's claim
      if ((*claim)->state == "GRANTED") return transition(run, Phase::kSubmitting);
      // A claim the windows it waited for have passed by waits forever: the run fails instead.
      const std::string never = capacity_.never_granted((*claim)->pool, (*claim)->devices);
      if (!never.empty()) return fail(run, "waiting for devices: " + never);
      return Status::ok();
    }
    case Phase::kSubmitting:
      return submit_job(run);
    case Phase::kQueued:
    case Phase::kPreparing:
    case Phase::kTraining:
    case Phase::kCleaningUp:
      return follow_job(run);
    case Phase::kFinalizing:
      return finalize(run);
    case Phase::kPausing:
      return step_pausing(run);
    case Phase::kPaused:
    case Phase::kCompleted:
    case Phase::kFailed:
    case Phase::kCancelled:
      return Status::ok();
  }
  return Status::ok();
}

Status ServiceImpl::after_dataset(RunRecord& run) {
  auto m = base_models_.find_selected(run.base_model);
  if (!m.is_ok()) return m.status();
  if (!m->has_value()) return fail(run, "the base model " + run.base_model + " is no longer selected");
  const json& model = **m;
  const std::string status = model.value("status", std::string());
  if (status == "failed") {
    return fail(run, "the base model " + run.base_model + " failed to prepare\n" + model.value("failure", std::string()));
  }
  if (status != "ready") {
    if (run.phase == Phase::kWaitingForBaseModel) return Status::ok();
    return transition(run, Phase::kWaitingForBaseModel);
  }
  run.base_model_sha = model.value("contentHash", std::string());
  run.view["baseModelHash"] = *run.base_model_sha;
  // A run with a judge (a model: reward term) has it answer before it claims devices.
  if (has_judges(run.view["plan"])) return transition(run, Phase::kDeployingGrader);
  return claim_devices(run);
}

// After the base model and before the job: claim devices (or wait for them).
Status ServiceImpl::claim_devices(RunRecord& run) {
  store::ClaimRow c;
  c.owner = run.id;
  c.kind = upper(run.method);
  c.workload_id = run.workload_id;
  c.pool = run.pool;
  c.devices = run.devices;
  c.state = "QUEUED";
  c.since = now_rfc3339();
  auto existing = store_->get_claim(c.owner);
  if (!existing.is_ok()) return existing.status();
  if (!existing->has_value()) TRAINER_RETURN_IF_ERROR(store_->insert_claim(c));
  TRAINER_RETURN_IF_ERROR(capacity_.admit_locked());
  auto after = store_->get_claim(c.owner);
  if (!after.is_ok()) return after.status();
  if (after->has_value() && (*after)->state == "GRANTED") return transition(run, Phase::kSubmitting);
  return transition(run, Phase::kWaitingForDevices);
}

backend::JobSpec ServiceImpl::job_spec(const RunRecord& run) const {
  fs::path dir = fs::path(opt_.data_dir) / "runs" / run.id / ("attempt-" + std::to_string(run.attempt));
  backend::JobSpec spec;
  spec.run_id = run.id;
  spec.attempt = run.attempt;
  spec.identity.workload = run.workload_name;
  spec.identity.method = run.method;
  spec.identity.base_model = run.base_model;
  spec.identity.base_model_sha = run.base_model_sha.value_or("");
  const PoolConfig* pool = capacity_.pool_named(run.pool);
  spec.identity.profile = pool ? pool->accelerator : "";
  if (const json p = run.view.value("pipeline", json(nullptr)); p.is_object()) {
    spec.identity.pipeline_id = p.value("pipelineId", std::string());
    spec.identity.pipeline_stage = p.value("stage", std::string());
  }
  spec.otlp_endpoint =
      opt_.config.telemetry.otlp_endpoint.empty() ? job_otlp_endpoint_ : opt_.config.telemetry.otlp_endpoint;
  spec.otlp_interval_ms = opt_.config.telemetry.otlp_interval_ms;
  spec.traceparent = core_.traces.traceparent(run);  // "" when off: then no endpoint either
  if (!spec.traceparent.empty()) spec.otlp_traces_endpoint = core_.traces.endpoint();
  spec.catalog_url = core_.job_catalog_urls();
  spec.catalog_ca_file = core_.job_catalog_ca_file();
  spec.artifact_root = storage_->local_path(".");
  if (const ArtifactStoreConfig& store = opt_.config.artifact_store; !store.uri.empty()) {
    spec.artifact_root = store.uri;
    spec.store = artifact_store_access(store);  // trainerd's keys, from the variables the config names
  }
  spec.store.publish_deadline_seconds = opt_.config.limits.publish_deadline_seconds;
  spec.plan_path = (dir / "plan.json").string();
  spec.output_dir = (dir / "output").string();
  spec.events_path = (dir / "events.jsonl").string();
  spec.log_path = (dir / "job.log").string();
  // The claim's grant: GPUs of a GPU pool (a CPU pool's device is a slot, not a GPU).
  const bool gpu_pool = pool && pool->accelerator != "cpu";
  spec.gpus = gpu_pool ? run.devices : 0;
  spec.cpus = 1;
  auto claim = store_->get_claim(run.id);
  if (claim.is_ok() && claim->has_value() && (*claim)->state == "GRANTED") {
    spec.device_ids = (*claim)->device_ids;
  }
  spec.resume_snapshot = run.resume_from.value_or("");
  spec.outbound_allow = outbound_policy_json(opt_.config.outbound).dump();
  spec.outbound_proxy = opt_.config.outbound.proxy;
  // The job's heartbeat: four in each silence trainerd allows (lost_attempts.h, watch_silence()).
  spec.heartbeat_seconds = heartbeat_seconds_for(opt_.config.limits.job_silence_seconds);
  // A child run's first attempt starts from its parent's snapshot (later ones resume their own).
  if (!run.resume_from && run.view.contains("sourceSnapshotId") && run.view["sourceSnapshotId"].is_string()) {
    spec.branch_snapshot = run.view["sourceSnapshotId"].get<std::string>();
    spec.branch_restore = run.view.value("restore", std::string("weights"));
  } else if (!run.resume_from && run.view.contains("warmStart")) {
    // A warm-started run's attempts start from the registered adapter until one has a snapshot.
    spec.warm_start_adapter = run.view["warmStart"].value("artifactKey", std::string());
  }
  return spec;
}

Status ServiceImpl::submit_job(RunRecord& run) {
  // A new attempt after a lost one waits out its backoff (attempts.cpp).
  if (run.next_attempt_at && now() < *run.next_attempt_at) return Status::ok();
  backend::JobSpec spec = job_spec(run);
  // The attempt's identity to the API: its posts of events and log lines carry it (job_reports.cpp).
  spec.job_id = run.id + "-" + std::to_string(run.attempt);
  TRAINER_ASSIGN_OR_RETURN(std::optional<std::string> token, core_.durable_job_token(spec.job_id, "run", run.id));
  if (!token) return Status::ok();  // registered now; the job starts on the next step
  spec.job_token = *token;
  // On a shared store (replicas) the job proves its start with the step's fence before it trains
  // (confirm_job_start()); one trainerd alone on its store needs no fence, and its job trains even
  // while that trainerd is down.
  spec.launch_fence = shared_store_ ? kernel_->step_fence() : 0;
  auto record_job = [&](backend::JobHandle handle, int64_t launch_fence) -> Status {
    JobRecord job;
    job.handle = std::move(handle);
    job.job_id = spec.job_id;
    job.launch_fence = launch_fence;
    job.started_at = now();
    job.events_path = spec.events_path;
    job.log_path = spec.log_path;
    job.output_dir = spec.output_dir;
    run.job = std::move(job);
    // Where the attempt runs, kept after the claim is released (runs get).
    run.view["placement"] = {{"pool", run.pool},
                             {"backend", backend_->name()},
                             {"attempt", run.attempt},
                             {"gpus", spec.gpus},
                             {"deviceIds", spec.device_ids},
                             {"job", backend_->describe(run.job->handle)}};
    run.next_attempt_at.reset();
    return open_attempt(run, run.job->started_at);
  };
  // A job started before a crash whose handle was never committed: adopt it, with the fence it was
  // started under (0 when the backend cannot tell: its start is then not checked).
  if (auto orphan = backend_->find(spec)) {
    TRAINER_RETURN_IF_ERROR(record_job(*orphan, backend_->launch_fence_of(*orphan).value_or(0)));
    return transition(run, Phase::kQueued);
  }
  std::error_code ec;
  fs::create_directories(spec.output_dir, ec);
  if (ec) return fail(run, "could not create the run's folder " + spec.output_dir + ": " + ec.message());
  json job_plan = run.view["plan"];
  // The inputs as files of this host: the stored keys, found in the service's storage.
  job_plan["baseModel"] = base_models_.cache_path(run.base_model_sha.value_or(""));
  job_plan["config"]["dataset"] = storage_->local_path(run.dataset_key);
  if (run.validation_key) job_plan["config"]["validationDataset"] = storage_->local_path(*run.validation_key);
  fill_judges(job_plan, opt_.config, endpoint_judges(run));
  // A cluster job reads its inputs from the S3 store, not from trainerd's data folder.
  if (artifact_store_ && backend_->name() != "local") {
    auto staged = stage_job_inputs(*artifact_store_, opt_.config.artifact_store.uri, run.base_model_sha.value_or(""),
                                   job_plan);
    if (!staged.is_ok()) return fail(run, "could not stage the run's inputs\n" + staged.status().message());
  }
  Status st = write_file_atomic(spec.plan_path, job_plan.dump(2) + "\n");
  if (!st.is_ok()) return fail(run, "could not write the resolved plan\n" + st.message());
  // Fenced: a replica that lost this run's lease (or whose transaction the server ended) starts
  // nothing; the replica that holds it finds the job a start before it made (find() above).
  // A replica stopped after this check starts its job all the same once it continues: that job is
  // refused leave to train (its fence is not the recorded job's), so it exits without training.
  TRAINER_RETURN_IF_ERROR(kernel_->recheck_lease());
  hold_launch(opt_.launch_hold_file, run);
  auto handle = backend_->start(spec);
  if (!handle.is_ok()) return fail(run, "the backend could not start the training job\n" + handle.status().message());
  TRAINER_RETURN_IF_ERROR(record_job(std::move(*handle), spec.launch_fence));
  return transition(run, Phase::kQueued);
}

// Persists `run` moved into `to`, records the event and counts the metrics.
Status ServiceImpl::transition(RunRecord& run, Phase to) {
  const double t = now();
  const Phase from = run.phase;
  const double entered = run.entered_at;
  TRAINER_RETURN_IF_ERROR(kernel_->move("run", run.id, phase_name(to)));  // checked against run_phase_table()
  run.phase = to;
  run.view["updatedAt"] = rfc3339(t);
  run.view["phaseHistory"].push_back({{"phase", phase_name(to)}, {"enteredAt", rfc3339(t)}});
  run.entered_at = t;
  TRAINER_RETURN_IF_ERROR(store_->update_run(run.to_json()));
  json event = {{"time", rfc3339(t)}, {"type", "phase"}, {"phase", phase_name(to)}};
  TRAINER_RETURN_IF_ERROR(store_->append_run_event(run.id, event).status());
  metrics_.phase_left(from, t - entered);
  metrics_.phase_entered(to);
  notify();
  return Status::ok();
}

// Ends the run in a terminal phase: releases its claim, settles its cost, records the outcome.
Status ServiceImpl::finish(RunRecord& run, Phase terminal) {
  const double t = now();
  TRAINER_RETURN_IF_ERROR(capacity_.release_claim(run.id));
  TRAINER_RETURN_IF_ERROR(catalog_.release_branch_hold(run));  // a child gives its source snapshot back
  capacity_.settle_cost(run, t);
  const std::string outcome = terminal == Phase::kCompleted ? "COMPLETED"
                              : terminal == Phase::kFailed  ? "FAILED"
                                                            : "CANCELLED";
  run.outcome = outcome;
  run.view["endedAt"] = rfc3339(t);
  std::string cause = outcome;
  std::transform(cause.begin(), cause.end(), cause.begin(), [](unsigned char c) { return std::tolower(c); });
  close_attempt(run, t, cause, run.job ? run.job->exit_code : std::nullopt);
  if (terminal == Phase::kFailed) metrics_.run_failed(run.failed_in.value_or(run.phase));
  TRAINER_RETURN_IF_ERROR(transition(run, terminal));
  core_.traces.run_ended(run, t);
  TRAINER_RETURN_IF_ERROR(store_->append_run_event(run.id, {{"time", rfc3339(t)},
                                                            {"type", "outcome"},
                                                            {"outcome", outcome},
                                                            {"failureReason", run.failure_reason
                                                                                  ? json(*run.failure_reason)
                                                                                  : json(nullptr)}})
                              .status());
  metrics_.run_ended(terminal, upper(run.method), t - run.created_at);
  return capacity_.admit_locked();
}

Status ServiceImpl::fail(RunRecord& run, const std::string& reason) {
  run.failure_reason = reason;
  run.failed_in = run.phase;
  run.terminal = Phase::kFailed;
  return finish(run, Phase::kFailed);
}

// A failure found while the job is followed: through CLEANING_UP to FAILED.
Status ServiceImpl::fail_in_cleanup(RunRecord& run, const std::string& reason) {
  run.failure_reason = reason;
  run.failed_in = run.phase;
  run.terminal = Phase::kFailed;
  TRAINER_RETURN_IF_ERROR(transition(run, Phase::kCleaningUp));
  return finish(run, Phase::kFailed);
}

}  // namespace trainer::service

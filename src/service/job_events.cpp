// Following a run's job: its events file (the job protocol), its exit, and finalizing.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <variant>

#include "protocol/job_protocol.h"
#include "protocol/snapshot.h"
#include "service/job_event_source.h"
#include "service/service_state.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

// `part` written into `into`: objects key by key (recursively), anything else replaced; a null
// in `part` is kept as null (unlike a JSON merge patch, which would delete the key).
void merge_into(json& into, const json& part) {
  if (!into.is_object() || !part.is_object()) {
    into = part;
    return;
  }
  for (auto it = part.begin(); it != part.end(); ++it) merge_into(into[it.key()], it.value());
}

// What an attempt's engine_runtime shows before the job has set a section.
json empty_engine_runtime(const std::string& engine, int attempt) {
  return {{"engine", engine},
          {"attempt", attempt},
          {"rolloutEngine", nullptr},
          {"trainer", {{"changedBySetup", json::array()}}},
          {"model", json::object()},
          {"memory", json::object()}};
}

}  // namespace

Status ServiceImpl::follow_job(RunRecord& run) {
  if (!run.job) {
    // CLEANING_UP of a run whose job never started.
    return finish(run, run.terminal.value_or(Phase::kCancelled));
  }
  const backend::JobHandle handle = run.job->handle;
  // Poll first, then read: every event written before the exit is seen.
  backend::JobStatus status = backend_->poll(handle);
  // When trainerd last heard from the job before now: reading what it wrote while trainerd was
  // down (below) says nothing of when it ended.
  const std::optional<double> heard_before = run.job->heard_at;
  TRAINER_RETURN_IF_ERROR(read_events(run, status.state != backend::JobState::kRunning));
  const Phase phase = run.phase;
  if (status.state == backend::JobState::kRunning) {
    capacity_.publish_gpu_time(run, now());
    TRAINER_RETURN_IF_ERROR(watch_silence(run));
    if (run.cancel_requested) {
      if (!run.stop_sent_at) {
        run.stop_sent_at = now();
        TRAINER_RETURN_IF_ERROR(store_->update_run(run.to_json()));
        backend_->request_stop(handle);
      } else if (now() - *run.stop_sent_at > opt_.config.limits.cancel_grace_seconds) {
        if (!run.kill_sent) {
          run.kill_sent = true;
          TRAINER_RETURN_IF_ERROR(store_->update_run(run.to_json()));
        }
        backend_->kill(handle);
      }
    }
    return Status::ok();
  }
  // The job ended.
  if (status.state == backend::JobState::kGone) {
    // Not ours to wait for (it ended while trainerd was down): the last sign of life is the best
    // estimate of when. That is the last event trainerd received (its heartbeat too, so at most
    // a heartbeat's interval before the end while trainerd listened), or the events file's last
    // write when the job wrote one on this host (events it could not post while trainerd was down).
    run.job->end_guess = heard_before;
    std::error_code ec;
    const auto mtime = fs::last_write_time(run.job->events_path, ec);
    if (!run.job->events_path.empty() && !ec) {
      const auto sys = std::chrono::file_clock::to_sys(mtime);
      const double written = std::chrono::duration<double>(sys.time_since_epoch()).count();
      run.job->end_guess = std::max(run.job->end_guess.value_or(written), written);
    }
  }
  run.job->exit_code = status.exit_code;
  if (run.cancel_requested) {
    if (phase != Phase::kCleaningUp) TRAINER_RETURN_IF_ERROR(transition(run, Phase::kCleaningUp));
    return finish(run, Phase::kCancelled);
  }
  if (phase == Phase::kCleaningUp) return finish(run, run.terminal.value_or(Phase::kFailed));
  if (run.job_outcome == JobOutcome::kCompleted && (!status.exit_code || *status.exit_code == 0)) {
    TRAINER_RETURN_IF_ERROR(transition(run, Phase::kFinalizing));
    return finalize(run);
  }
  if (run.job_outcome == JobOutcome::kPaused && run.paused_by_plan && run.paused_snapshot) {
    return pause_at_plan_step(run);
  }
  // A job that stopped because a save met a full disk pauses the run, to resume once space is freed.
  if (run.job_outcome == JobOutcome::kPaused) return pause_after_job(run);
  // A job that failed by its own verdict (bad data, a refused grader, an engine error) ends the run.
  if (run.job_outcome == JobOutcome::kFailed) return fail_in_cleanup(run, run.job_reason);
  // Any other end without an outcome loses the attempt; the run may get another (attempts.cpp).
  const std::string log_tail = core_.job_log_tail(run.job->job_id, run.job->log_path, 10);
  LostAttempt lost = lost_attempt_of(status, run.job_outcome == JobOutcome::kCancelled, "the training job",
                                     backend_->describe(handle), log_tail);
  if (run.job->hung_at) {
    lost = hung_attempt("the training job", opt_.config.limits.job_silence_seconds, status.exit_code, log_tail);
  }
  return attempt_lost(run, lost);
}

// Applies the job's new events (job_event_source.h) and stores how far they were read.
Status ServiceImpl::read_events(RunRecord& run, bool ended) {
  const JobEventSource source{run.job->job_id, run.job->events_path};
  auto batch = read_job_events(*store_, source, JobEventCursor{run.job->seq, run.job->offset}, ended);
  if (!batch.is_ok()) return batch.status();
  for (const JobEventLine& line : batch->events) {
    TRAINER_RETURN_IF_ERROR(apply_event(run, line.event, line.doc));
  }
  if (batch->consumed) {
    run.job->heard_at = now();  // any event, its heartbeat too: the job is alive (watch_silence())
    run.job->seq = batch->cursor.seq;
    run.job->offset = batch->cursor.offset;
    run.view["updatedAt"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->update_run(run.to_json()));
    notify();
  }
  return Status::ok();
}

// Applies one event. `doc` is the event's line as written: stored step metrics and run events
// keep the job's own fields, as before the protocol was typed.
Status ServiceImpl::apply_event(RunRecord& run, const protocol::Event& event, const json& doc) {
  const Phase phase = run.phase;
  const bool live = phase == Phase::kQueued || phase == Phase::kPreparing || phase == Phase::kTraining;
  json& progress = run.view["progress"];
  json& latest = run.view["latest"];
  if (const auto* e = std::get_if<protocol::Phase>(&event)) {
    auto to = parse_phase(e->phase);
    if (live && to && (*to == Phase::kPreparing || *to == Phase::kTraining) && *to > phase) {
      return transition(run, *to);
    }
  } else if (const auto* e = std::get_if<protocol::Preparing>(&event)) {
    progress["rowsDone"] = e->rows_done;
    progress["rowsTotal"] = e->rows_total;
    if (live && phase == Phase::kQueued) return transition(run, Phase::kPreparing);
  } else if (const auto* e = std::get_if<protocol::DataFit>(&event)) {
    run.view["dataFit"] = json(*e);
  } else if (const auto* e = std::get_if<protocol::DataSplit>(&event)) {
    run.view["dataSplit"] = json(*e);
  } else if (const auto* e = std::get_if<protocol::Resolved>(&event)) {
    if (!e->settings_sha.empty()) run.job_settings_sha = e->settings_sha;
  } else if (const auto* e = std::get_if<protocol::EngineConfig>(&event)) {
    run.engine_config = {{"engine", e->engine}, {"config", e->config}, {"attempt", run.attempt}};
  } else if (const auto* e = std::get_if<protocol::EngineRuntime>(&event)) {
    // The latest attempt's: its first part replaces what an earlier attempt reported.
    if (!run.engine_runtime.is_object() || run.engine_runtime.value("attempt", 0) != run.attempt) {
      run.engine_runtime = empty_engine_runtime(e->engine, run.attempt);
    }
    merge_into(run.engine_runtime, e->report);
    run.engine_runtime["engine"] = e->engine;
  } else if (const auto* e = std::get_if<protocol::Step>(&event)) {
    json m = doc;
    m.erase("type");
    m["time"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->put_step_metrics(run.id, e->step, m));
    progress["step"] = e->step;
    if (doc.contains("totalSteps")) progress["totalSteps"] = e->total_steps;
    latest["loss"] = e->loss;
    // Reinforcement steps: the mean reward is what a person follows (the policy loss is not).
    if (e->rl.is_object() && e->rl.contains("rewardMean") && e->rl["rewardMean"].is_number()) {
      latest["reward"] = e->rl["rewardMean"];
    }
    if (doc.contains("learningRate")) latest["learningRate"] = e->learning_rate;
    if (doc.contains("gradNorm")) latest["gradNorm"] = e->grad_norm;
    if (doc.contains("tokenAccuracy")) latest["tokenAccuracy"] = e->token_accuracy;
    if (doc.contains("tokensPerSecond")) latest["tokensPerSecond"] = e->tokens_per_second;
    // The latest memory figures: the peak so far and what held the device at this step's peak.
    if (e->memory) {
      json mem = *e->memory;
      mem["step"] = e->step;
      run.view["memory"] = std::move(mem);
    }
    json ev = m;
    ev["type"] = "step";
    TRAINER_RETURN_IF_ERROR(store_->append_run_event(run.id, ev).status());
    if (live && phase < Phase::kTraining) return transition(run, Phase::kTraining);
  } else if (const auto* e = std::get_if<protocol::Validation>(&event)) {
    latest["validationLoss"] = e->validation_loss;
    auto rows = store_->step_metrics(run.id, 1000000);
    if (!rows.is_ok()) return rows.status();
    json m = {{"step", e->step}};
    for (const auto& r : *rows) {
      if (r.value("step", json()) == json(e->step)) m = r;
    }
    m["validationLoss"] = e->validation_loss;
    TRAINER_RETURN_IF_ERROR(store_->put_step_metrics(run.id, e->step, m));
    json ev = doc;
    ev["time"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->append_run_event(run.id, ev).status());
  } else if (const auto* e = std::get_if<protocol::Completed>(&event)) {
    run.job_outcome = JobOutcome::kCompleted;
    if (!e->adapter_dir.empty()) run.adapter_dir = e->adapter_dir;
    if (doc.contains("finalLoss")) latest["loss"] = e->final_loss;
  } else if (const auto* e = std::get_if<protocol::Failed>(&event)) {
    run.job_outcome = JobOutcome::kFailed;
    run.job_reason = e->reason.empty() ? "the job reported a failure without a reason" : e->reason;
  } else if (std::get_if<protocol::Cancelled>(&event)) {
    run.job_outcome = JobOutcome::kCancelled;
  } else if (const auto* e = std::get_if<protocol::Warning>(&event)) {
    // Kept once in the run (runs get), and as an event (the events API, runs get --follow).
    json w = {{"field", e->field}, {"message", e->message}};
    json& warnings = run.view["warnings"];
    if (!warnings.is_array()) warnings = json::array();
    if (std::find(warnings.begin(), warnings.end(), w) == warnings.end()) warnings.push_back(w);
    json ev = w;
    ev["type"] = "warning";
    ev["time"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->append_run_event(run.id, ev).status());
  } else if (const auto* e = std::get_if<protocol::Smoke>(&event)) {
    // The plan's smoke check: its verdict in the run (runs get, runs wait's terminal event) and
    // its events. A failed one is followed by the job's `failed`, which ends the run.
    json smoke = *e;
    smoke["verdict"] = e->passed ? "passed" : "failed";
    smoke["attempt"] = run.attempt;
    run.view["smoke"] = smoke;
    json ev = smoke;
    ev["type"] = "smoke";
    ev["time"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->append_run_event(run.id, ev).status());
  } else if (const auto* e = std::get_if<protocol::Paused>(&event)) {
    run.job_outcome = JobOutcome::kPaused;
    run.paused_step = e->step;
    if (!e->snapshot_id.empty()) run.paused_snapshot = e->snapshot_id;
    if (!e->reason.empty()) run.job_reason = e->reason;  // it paused unasked: a save met a full disk
    run.paused_by_plan = e->planned;
  }
  return Status::ok();
}

// The storage key of the weights of the run's latest committed snapshot; "" when it has none.
Result<std::string> ServiceImpl::committed_weights_key(const RunRecord& run) {
  const json latest = run.view.value("latestSnapshot", json(nullptr));
  if (!latest.is_object() || !latest.contains("snapshotId") || !latest["snapshotId"].is_string()) return std::string();
  auto snap = store_->get_snapshot(latest["snapshotId"].get<std::string>());
  if (!snap.is_ok()) return snap.status();
  if (!snap->has_value()) return std::string();
  const json weights = (**snap).value("kinds", json::object()).value(protocol::kWeightsKind, json(nullptr));
  if (!weights.is_object() || weights.value("state", std::string()) != "committed") return std::string();
  return weights.value("location", std::string());
}

// FINALIZING: the job completed; record its adapter, then clean up.
Status ServiceImpl::finalize(RunRecord& run) {
  std::string adapter = run.adapter_dir.value_or("");
  if (adapter.empty() && run.job) adapter = (fs::path(run.job->output_dir) / "adapter").string();
  std::error_code ec;
  if (!backend_->shares_files() || adapter.empty() || !fs::is_directory(adapter, ec)) {
    // A job on a node that shares no folder with trainerd: its adapter is the weights of its
    // final snapshot, committed in the artifact store; the run records their storage key.
    auto key = committed_weights_key(run);
    if (!key.is_ok()) return key.status();
    if (key->empty()) {
      return fail_in_cleanup(run, "the job reported completion but its adapter folder " + adapter + " does not exist");
    }
    adapter = *key;
  }
  run.view["adapterPath"] = adapter;
  run.terminal = Phase::kCompleted;
  TRAINER_RETURN_IF_ERROR(registry_.register_completed_run(run));
  TRAINER_RETURN_IF_ERROR(transition(run, Phase::kCleaningUp));
  return finish(run, Phase::kCompleted);
}

}  // namespace trainer::service

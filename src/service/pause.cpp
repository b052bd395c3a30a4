// Pause and resume: durable operations on a run's attempts.
//
// Pause (`runs pause RUN --checkpoint save|latest`) is accepted durably (the run enters PAUSING
// with its `pause` object), then driven by the driver until its release is confirmed:
//   save:   the job is asked (backend request_pause: SIGUSR1) to save its full state at the next
//           optimizer boundary, publish it and stop; its `paused` event names the committed
//           snapshot. Refused when the backend cannot deliver it (never downgraded to latest).
//   latest: the job is stopped (SIGTERM) and the run pauses against the newest committed
//           snapshot holding training state; refused when there is none.
// Once the job has exited, the claim is released, the cost settled and the run is PAUSED with
// pause.resourcesReleased = true. A save that fails or runs past limits.pauseDeadlineSeconds is
// recorded with its reason, never as success: the run then pauses against the newest committed
// restorable snapshot, or fails when there is none. Each step survives a trainerd restart: the
// PAUSING run and its pause object are in the store, and the driver picks up where it was.
//
// Resume (`runs resume RUN`): a PAUSED run becomes a new attempt (attempt + 1) restoring the
// snapshot the pause stopped against; it claims the same devices again. Cost accumulates.
#include <cstdio>

#include "protocol/snapshot.h"
#include "service/service_state.h"

namespace trainer::service {
namespace {

namespace tel = trainer::telemetry;

std::optional<tel::PausePolicy> policy_of(const json& pause) {
  const std::string p = pause.value("policy", std::string());
  if (p == "save") return tel::PausePolicy::kSave;
  if (p == "latest") return tel::PausePolicy::kLatest;
  return std::nullopt;
}

}  // namespace

Result<json> ServiceImpl::pause_run(const std::string& ref, const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"checkpoint"}));
  auto it = body.find("checkpoint");
  if (it == body.end() || !it->is_string()) {
    return invalid_field("checkpoint", "required: save (save at the next optimizer boundary) or latest (stop against "
                                       "the newest committed snapshot)");
  }
  const std::string policy = it->get<std::string>();
  if (policy != "save" && policy != "latest") {
    return invalid_field("checkpoint", "'" + policy + "' is not a checkpoint policy; use save or latest");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  RunRecord run = std::move(*r);
  bool repeated = false;
  // Decided on the run as it is under its task's lock: a step of another replica may have written it.
  TRAINER_RETURN_IF_ERROR(run_transaction(run.id, [&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(run, resolve_run(run.id, "run"));
    if (run.phase == Phase::kPausing || run.phase == Phase::kPaused) {
      // A repeated request has its effect once; a different policy is a conflict.
      if (run.view["pause"].value("policy", std::string()) != policy) {
        return failed_precondition("run " + run.id + " is already " + phase_name(run.phase) + " with --checkpoint " +
                                   run.view["pause"].value("policy", std::string()));
      }
      repeated = true;
      return Status::ok();
    }
    if (is_terminal(run.phase) || run.phase == Phase::kCleaningUp || run.phase == Phase::kFinalizing) {
      return failed_precondition("run " + run.id + " is " + phase_name(run.phase) + "; only an active run can pause");
    }
    if (run.cancel_requested) return failed_precondition("run " + run.id + " is being cancelled");
    const bool has_job = run.job.has_value() &&
                         (run.phase == Phase::kQueued || run.phase == Phase::kPreparing || run.phase == Phase::kTraining);
    if (policy == "save") {
      if (!backend_->supports_pause()) {
        return failed_precondition("the " + backend_->name() + " backend cannot ask a job to save and stop; use "
                                   "--checkpoint latest");
      }
      if (!has_job) {
        return failed_precondition("run " + run.id + " is " + phase_name(run.phase) +
                                   " and has no training job to save yet; use --checkpoint latest once it has saved, "
                                   "or cancel it");
      }
    } else if (!run.view.contains("savedStep")) {
      return failed_precondition("run " + run.id + " has no committed snapshot with training state to stop against; "
                                 "--checkpoint latest would restart it from the base model. Use --checkpoint save");
    }
    const double t = now();
    run.view["pause"] = {{"policy", policy},
                         {"requestedAt", rfc3339(t)},
                         {"acceptedAt", t},
                         {"state", policy == "save" ? "saving" : "stopping"},
                         {"resourcesReleased", false}};
    if (policy == "latest") {
      run.view["pause"]["savedStep"] = run.view["savedStep"];
      run.view["pause"]["snapshotId"] = run.view.value("savedSnapshot", json(nullptr));
    }
    run.stop_sent_at.reset();
    run.kill_sent = false;
    return transition(run, Phase::kPausing);
  }));
  // A repeated request has its effect once.
  if (repeated) return present_run(run);
  metrics_.operation_attempt({.operation = tel::ServiceOperation::kPause,
                              .stage = tel::ServiceStage::kAccept,
                              .outcome = tel::ServiceOutcome::kSuccess,
                              .pause_policy = policy_of(run.view["pause"])});
  // The decision is durable: now signal (the driver signals again after a restart).
  if (run.job) {
    Status st = run_transaction(run.id, [&]() -> Status { return signal_pause(run); });
    if (!st.is_ok()) return st;
  }
  notify();
  return present_run(run);
}

// Sends the pause's signal to the job, then records that it went out (stop_sent_at). A crash
// between the two sends it again after the restart: the job takes a repeated signal once.
Status ServiceImpl::signal_pause(RunRecord& run) {
  if (run.stop_sent_at || !run.job) return Status::ok();
  if (run.view["pause"].value("policy", std::string()) == "save") {
    backend_->request_pause(run.job->handle);
  } else {
    backend_->request_stop(run.job->handle);
  }
  run.stop_sent_at = now();
  return store_->update_run(run.to_json());
}

// PAUSING: follows the job until it exits, then releases the claim and settles the pause.
Status ServiceImpl::step_pausing(RunRecord& run) {
  json& pause = run.view["pause"];
  const auto policy = policy_of(pause);
  const double accepted = pause.value("acceptedAt", now());
  auto ended = [&](tel::ServiceOutcome outcome, std::optional<tel::ServiceFailureReason> reason) {
    metrics_.operation_ended(tel::ServiceOperation::kPause, outcome, now() - accepted, reason, policy);
  };
  if (!run.job) return finish_pause(run, std::nullopt);
  backend::JobStatus status = backend_->poll(run.job->handle);
  TRAINER_RETURN_IF_ERROR(read_events(run, status.state != backend::JobState::kRunning));
  if (status.state == backend::JobState::kRunning) {
    capacity_.publish_gpu_time(run, now());
    TRAINER_RETURN_IF_ERROR(signal_pause(run));
    if (now() - accepted > opt_.config.limits.pause_deadline_seconds) {
      if (!run.kill_sent) {
        run.kill_sent = true;
        pause["failureReason"] = "the save did not finish within limits.pauseDeadlineSeconds (" +
                                 std::to_string(opt_.config.limits.pause_deadline_seconds) + " s); the job was killed";
        TRAINER_RETURN_IF_ERROR(store_->update_run(run.to_json()));
        metrics_.operation_attempt({.operation = tel::ServiceOperation::kPause,
                                    .stage = tel::ServiceStage::kAcknowledgeSave,
                                    .outcome = tel::ServiceOutcome::kTimeout,
                                    .reason = tel::ServiceFailureReason::kDeadline,
                                    .pause_policy = policy});
        ended(tel::ServiceOutcome::kTimeout, tel::ServiceFailureReason::kDeadline);
      }
      backend_->kill(run.job->handle);
    }
    return Status::ok();
  }
  run.job->exit_code = status.exit_code;
  if (policy == tel::PausePolicy::kSave) {
    if (run.job_outcome == JobOutcome::kPaused && run.paused_snapshot) {
      pause["savedStep"] = run.paused_step.value_or(0);
      pause["snapshotId"] = *run.paused_snapshot;
      pause["state"] = "saved";
      metrics_.operation_attempt({.operation = tel::ServiceOperation::kPause,
                                  .stage = tel::ServiceStage::kAcknowledgeSave,
                                  .outcome = tel::ServiceOutcome::kSuccess,
                                  .pause_policy = policy});
      return finish_pause(run, std::nullopt);
    }
    if (!pause.contains("failureReason")) {
      const bool job_said = run.job_outcome == JobOutcome::kFailed ||
                            (run.job_outcome == JobOutcome::kPaused && !run.job_reason.empty());
      std::string why = job_said ? run.job_reason
                        : run.job_outcome == JobOutcome::kCompleted
                            ? "the run finished training before it could pause"
                            : "the job exited (code " + std::to_string(status.exit_code.value_or(-1)) +
                                  ") without confirming the save";
      pause["failureReason"] = "the save failed: " + why;
      metrics_.operation_attempt({.operation = tel::ServiceOperation::kPause,
                                  .stage = tel::ServiceStage::kAcknowledgeSave,
                                  .outcome = tel::ServiceOutcome::kFailure,
                                  .reason = tel::ServiceFailureReason::kProvider,
                                  .pause_policy = policy});
      ended(tel::ServiceOutcome::kFailure, tel::ServiceFailureReason::kProvider);
    }
    // Never reported as a success: pause against the newest restorable snapshot, if any.
    if (run.job_outcome == JobOutcome::kCompleted) {
      // It trained to the end: the run completes rather than pausing.
      run.view.erase("pause");
      TRAINER_RETURN_IF_ERROR(transition(run, Phase::kFinalizing));
      return finalize(run);
    }
    if (!run.view.contains("savedStep")) {
      return fail_in_cleanup(run, pause.value("failureReason", std::string()) +
                                      "\nand the run has no earlier restorable snapshot");
    }
    pause["savedStep"] = run.view["savedStep"];
    pause["snapshotId"] = run.view.value("savedSnapshot", json(nullptr));
    return finish_pause(run, tel::ServiceFailureReason::kProvider);
  }
  return finish_pause(run, std::nullopt);
}

Status ServiceImpl::pause_after_job(RunRecord& run) {
  const std::string why = run.job_reason.empty() ? "the training job paused without being asked" : run.job_reason;
  if (!run.view.contains("savedStep")) {
    return fail_in_cleanup(run, why + "\nand the run has no committed snapshot with training state to pause at");
  }
  const double t = now();
  run.view["pause"] = {{"requestedBy", "job"},
                       {"requestedAt", rfc3339(t)},
                       {"acceptedAt", t},
                       {"failureReason", why},
                       {"savedStep", run.view["savedStep"]},
                       {"snapshotId", run.view.value("savedSnapshot", json(nullptr))},
                       {"resourcesReleased", false}};
  std::fprintf(stderr, "trainerd: run %s pauses at step %s: %s\n", run.id.c_str(), run.view["savedStep"].dump().c_str(),
               why.c_str());
  TRAINER_RETURN_IF_ERROR(transition(run, Phase::kPausing));
  return finish_pause(run, tel::ServiceFailureReason::kProvider);
}

Status ServiceImpl::pause_at_plan_step(RunRecord& run) {
  const double t = now();
  run.view["pause"] = {{"policy", "save"},
                       {"requestedBy", "plan"},
                       {"requestedAt", rfc3339(t)},
                       {"acceptedAt", t},
                       {"state", "saved"},
                       {"savedStep", run.paused_step.value_or(0)},
                       {"snapshotId", *run.paused_snapshot},
                       {"resourcesReleased", false}};
  metrics_.operation_attempt({.operation = tel::ServiceOperation::kPause,
                              .stage = tel::ServiceStage::kAcknowledgeSave,
                              .outcome = tel::ServiceOutcome::kSuccess,
                              .pause_policy = tel::PausePolicy::kSave});
  TRAINER_RETURN_IF_ERROR(transition(run, Phase::kPausing));
  return finish_pause(run, std::nullopt);
}

// The job is gone: release the claim, settle the cost, PAUSED.
Status ServiceImpl::finish_pause(RunRecord& run, std::optional<telemetry::ServiceFailureReason> failed) {
  json& pause = run.view["pause"];
  const auto policy = policy_of(pause);
  const double t = now();
  TRAINER_RETURN_IF_ERROR(capacity_.release_claim(run.id));
  capacity_.settle_cost(run, t);
  pause["resourcesReleased"] = true;
  pause["releasedAt"] = rfc3339(t);
  pause["state"] = failed ? "pausedAfterFailedSave" : "paused";
  close_attempt(run, t, "paused", run.job ? run.job->exit_code : std::nullopt);
  metrics_.operation_attempt({.operation = tel::ServiceOperation::kPause,
                              .stage = tel::ServiceStage::kRelease,
                              .outcome = tel::ServiceOutcome::kSuccess,
                              .pause_policy = policy});
  if (!failed) {
    metrics_.operation_ended(tel::ServiceOperation::kPause, tel::ServiceOutcome::kSuccess,
                             t - pause.value("acceptedAt", t), std::nullopt, policy);
  }
  TRAINER_RETURN_IF_ERROR(transition(run, Phase::kPaused));
  // The pause, from its acceptance to the release of its resources (the job saved and stopped).
  std::vector<tel::Attribute> attributes = {
      {"trainer.pause.policy", pause.value("policy", std::string("job"))},
      {"trainer.pause.requested_by", pause.value("requestedBy", std::string("user"))},
      {"trainer.run.attempt", static_cast<int64_t>(run.attempt)}};
  if (pause.contains("savedStep") && pause["savedStep"].is_number_integer()) {
    attributes.push_back({"trainer.step", pause["savedStep"].get<int64_t>()});
  }
  if (pause.contains("snapshotId") && pause["snapshotId"].is_string()) {
    attributes.push_back({"trainer.snapshot.id", pause["snapshotId"].get<std::string>()});
  }
  const Status outcome = failed ? unavailable(pause.value("failureReason", std::string("the save failed")))
                                : Status::ok();
  core_.traces.operation(run, kPauseSpan, pause.value("acceptedAt", t), t, std::move(attributes), outcome);
  return capacity_.admit_locked();
}

Result<json> ServiceImpl::resume_run(const std::string& ref) {
  std::lock_guard<std::mutex> lock(mu_);
  const double started = now();
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  RunRecord run = std::move(*r);
  if (run.phase != Phase::kPaused) {
    if (run.phase == Phase::kPausing) {
      return failed_precondition("run " + run.id + " is still PAUSING; resume it once `trainer runs get` shows "
                                 "PAUSED with resourcesReleased");
    }
    if (run.view.contains("pause") && run.attempt > 1 && !is_terminal(run.phase)) return present_run(run);  // again
    return failed_precondition("run " + run.id + " is " + phase_name(run.phase) + ", not PAUSED; nothing to resume");
  }
  const json& pause = run.view["pause"];
  if (!pause.contains("snapshotId") || !pause["snapshotId"].is_string()) {
    return failed_precondition("run " + run.id + " paused without a committed snapshot to resume from");
  }
  const std::string source = pause["snapshotId"].get<std::string>();
  // What the new attempt restores is checked now, before a device is claimed for it.
  if (Status st = catalog_.verify_restorable_locked(source, {protocol::kWeightsKind, protocol::kTrainingStateKind}); !st.is_ok()) {
    return Status(st.code(), st.field(), "run " + run.id + " cannot resume: " + st.message());
  }
  run.resume_from = source;
  run.attempt += 1;
  run.attempt_base = run.attempt;  // a resume starts a new stretch of execution.maxAttempts
  run.next_attempt_at.reset();
  run.job.reset();
  run.job_outcome = JobOutcome::kNone;
  run.job_reason.clear();
  run.paused_step.reset();
  run.paused_snapshot.reset();
  run.paused_by_plan = false;
  run.stop_sent_at.reset();
  run.kill_sent = false;
  run.view["pause"]["resumedAt"] = now_rfc3339();
  TRAINER_RETURN_IF_ERROR(run_transaction(run.id, [&]() -> Status { return claim_devices(run); }));
  // The resume, from the request to the new attempt's claim (granted or queued).
  core_.traces.operation(run, kResumeSpan, started, now(),
                         {{"trainer.run.attempt", static_cast<int64_t>(run.attempt)},
                          {"trainer.snapshot.id", source}});
  notify();
  return present_run(run);
}

}  // namespace trainer::service

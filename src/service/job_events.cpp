// Following a run's job: its events file (the job protocol), its exit, and finalizing.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/json_parse.h"
#include "service/service_state.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

}  // namespace

Status ServiceImpl::follow_job(RunRecord& run) {
  if (!run.job) {
    // CLEANING_UP of a run whose job never started.
    return finish(run, run.terminal.value_or(Phase::kCancelled));
  }
  const backend::JobHandle handle = run.job->handle;
  // Poll first, then read: every event written before the exit is seen.
  backend::JobStatus status = backend_->poll(handle);
  TRAINER_RETURN_IF_ERROR(read_events(run));
  const Phase phase = run.phase;
  if (status.state == backend::JobState::kRunning) {
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
    // Not ours to wait for (it ended while trainerd was down): its events file's last write
    // is the best estimate of when.
    std::error_code ec;
    auto mtime = fs::last_write_time(run.job->events_path, ec);
    if (!ec) {
      auto sys = std::chrono::file_clock::to_sys(mtime);
      run.job->end_guess = std::chrono::duration<double>(sys.time_since_epoch()).count();
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
  std::string reason;
  if (run.job_outcome == JobOutcome::kFailed) {
    reason = run.job_reason;
  } else if (run.job_outcome == JobOutcome::kCancelled) {
    reason = "the training job stopped on a signal trainerd did not send (it reported cancelled)";
  } else if (status.state == backend::JobState::kGone) {
    reason = "the training job (" + backend_->describe(handle) +
             ") ended while trainerd was not running and reported no outcome\nlast lines of its log:\n" +
             last_lines(run.job->log_path, 10);
  } else {
    reason = "the training job exited with code " + std::to_string(status.exit_code.value_or(-1)) +
             " without reporting an outcome\nlast lines of its log:\n" + last_lines(run.job->log_path, 10);
  }
  return fail_in_cleanup(run, reason);
}

// Applies new complete lines of the job's events file.
Status ServiceImpl::read_events(RunRecord& run) {
  JobRecord& job = *run.job;
  std::ifstream in(job.events_path, std::ios::binary);
  if (!in) return Status::ok();
  const int64_t offset = job.offset;
  in.seekg(offset);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t consumed = 0;
  while (true) {
    size_t nl = chunk.find('\n', consumed);
    if (nl == std::string::npos) break;  // a partial last line waits for its end
    std::string_view line(chunk.data() + consumed, nl - consumed);
    consumed = nl + 1;
    // A line that is not an event object (damaged, too deep, unknown shape) is skipped.
    auto ev = parse_json(line, "job event");
    if (!ev.is_ok() || !ev->is_object() || !ev->contains("type") || !(*ev)["type"].is_string()) continue;
    TRAINER_RETURN_IF_ERROR(apply_event(run, *ev));
  }
  if (consumed > 0) {
    run.job->offset = offset + static_cast<int64_t>(consumed);
    run.view["updatedAt"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->update_run(run.to_json()));
    notify();
  }
  return Status::ok();
}

Status ServiceImpl::apply_event(RunRecord& run, const json& ev) {
  const std::string type = ev["type"].get<std::string>();
  const Phase phase = run.phase;
  const bool live = phase == Phase::kQueued || phase == Phase::kPreparing || phase == Phase::kTraining;
  auto num = [&](const char* k) { return ev.contains(k) && ev[k].is_number(); };
  json& progress = run.view["progress"];
  json& latest = run.view["latest"];
  if (type == "phase" && ev.contains("phase") && ev["phase"].is_string()) {
    auto to = parse_phase(ev["phase"].get<std::string>());
    if (live && to && (*to == Phase::kPreparing || *to == Phase::kTraining) && *to > phase) {
      return transition(run, *to);
    }
  } else if (type == "preparing") {
    if (num("rowsDone")) progress["rowsDone"] = ev["rowsDone"];
    if (num("rowsTotal")) progress["rowsTotal"] = ev["rowsTotal"];
    if (live && phase == Phase::kQueued) return transition(run, Phase::kPreparing);
  } else if (type == "data_fit") {
    json fit = ev;
    fit.erase("type");
    run.view["dataFit"] = fit;
  } else if (type == "resolved") {
    if (ev.contains("settingsSha")) run.job_settings_sha = ev["settingsSha"];
  } else if (type == "step" && ev.contains("step") && ev["step"].is_number_integer()) {
    json m = ev;
    m.erase("type");
    m["time"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->put_step_metrics(run.id, ev["step"].get<int64_t>(), m));
    progress["step"] = ev["step"];
    if (num("totalSteps")) progress["totalSteps"] = ev["totalSteps"];
    for (const char* k : {"loss", "learningRate", "gradNorm", "tokenAccuracy", "tokensPerSecond"}) {
      if (num(k)) latest[k] = ev[k];
    }
    json e = m;
    e["type"] = "step";
    TRAINER_RETURN_IF_ERROR(store_->append_run_event(run.id, e).status());
    if (live && phase < Phase::kTraining) return transition(run, Phase::kTraining);
  } else if (type == "validation" && num("validationLoss")) {
    latest["validationLoss"] = ev["validationLoss"];
    if (ev.contains("step") && ev["step"].is_number_integer()) {
      auto rows = store_->step_metrics(run.id, 1000000);
      if (!rows.is_ok()) return rows.status();
      json m = {{"step", ev["step"]}};
      for (const auto& r : *rows) {
        if (r.value("step", json()) == ev["step"]) m = r;
      }
      m["validationLoss"] = ev["validationLoss"];
      TRAINER_RETURN_IF_ERROR(store_->put_step_metrics(run.id, ev["step"].get<int64_t>(), m));
    }
    json e = ev;
    e["time"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->append_run_event(run.id, e).status());
  } else if (type == "completed") {
    run.job_outcome = JobOutcome::kCompleted;
    if (ev.contains("adapterDir") && ev["adapterDir"].is_string()) run.adapter_dir = ev["adapterDir"].get<std::string>();
    if (num("finalLoss")) latest["loss"] = ev["finalLoss"];
  } else if (type == "failed") {
    run.job_outcome = JobOutcome::kFailed;
    run.job_reason = ev.contains("reason") && ev["reason"].is_string() ? ev["reason"].get<std::string>()
                                                                        : "the job reported a failure without a reason";
  } else if (type == "cancelled") {
    run.job_outcome = JobOutcome::kCancelled;
  }
  return Status::ok();
}

// FINALIZING: the job completed; record its adapter, then clean up.
Status ServiceImpl::finalize(RunRecord& run) {
  std::string adapter = run.adapter_dir.value_or("");
  if (adapter.empty() && run.job) adapter = (fs::path(run.job->output_dir) / "adapter").string();
  std::error_code ec;
  if (adapter.empty() || !fs::is_directory(adapter, ec)) {
    return fail_in_cleanup(run, "the job reported completion but its adapter folder " + adapter + " does not exist");
  }
  run.view["adapterPath"] = adapter;
  run.terminal = Phase::kCompleted;
  TRAINER_RETURN_IF_ERROR(transition(run, Phase::kCleaningUp));
  return finish(run, Phase::kCompleted);
}

}  // namespace trainer::service

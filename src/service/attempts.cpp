// A run's attempts: each start of its job is one, numbered from 1 and sharing the run's id. Its
// entry in the run's `attempts` list (runs get) opens when the job starts and closes with how it
// ended: completed, failed, cancelled, paused, or lost — killed (a signal: an out-of-memory kill,
// a preemption), crashed (exited without an outcome), lost (its cluster lost it, or it ended while
// trainerd was down), stopped (a SIGTERM trainerd did not send), hung (silent past
// limits.jobSilenceSeconds; stopped by trainerd).
//
// A lost attempt is not the run's end: while execution.maxAttempts allows (counted from the
// submission, or from the last resume), the run goes back to SUBMITTING, keeps its claim, and
// after a backoff (limits.attemptBackoffSeconds, doubled for each further lost attempt) its next
// attempt restores the newest committed snapshot with training state, or starts again from the
// beginning when there is none. A job that failed by its own verdict (a `failed` event: bad data,
// a refused grader, an engine error) is never retried. docs/durability.md, "Attempts".
#include <algorithm>
#include <cstdio>

#include "service/service_state.h"

namespace trainer::service {
namespace {

constexpr int kDefaultMaxAttempts = 3;

json* attempt_entry(RunRecord& run, int number) {
  json& list = run.view["attempts"];
  if (!list.is_array()) return nullptr;
  for (json& a : list) {
    if (a.is_object() && a.value("number", 0) == number) return &a;
  }
  return nullptr;
}

}  // namespace

int max_attempts_of(const RunRecord& run) {
  const json& plan = run.view["plan"];
  if (!plan.is_object() || !plan.contains("execution") || !plan["execution"].is_object()) return kDefaultMaxAttempts;
  const json& m = plan["execution"].value("maxAttempts", json(nullptr));
  return m.is_number_integer() ? std::max(1, m.get<int>()) : kDefaultMaxAttempts;
}

Status ServiceImpl::open_attempt(RunRecord& run, double started) {
  if (!run.view["attempts"].is_array()) run.view["attempts"] = json::array();
  json* entry = attempt_entry(run, run.attempt);
  if (entry == nullptr) {
    run.view["attempts"].push_back({{"number", run.attempt}});
    entry = &run.view["attempts"].back();
  }
  (*entry)["started"] = rfc3339(started);
  (*entry)["ended"] = nullptr;
  (*entry)["cause"] = nullptr;
  (*entry)["resumedFromSnapshot"] = run.resume_from ? json(*run.resume_from) : json(nullptr);
  (*entry)["resumedFromStep"] = nullptr;
  if (run.resume_from) {
    auto snap = store_->get_snapshot(*run.resume_from);
    if (!snap.is_ok()) return snap.status();
    if (snap->has_value()) (*entry)["resumedFromStep"] = (**snap).value("savedStep", json(nullptr));
  }
  return Status::ok();
}

void ServiceImpl::close_attempt(RunRecord& run, double t, const std::string& cause, std::optional<int> exit_code,
                                const std::string& reason) {
  json* entry = attempt_entry(run, run.attempt);
  if (entry == nullptr || !(*entry)["ended"].is_null()) return;  // never started a job, or closed already
  (*entry)["ended"] = rfc3339(t);
  (*entry)["cause"] = cause;
  if (exit_code) (*entry)["exitCode"] = *exit_code;
  if (!reason.empty()) (*entry)["reason"] = reason;
}

// The job of the current attempt ended without an outcome: a new attempt, or FAILED naming every
// lost attempt of the stretch when execution.maxAttempts is spent. mu_ held, inside the step's
// transaction.
Status ServiceImpl::attempt_lost(RunRecord& run, const LostAttempt& lost) {
  const double t = now();
  // A job that ended while trainerd was down ended at its last sign of life, not when it was found.
  const double ended = run.job && run.job->end_guess ? std::min(*run.job->end_guess, t) : t;
  close_attempt(run, ended, lost.cause, lost.exit_code, lost.reason);
  const int max_attempts = max_attempts_of(run);
  const int used = run.attempt - run.attempt_base + 1;
  if (used >= max_attempts) {
    if (max_attempts == 1) return fail_in_cleanup(run, lost.reason);  // retries disabled: the reason as it is
    const std::string causes = ended_attempts_summary(run.view["attempts"], run.attempt_base);
    return fail_in_cleanup(run, "all " + std::to_string(used) + " attempts (execution.maxAttempts " +
                                    std::to_string(max_attempts) + ") ended without an outcome: " + causes +
                                    "\nthe last one: " + lost.reason);
  }
  // The lost attempt's device time counts; its claim stays with the run for the next one.
  capacity_.settle_cost(run, t);
  const int lost_number = run.attempt;
  run.attempt += 1;
  run.job.reset();
  run.job_outcome = JobOutcome::kNone;
  run.job_reason.clear();
  run.paused_by_plan = false;
  run.adapter_dir.reset();
  run.stop_sent_at.reset();
  run.kill_sent = false;
  // The newest committed training state of this run; none: from the beginning (a child run: from
  // its source snapshot again, job_spec()).
  const json saved = run.view.value("savedSnapshot", json(nullptr));
  if (saved.is_string()) run.resume_from = saved.get<std::string>();
  const double backoff = attempt_backoff_seconds(opt_.config.limits.attempt_backoff_seconds, used);
  run.next_attempt_at = t + backoff;
  std::fprintf(stderr,
               "trainerd: run %s: attempt %d ended without an outcome (%s); attempt %d of %d starts in %.0f s from %s\n",
               run.id.c_str(), lost_number,
               describe_attempt_end({{"cause", lost.cause},
                                     {"exitCode", lost.exit_code ? json(*lost.exit_code) : json(nullptr)}})
                   .c_str(),
               run.attempt, max_attempts, backoff,
               run.resume_from ? ("snapshot " + *run.resume_from).c_str() : "the beginning");
  TRAINER_RETURN_IF_ERROR(store_->append_run_event(
                                    run.id, {{"time", rfc3339(t)},
                                             {"type", "attempt"},
                                             {"attempt", lost_number},
                                             {"cause", lost.cause},
                                             {"exitCode", lost.exit_code ? json(*lost.exit_code) : json(nullptr)},
                                             {"reason", lost.reason},
                                             {"nextAttempt", run.attempt},
                                             {"maxAttempts", max_attempts},
                                             {"nextAttemptAt", rfc3339(*run.next_attempt_at)},
                                             {"resumeFrom", run.resume_from ? json(*run.resume_from) : json(nullptr)}})
                              .status());
  return transition(run, Phase::kSubmitting);
}

// A running job silent past limits.jobSilenceSeconds is hung: SIGTERM, then SIGKILL after
// limits.cancelGraceSeconds; once it has exited, follow_job() counts its attempt as lost (hung).
// Silence counts from trainerd's own start too: a trainerd that was down heard nothing meanwhile.
Status ServiceImpl::watch_silence(RunRecord& run) {
  if (!run.job || run.cancel_requested) return Status::ok();
  JobRecord& job = *run.job;
  const int silence = opt_.config.limits.job_silence_seconds;
  const double t = now();
  switch (service::watch_silence(t, job.heard_at, core_.started_at, job.hung_at, silence,
                                 opt_.config.limits.cancel_grace_seconds)) {
    case SilenceAction::kNone:
      return Status::ok();
    case SilenceAction::kStop:
      job.hung_at = t;
      std::fprintf(stderr, "trainerd: run %s: attempt %d sent nothing for %.0f s (limits.jobSilenceSeconds %d); "
                           "stopping it as hung\n", run.id.c_str(), run.attempt, t - std::max(*job.heard_at, core_.started_at), silence);
      TRAINER_RETURN_IF_ERROR(store_->update_run(run.to_json()));
      backend_->request_stop(job.handle);
      return Status::ok();
    case SilenceAction::kKill:
      backend_->kill(job.handle);
      return Status::ok();
  }
  return Status::ok();
}

}  // namespace trainer::service

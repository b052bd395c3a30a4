// Evaluations as tasks of the kernel (its "evaluation" kind): QUEUED until admission grants the
// claim, RUNNING while `trainer-job evaluate` runs under it, then COMPLETED, FAILED or CANCELLED,
// the claim released in the same transaction. Every phase change is a core_.kernel->move(). The job
// starts through the backend (Backend::start, job kind evaluate) and reports through the job
// protocol's events (evaluation_progress, evaluation_report), read with read_job_events() from
// the cursor stored on the evaluation; a restarted trainerd follows the job it finds running.
#include <cstdio>

#include "service/evaluations.h"
#include "service/job_event_source.h"
#include "service/lost_attempts.h"

namespace trainer::service {
namespace {

constexpr const char* kQueued = "QUEUED";
constexpr const char* kRunning = "RUNNING";
constexpr const char* kCompleted = "COMPLETED";
constexpr const char* kFailed = "FAILED";
constexpr const char* kCancelled = "CANCELLED";
// Starts of an evaluation's job that may end without an outcome (killed, crashed, lost by its
// cluster, or ended while trainerd was down) before the evaluation fails.
constexpr int kMaxAttempts = 3;

}  // namespace

// QUEUED -> RUNNING when its claim is granted; RUNNING -> QUEUED when a restarted trainerd finds
// its claim gone (a store from before evaluations claimed devices). Both hold a claim.
const tasks::PhaseTable& evaluation_phase_table() {
  static const tasks::PhaseTable table = *tasks::PhaseTable::make(
      "evaluation",
      {{kQueued, false, true, false, true},
       {kRunning, false, true},
       {kCompleted, true},
       {kFailed, true},
       {kCancelled, true}},
      {{kQueued, {kRunning, kFailed, kCancelled}}, {kRunning, {kCompleted, kFailed, kCancelled, kQueued}}});
  return table;
}

// Open evaluations a trainerd before the task kernel left get their task; a RUNNING one's step
// starts its job again under the claim it holds.
Status Evaluations::resume(std::string* summary) {
  auto open = core_.store->list_evaluations({kQueued, kRunning});
  if (!open.is_ok()) return open.status();
  std::lock_guard<std::mutex> lock(core_.mu);
  // enter(): a task of this trainerd's kernel is where its evaluation is; an older store's is made.
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    for (const json& doc : *open) {
      TRAINER_RETURN_IF_ERROR(core_.kernel->enter("evaluation", doc.value("evaluationId", std::string()),
                                             doc.value("phase", std::string(kQueued))));
    }
    return Status::ok();
  }));
  *summary = std::to_string(open->size()) + " open evaluation(s), each followed by its task";
  return Status::ok();
}

// One step of an evaluation (the kernel's "evaluation" kind, core_.mu held, inside the step's transaction).
Status Evaluations::step_evaluation_task(tasks::Step& step) {
  const std::string id = step.task().id;
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_evaluation(id));
  if (!stored) return internal_error("evaluation " + id + " has a task but no stored document");
  json doc = std::move(*stored);
  if (step.task().phase == kQueued) {
    auto claim = evaluation_claim(id);
    if (!claim.is_ok()) return claim.status();
    if (!*claim) {  // lost with an older store: it claims again
      TRAINER_RETURN_IF_ERROR(claim_evaluation_locked(doc));
      claim = evaluation_claim(id);
      if (!claim.is_ok()) return claim.status();
    }
    if (*claim && (*claim)->state == "GRANTED") return launch_evaluation_locked(doc, **claim);
    // A claim the windows it waited for have passed by waits forever: the evaluation fails instead.
    if (*claim) {
      const std::string never = capacity_.never_granted((*claim)->pool, (*claim)->devices);
      if (!never.empty()) return end_evaluation_locked(doc, kFailed, "waiting for devices: " + never);
    }
    return Status::ok();
  }
  return follow_evaluation_locked(doc);
}

// A RUNNING evaluation's job: its new events applied, then its end when it ended (core_.mu held,
// inside the step's transaction). The job is polled before its events are read, so the events of
// a job seen ended are all there.
Status Evaluations::follow_evaluation_locked(json& doc) {
  const std::string id = doc["evaluationId"].get<std::string>();
  // No job recorded (an older store's evaluation), or its last attempt lost: the next one.
  if (!doc["_job"].is_object() || doc["_job"].value("ended", false)) return next_evaluation_attempt_locked(doc);
  json& job = doc["_job"];
  const backend::JobHandle handle{job.value("handle", std::string())};
  const backend::JobStatus status = core_.backend->poll(handle);
  const json before = doc;
  const JobEventSource source{job.value("jobId", std::string()), job.value("events", std::string())};
  auto batch = read_job_events(*core_.store, source,
                               JobEventCursor{job.value("seq", int64_t{0}), job.value("cursor", int64_t{0})},
                               status.state != backend::JobState::kRunning);
  if (!batch.is_ok()) return batch.status();
  job["seq"] = batch->cursor.seq;
  job["cursor"] = batch->cursor.offset;
  if (!batch->events.empty()) job["heardAt"] = core_.now();  // its heartbeat too: it is alive
  for (const JobEventLine& line : batch->events) {
    if (const auto* p = std::get_if<protocol::EvaluationProgress>(&line.event)) {
      doc["progress"] = {{"rowsDone", p->done}, {"rowsTotal", p->total}};
    } else if (const auto* r = std::get_if<protocol::EvaluationReport>(&line.event)) {
      doc["_report"] = r->report;  // shown when the evaluation is COMPLETED
    } else if (const auto* f = std::get_if<protocol::Failed>(&line.event)) {
      job["failed"] = f->reason;  // the job's own verdict: never retried
    } else if (std::holds_alternative<protocol::Cancelled>(line.event)) {
      job["cancelled"] = true;
    }
  }
  if (status.state == backend::JobState::kRunning) {
    if (!doc.value("cancelRequested", false)) watch_evaluation_silence(doc, handle);
    return doc == before ? Status::ok() : core_.store->put_evaluation(doc);
  }
  // Its job ended. With its report it completed: not before, so that its claim is held until the
  // process (still posting its last lines after the report) is gone.
  const std::string job_id = job.value("jobId", std::string());
  if (doc.contains("_report")) {
    doc["report"] = doc["_report"];
    doc.erase("_report");
    close_evaluation_attempt(doc, "completed", status.exit_code);
    return end_evaluation_locked(doc, kCompleted);
  }
  if (doc.value("cancelRequested", false)) {
    close_evaluation_attempt(doc, "cancelled", status.exit_code);
    return end_evaluation_locked(doc, kCancelled);
  }
  const std::string log_tail = core_.job_log_tail(job_id, evaluation_dir(id) + "/job.log", 3);
  if (job.contains("failed")) {
    const std::string reason = job["failed"].get<std::string>();
    close_evaluation_attempt(doc, "failed", status.exit_code, reason);
    return end_evaluation_locked(doc, kFailed, reason.empty() ? log_tail : reason);
  }
  // Any other end without an outcome loses the attempt; while attempts are left, another starts.
  const LostAttempt lost =
      job.contains("hungAt")
          ? hung_attempt("the evaluation job", core_.options.config.limits.job_silence_seconds, status.exit_code, log_tail)
          : lost_attempt_of(status, job.value("cancelled", false), "the evaluation job", core_.backend->describe(handle),
                            log_tail);
  close_evaluation_attempt(doc, lost.cause, lost.exit_code, lost.reason);
  const int used = static_cast<int>(job.value("attempt", int64_t{1}));
  if (used >= kMaxAttempts) {
    return end_evaluation_locked(doc, kFailed,
                                 "all " + std::to_string(used) + " attempts ended without an outcome: " +
                                     ended_attempts_summary(doc["attempts"], 1) + "\nthe last one: " + lost.reason);
  }
  // After a backoff (none when it ended while trainerd was down: that wait has passed).
  const double backoff = status.state == backend::JobState::kGone
                             ? 0.0
                             : attempt_backoff_seconds(core_.options.config.limits.attempt_backoff_seconds, used);
  job["ended"] = true;
  doc["nextAttemptAt"] = rfc3339(core_.now() + backoff);
  job["nextAttemptAtSeconds"] = core_.now() + backoff;
  std::fprintf(stderr, "trainerd: evaluation %s: attempt %lld ended without an outcome (%s); attempt %lld of %lld "
                       "starts in %.0f s\n",
               id.c_str(), static_cast<long long>(job.value("attempt", int64_t{1})),
               describe_attempt_end(doc["attempts"].back()).c_str(),
               static_cast<long long>(job.value("attempt", int64_t{1}) + 1), static_cast<long long>(kMaxAttempts),
               backoff);
  return core_.store->put_evaluation(doc);
}

// A running job silent past limits.jobSilenceSeconds is hung: SIGTERM, `_job.hungAt` set, then
// SIGKILL after limits.cancelGraceSeconds; once it has ended its attempt is lost as hung.
void Evaluations::watch_evaluation_silence(json& doc, const backend::JobHandle& handle) {
  json& job = doc["_job"];
  const auto number = [&](const char* key) {
    return job.contains(key) && job[key].is_number() ? std::optional<double>(job[key].get<double>()) : std::nullopt;
  };
  const Limits& limits = core_.options.config.limits;
  const double t = core_.now();
  switch (watch_silence(t, number("heardAt"), core_.started_at, number("hungAt"), limits.job_silence_seconds,
                        limits.cancel_grace_seconds)) {
    case SilenceAction::kNone:
      return;
    case SilenceAction::kStop:
      job["hungAt"] = t;
      std::fprintf(stderr, "trainerd: evaluation %s: attempt %lld sent nothing for more than %d s "
                           "(limits.jobSilenceSeconds); stopping it as hung\n",
                   doc["evaluationId"].get<std::string>().c_str(), static_cast<long long>(job.value("attempt", int64_t{1})),
                   limits.job_silence_seconds);
      core_.backend->request_stop(handle);
      return;
    case SilenceAction::kKill:
      core_.backend->kill(handle);
      return;
  }
}

// An evaluation whose last attempt was lost (or, from an older store, that has no job): its next
// attempt starts under its claim once the backoff has passed, or it queues for a claim again
// (core_.mu held, inside the step's transaction); a cancel ends it here.
Status Evaluations::next_evaluation_attempt_locked(json& doc) {
  const std::string id = doc["evaluationId"].get<std::string>();
  if (doc.value("cancelRequested", false)) return end_evaluation_locked(doc, kCancelled);
  const json& last = doc["_job"];
  if (last.is_object() && core_.now() < last.value("nextAttemptAtSeconds", 0.0)) return Status::ok();
  auto claim = evaluation_claim(id);
  if (!claim.is_ok()) return claim.status();
  if (*claim && (*claim)->state == "GRANTED") return launch_evaluation_locked(doc, **claim);
  // Its claim is gone (an older store): it queues for one again.
  doc["phase"] = kQueued;
  TRAINER_RETURN_IF_ERROR(core_.store->put_evaluation(doc));
  TRAINER_RETURN_IF_ERROR(core_.kernel->move("evaluation", id, kQueued));
  return claim_evaluation_locked(doc);
}

// The current attempt's entry in the evaluation's `attempts` list, closed with how it ended.
void Evaluations::close_evaluation_attempt(json& doc, const std::string& cause, std::optional<int> exit_code,
                                           const std::string& reason) {
  if (!doc["attempts"].is_array() || doc["attempts"].empty()) return;
  json& entry = doc["attempts"].back();
  if (!entry["ended"].is_null()) return;
  entry["ended"] = core_.now_rfc3339();
  entry["cause"] = cause;
  if (exit_code) entry["exitCode"] = *exit_code;
  if (!reason.empty()) entry["reason"] = reason;
}

// How it ended, recorded (core_.mu held, inside a transaction): COMPLETED (its report on `doc`
// already), FAILED (why) or CANCELLED; its cost, its claim released.
Status Evaluations::end_evaluation_locked(json& doc, const std::string& phase, const std::string& failure) {
  const std::string id = doc["evaluationId"].get<std::string>();
  const double ended = core_.now();
  doc["endedAt"] = rfc3339(ended);
  doc["cost"] = evaluation_cost(doc, ended);
  doc["phase"] = phase;
  if (phase == kCompleted) {
    record_model_evaluation(doc);
    doc["progress"]["rowsDone"] = doc["report"].value("rows", int64_t{0});
    doc["progress"]["rowsTotal"] = doc["report"].value("rows", int64_t{0});
  } else if (phase == kFailed) {
    doc["failureReason"] = failure;
  }
  TRAINER_RETURN_IF_ERROR(core_.store->put_evaluation(doc));
  TRAINER_RETURN_IF_ERROR(core_.kernel->move("evaluation", id, phase));
  return release_evaluation_claim_locked(id);
}

// A cancel request (core_.mu held): a queued evaluation ends CANCELLED here; a running one's job is
// killed, and its step ends the evaluation once the backend sees the job ended.
Status Evaluations::cancel_evaluation_locked(json& doc) {
  const std::string id = doc["evaluationId"].get<std::string>();
  doc["cancelRequested"] = true;
  return core_.store->transaction([&]() -> Status {
    if (doc["phase"] == kRunning && doc["_job"].is_object()) {
      core_.backend->kill(backend::JobHandle{doc["_job"].value("handle", std::string())});
      return core_.store->put_evaluation(doc);
    }
    doc["phase"] = kCancelled;
    doc["endedAt"] = core_.now_rfc3339();
    TRAINER_RETURN_IF_ERROR(core_.store->put_evaluation(doc));
    TRAINER_RETURN_IF_ERROR(core_.kernel->move("evaluation", id, kCancelled));
    return release_evaluation_claim_locked(id);
  });
}

}  // namespace trainer::service

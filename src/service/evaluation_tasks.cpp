// Evaluations as tasks of the kernel (its "evaluation" kind): QUEUED until admission grants the
// claim, RUNNING while `trainer-job evaluate` runs under it, then COMPLETED, FAILED or CANCELLED,
// the claim released in the same transaction. Every phase change is a kernel_->move(); the job's
// progress and ending reach the step through the news its EvaluationJobs callbacks leave.
#include <cstdio>

#include "service/service_state.h"

namespace trainer::service {
namespace {

constexpr const char* kQueued = "QUEUED";
constexpr const char* kRunning = "RUNNING";
constexpr const char* kCompleted = "COMPLETED";
constexpr const char* kFailed = "FAILED";
constexpr const char* kCancelled = "CANCELLED";

}  // namespace

// QUEUED -> RUNNING when its claim is granted; RUNNING -> QUEUED when a restarted trainerd finds
// its claim gone (a store from before evaluations claimed devices). Both hold a claim.
const tasks::PhaseTable& evaluation_phase_table() {
  static const tasks::PhaseTable table = *tasks::PhaseTable::make(
      "evaluation",
      {{kQueued, false, true}, {kRunning, false, true}, {kCompleted, true}, {kFailed, true}, {kCancelled, true}},
      {{kQueued, {kRunning, kFailed, kCancelled}}, {kRunning, {kCompleted, kFailed, kCancelled, kQueued}}});
  return table;
}

// Open evaluations a trainerd before the task kernel left get their task; a RUNNING one's step
// starts its job again under the claim it holds.
Status ServiceImpl::resume_evaluations(std::string* summary) {
  auto open = store_->list_evaluations({kQueued, kRunning});
  if (!open.is_ok()) return open.status();
  std::lock_guard<std::mutex> lock(mu_);
  int created = 0;
  for (auto it = open->rbegin(); it != open->rend(); ++it) {  // oldest first
    const std::string id = it->value("evaluationId", std::string());
    TRAINER_ASSIGN_OR_RETURN(std::optional<store::TaskRow> task, store_->get_task("evaluation", id));
    if (task) continue;
    TRAINER_RETURN_IF_ERROR(store_->transaction([&]() -> Status {
      return kernel_->create("evaluation", id, it->value("phase", std::string(kQueued)));
    }));
    ++created;
  }
  *summary = std::to_string(open->size()) + " open evaluation(s); " + std::to_string(created) +
             " given their task (their steps start them again)";
  return Status::ok();
}

void ServiceImpl::on_evaluation_progress(const std::string& id, int64_t done, int64_t total) {
  {
    std::lock_guard<std::mutex> lock(evaluation_news_mu_);
    evaluation_news_[id].progress = std::make_pair(done, total);
  }
  kernel_->wake();
}

void ServiceImpl::on_evaluation_done(const std::string& id, const EvaluationJobs::Ending& ending) {
  {
    std::lock_guard<std::mutex> lock(evaluation_news_mu_);
    evaluation_news_[id].ending = ending;
  }
  kernel_->wake();
}

ServiceImpl::EvaluationNews ServiceImpl::take_evaluation_news(const std::string& id) {
  std::lock_guard<std::mutex> lock(evaluation_news_mu_);
  auto it = evaluation_news_.find(id);
  if (it == evaluation_news_.end()) return {};
  EvaluationNews news = std::move(it->second);
  evaluation_news_.erase(it);
  return news;
}

// One step of an evaluation (the kernel's "evaluation" kind, mu_ held, inside the step's transaction).
Status ServiceImpl::step_evaluation_task(tasks::Step& step) {
  const std::string id = step.task().id;
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, store_->get_evaluation(id));
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
    return Status::ok();
  }
  // RUNNING. Whether its job runs is asked before its news is read: a job that ended has left its
  // ending in the news before it stops running.
  const bool running = evaluation_jobs_->running(id);
  EvaluationNews news = take_evaluation_news(id);
  if (news.ending) return end_evaluation_locked(doc, *news.ending);
  if (news.progress) {
    doc["progress"] = {{"rowsDone", news.progress->first}, {"rowsTotal", news.progress->second}};
    TRAINER_RETURN_IF_ERROR(store_->put_evaluation(doc));
  }
  if (running) return Status::ok();
  // No job runs for it: trainerd started again. It starts again under its claim, or queues again.
  auto claim = evaluation_claim(id);
  if (!claim.is_ok()) return claim.status();
  if (*claim && (*claim)->state == "GRANTED") return launch_evaluation_locked(doc, **claim);
  doc["phase"] = kQueued;
  TRAINER_RETURN_IF_ERROR(store_->put_evaluation(doc));
  TRAINER_RETURN_IF_ERROR(kernel_->move("evaluation", id, kQueued));
  return claim_evaluation_locked(doc);
}

// How its job ended, recorded (mu_ held, inside a transaction): its report, failure or cancel,
// its cost, its claim released.
Status ServiceImpl::end_evaluation_locked(json& doc, const EvaluationJobs::Ending& ending) {
  const std::string id = doc["evaluationId"].get<std::string>();
  const double ended = now();
  doc["endedAt"] = rfc3339(ended);
  doc["cost"] = evaluation_cost(doc, ended);
  if (ending.completed) {
    doc["phase"] = kCompleted;
    doc["report"] = ending.report;
    record_model_evaluation(doc);
    doc["progress"]["rowsDone"] = ending.report.value("rows", int64_t{0});
    doc["progress"]["rowsTotal"] = ending.report.value("rows", int64_t{0});
  } else if (ending.cancelled) {
    doc["phase"] = kCancelled;
  } else {
    doc["phase"] = kFailed;
    doc["failureReason"] = ending.failure;
  }
  TRAINER_RETURN_IF_ERROR(store_->put_evaluation(doc));
  TRAINER_RETURN_IF_ERROR(kernel_->move("evaluation", id, doc["phase"].get<std::string>()));
  return release_evaluation_claim_locked(id);
}

// A cancel request (mu_ held): a queued evaluation, or one whose job does not run, ends CANCELLED
// here; a running job is killed and its step ends the evaluation when the job has stopped.
Status ServiceImpl::cancel_evaluation_locked(json& doc) {
  const std::string id = doc["evaluationId"].get<std::string>();
  doc["cancelRequested"] = true;
  return store_->transaction([&]() -> Status {
    if (doc["phase"] == kRunning && evaluation_jobs_->cancel(id)) return store_->put_evaluation(doc);
    (void)take_evaluation_news(id);  // what a job that ended this instant left is not read
    doc["phase"] = kCancelled;
    doc["endedAt"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->put_evaluation(doc));
    TRAINER_RETURN_IF_ERROR(kernel_->move("evaluation", id, kCancelled));
    return release_evaluation_claim_locked(id);
  });
}

}  // namespace trainer::service

// The task kernel (declared in service/tasks/task_kernel.h).
//
// Writes are kept off the hot path: a task that wants a step every pass is stored due at 0 and
// needs no write to stay due; its lease is renewed only when half of it has run out. A pass over
// tasks that change nothing is reads only.
#include "service/tasks/task_kernel.h"

#include <csignal>
#include <cstdio>

namespace trainer::tasks {

TaskKernel::TaskKernel(store::Store& store, std::shared_ptr<Clock> clock, KernelOptions options)
    : store_(store), clock_(std::move(clock)), opt_(std::move(options)) {}

void TaskKernel::add_kind(TaskKind& kind) {
  kinds_[kind.table().kind()] = &kind;
  order_.push_back(&kind);
}

const PhaseTable* TaskKernel::table(const std::string& kind) const {
  auto it = kinds_.find(kind);
  return it == kinds_.end() ? nullptr : &it->second->table();
}

nlohmann::json TaskKernel::describe() const {
  nlohmann::json out = nlohmann::json::array();
  for (const TaskKind* kind : order_) out.push_back(kind->table().to_json());
  return out;
}

void TaskKernel::note_entered(const std::string& kind, const std::string& id, const std::string& phase) {
  if (in_step_ && !opt_.kill_after.empty() && opt_.kill_after == kind + ":" + phase) {
    kill_reason_ = kind + " " + id + " entered " + phase;
  }
}

double TaskKernel::due_after(const PhaseTable& table, const std::string& phase) const {
  return table.idle(phase) ? store::kNeverDue : 0.0;
}

Status TaskKernel::create(const std::string& kind, const std::string& id, const std::string& phase) {
  const PhaseTable* t = table(kind);
  if (!t) return internal_error("no task kind '" + kind + "'");
  if (!t->find(phase)) return t->check(phase, phase);
  store::TaskRow row;
  row.kind = kind;
  row.id = id;
  row.phase = phase;
  row.terminal = t->terminal(phase);
  row.due_at = due_after(*t, phase);
  TRAINER_RETURN_IF_ERROR(store_.insert_task(row));
  note_entered(kind, id, phase);
  wake_when_committed();
  return Status::ok();
}

Status TaskKernel::move(const std::string& kind, const std::string& id, const std::string& to) {
  const PhaseTable* t = table(kind);
  if (!t) return internal_error("no task kind '" + kind + "'");
  TRAINER_ASSIGN_OR_RETURN(std::optional<store::TaskRow> row, store_.get_task(kind, id));
  if (!row) return internal_error("the " + kind + " " + id + " has no task");
  if (row->phase == to) return Status::ok();
  TRAINER_RETURN_IF_ERROR(t->check(row->phase, to).with_context(kind + " " + id));
  const int64_t version = row->version;
  row->phase = to;
  row->terminal = t->terminal(to);
  row->due_at = due_after(*t, to);
  TRAINER_RETURN_IF_ERROR(store_.update_task_if_version(*row, version));
  note_entered(kind, id, to);
  wake_when_committed();
  return Status::ok();
}

Status TaskKernel::enter(const std::string& kind, const std::string& id, const std::string& phase) {
  TRAINER_ASSIGN_OR_RETURN(std::optional<store::TaskRow> row, store_.get_task(kind, id));
  return row ? move(kind, id, phase) : create(kind, id, phase);
}

Status TaskKernel::wake_claim_owner(const std::string& owner) {
  for (TaskKind* kind : order_) {
    if (!kind->table().has_claim_waits()) continue;
    TRAINER_ASSIGN_OR_RETURN(bool woken, store_.wake_task(kind->table().kind(), owner));
    if (!woken) unwoken_.emplace(kind->table().kind(), owner);
  }
  wake_when_committed();
  return Status::ok();
}

void TaskKernel::step_again_at_once() {
  if (in_step_) step_again_ = true;
  wake();
}

void TaskKernel::retry_wakes() {
  for (auto it = unwoken_.begin(); it != unwoken_.end();) {
    auto woken = store_.transaction([&]() -> Status {
      TRAINER_ASSIGN_OR_RETURN(bool done, store_.wake_task(it->first, it->second));
      return done ? Status::ok() : unavailable("locked");
    });
    it = woken.is_ok() ? unwoken_.erase(it) : std::next(it);
  }
}

// A trainerd that starts steps its tasks that wait for a claim at once, instead of at their next
// recheck: what it finds wrong with one (a run's stored document damaged while it was down) is
// found on its first pass, not up to claim_recheck_seconds later.
void TaskKernel::recheck_claim_waits_at_start() {
  const double now = clock_->now_seconds();
  for (TaskKind* kind : order_) {
    if (!kind->table().has_claim_waits()) continue;
    auto soon = store_.due_tasks(kind->table().kind(), now + opt_.claim_recheck_seconds + 1, opt_.batch);
    if (!soon.is_ok()) continue;  // the recheck finds them later
    for (const store::TaskRow& row : *soon) {
      if (row.due_at <= now || !kind->table().waits_for_claim(row.phase)) continue;
      unwoken_.emplace(row.kind, row.id);  // woken by retry_wakes() below, in a transaction each
    }
  }
  retry_wakes();
}

int TaskKernel::drive_once() {
  retry_wakes();
  if (!first_pass_done_) {
    first_pass_done_ = true;
    recheck_claim_waits_at_start();
  }
  int stepped = 0;
  for (TaskKind* kind : order_) {
    const std::string& name = kind->table().kind();
    const double now = clock_->now_seconds();
    auto due = store_.due_tasks(name, now, opt_.batch);
    const std::string listing = "listing due " + name + " tasks";
    if (!due.is_ok()) {
      ++step_errors_;
      if (auto line = said_.failed(listing, due.status().to_string(), now)) std::fprintf(stderr, "trainerd: %s\n", line->c_str());
      continue;
    }
    if (auto line = said_.succeeded(listing, now)) std::fprintf(stderr, "trainerd: %s\n", line->c_str());
    for (const store::TaskRow& task : *due) {
      auto done = step_task(*kind, task, now);
      const std::string key = name + " " + task.id;
      if (!done.is_ok()) {
        ++step_errors_;
        if (auto line = said_.failed(key, done.status().to_string(), now)) std::fprintf(stderr, "trainerd: %s\n", line->c_str());
        continue;
      }
      if (auto line = said_.succeeded(key, now)) std::fprintf(stderr, "trainerd: %s\n", line->c_str());
      if (*done) ++stepped;
    }
  }
  return stepped;
}

Result<bool> TaskKernel::step_task(TaskKind& kind, const store::TaskRow& task, double now) {
  bool held = true;
  Status st = store_.transaction([&]() -> Status {
    int64_t fence = task.fence;
    if (task.owner != opt_.owner || task.lease_until - now < opt_.lease_seconds / 2) {
      TRAINER_ASSIGN_OR_RETURN(std::optional<store::TaskLease> lease,
                               store_.acquire_task_lease(task.kind, task.id, opt_.owner, now, opt_.lease_seconds));
      if (!lease) {
        held = false;  // another replica's lease still runs: its task, not ours
        return Status::ok();
      }
      fence = lease->fence;
    } else {
      TRAINER_RETURN_IF_ERROR(store_.check_task_lease(task.kind, task.id, opt_.owner, fence));
    }
    Step step(*this, task, now);
    step_again_ = false;
    in_step_ = true;
    stepping_ = &task;
    stepping_fence_ = fence;
    Status stepped = kind.step(step);
    in_step_ = false;
    stepping_ = nullptr;
    TRAINER_RETURN_IF_ERROR(stepped);
    // The step may have moved the task (move()); what is stored now decides when it is next due.
    TRAINER_ASSIGN_OR_RETURN(std::optional<store::TaskRow> after, store_.get_task(task.kind, task.id));
    if (!after) return internal_error("the task vanished during its step");
    // A phase that waits for its claim is woken by the grant; until then only the safety tick. A
    // step that holds its grant and continues on the next pass (step_again_at_once()) is due at once.
    const bool waits = kind.table().waits_for_claim(after->phase) && !step_again_;
    const double waiting = waits ? now + opt_.claim_recheck_seconds : due_after(kind.table(), after->phase);
    double due = step.requested_due().value_or(waiting);
    if (after->terminal) due = store::kNeverDue;
    if (due == after->due_at) return Status::ok();
    after->due_at = due;
    return store_.update_task(*after, fence);
  });
  const bool wake_now = wake_after_step_;
  wake_after_step_ = false;
  if (!st.is_ok()) {
    // Rolled back: nothing was entered, and nothing moved that the next pass must see at once
    // (waking for it would spin the driver while a write keeps failing, a full disk's).
    kill_reason_.clear();
    return st;
  }
  if (wake_now) wake();
  if (held) {
    std::lock_guard<std::mutex> lock(held_mu_);
    held_.emplace(task.kind, task.id);
  }
  if (!kill_reason_.empty()) {
    std::fprintf(stderr, "trainerd: test hook: killed after %s (TRAINER_TEST_KILL_AFTER)\n", kill_reason_.c_str());
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  return held;
}

void Step::launch(WorkFn work) {
  const std::string key = TaskKernel::work_key(task_);
  std::lock_guard<std::mutex> lock(kernel_.work_mu_);
  if (kernel_.work_stopped_ || kernel_.work_.count(key)) return;
  auto w = std::make_unique<TaskKernel::Work>();
  TaskKernel::Work* slot = w.get();
  TaskKernel* kernel = &kernel_;
  w->thread = std::thread([kernel, slot, work = std::move(work)] {
    std::optional<Result<nlohmann::json>> outcome;
    try {
      outcome = work();
    } catch (const std::exception& e) {  // nothing escapes the thread: the outcome says what happened
      outcome = Result<nlohmann::json>(internal_error(std::string("the work threw: ") + e.what()));
    }
    {
      std::lock_guard<std::mutex> done(kernel->work_mu_);
      slot->outcome = std::move(outcome);
      slot->done = true;
    }
    kernel->wake();
  });
  kernel_.work_[key] = std::move(w);
}

bool Step::working() const {
  std::lock_guard<std::mutex> lock(kernel_.work_mu_);
  auto it = kernel_.work_.find(TaskKernel::work_key(task_));
  return it != kernel_.work_.end() && !it->second->done;
}

std::optional<Result<nlohmann::json>> Step::take_outcome() {
  std::unique_ptr<TaskKernel::Work> w;
  {
    std::lock_guard<std::mutex> lock(kernel_.work_mu_);
    auto it = kernel_.work_.find(TaskKernel::work_key(task_));
    if (it == kernel_.work_.end() || !it->second->done) return std::nullopt;
    w = std::move(it->second);
    kernel_.work_.erase(it);
  }
  w->thread.join();  // it has ended: only its last instructions remain
  return std::move(w->outcome);
}

void TaskKernel::stop_work() {
  std::map<std::string, std::unique_ptr<Work>> running;
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    work_stopped_ = true;
    running.swap(work_);
  }
  for (auto& [key, w] : running) {
    if (w->thread.joinable()) w->thread.join();
  }
}

bool TaskKernel::work_stopping() {
  std::lock_guard<std::mutex> lock(work_mu_);
  return work_stopped_;
}

void TaskKernel::release_leases() {
  std::set<std::pair<std::string, std::string>> held;
  {
    std::lock_guard<std::mutex> lock(held_mu_);
    held.swap(held_);
  }
  for (const auto& [kind, id] : held) {
    Status st = store_.release_task_lease(kind, id, opt_.owner);
    if (!st.is_ok()) {
      std::fprintf(stderr, "trainerd: giving back the lease of %s %s: %s\n", kind.c_str(), id.c_str(),
                   st.to_string().c_str());
    }
  }
}

Status TaskKernel::recheck_lease() {
  if (!in_step_ || stepping_ == nullptr) return Status::ok();
  return store_.check_task_lease(stepping_->kind, stepping_->id, opt_.owner, stepping_fence_);
}

TaskKernel::~TaskKernel() { stop_work(); }

void TaskKernel::wake_when_committed() {
  if (in_step_) {
    wake_after_step_ = true;  // a step's move wakes the driver once its transaction committed
  } else {
    wake();  // a request's move: its transaction is the caller's
  }
}

void TaskKernel::wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_all();
}

void TaskKernel::wait(std::chrono::milliseconds tick) {
  std::unique_lock<std::mutex> lock(wake_mu_);
  wake_cv_.wait_for(lock, tick, [&] { return woken_; });
  woken_ = false;
}

}  // namespace trainer::tasks

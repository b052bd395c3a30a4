// The task kernel: every long-lived thing of the service (a run, an evaluation, ...) is a task of a
// kind, stored as a row of the store's task table (store.h, TaskRow) beside the thing's own record.
// One driver steps every due task under a lease (owner, fence) that the store checks inside the
// step's own transaction, so a replica that lost its lease has its writes refused; phase changes
// are checked against the kind's phase table. A new long-lived thing costs a TaskKind and its
// table (docs/architecture.md, "The task kernel").
//
// Thread safety: create(), move(), wake_claim_owner() and drive_once() are called with the caller's lock that
// serialises its durable writes (the service's mu_); wake() and wait() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/repeated_errors.h"
#include "common/status.h"
#include "service/tasks/phase_table.h"
#include "store/store.h"

namespace trainer::tasks {

class TaskKernel;

// Long work of one task, run off the driver (WorkFn's result is the work's outcome).
using WorkFn = std::function<Result<nlohmann::json>()>;

// One step of one task: what it sees, and when it asks to be stepped next.
class Step {
 public:
  Step(TaskKernel& kernel, const store::TaskRow& task, double now) : kernel_(kernel), task_(task), now_(now) {}
  const store::TaskRow& task() const { return task_; }
  double now() const { return now_; }  // wall seconds when the pass began
  // The next step is due at `t` (wall seconds), not at the next pass.
  void due_at(double t) { due_ = t; }
  const std::optional<double>& requested_due() const { return due_; }

  // Long work (copying a model) runs on a thread of its own, off the driver's lock and outside any
  // transaction; the task's later steps find it working(), then take its outcome once. Work must
  // be safe to run again: what a stopped trainerd had in flight is launched anew by the task's
  // next step after the restart (it finds neither work nor an outcome).
  void launch(WorkFn work);
  bool working() const;
  std::optional<Result<nlohmann::json>> take_outcome();

 private:
  TaskKernel& kernel_;
  const store::TaskRow& task_;
  const double now_;
  std::optional<double> due_;
};

class TaskKind {
 public:
  virtual ~TaskKind() = default;
  // The kind's phase table; its kind() names the kind in the task table.
  virtual const PhaseTable& table() const = 0;
  // One step of `step.task()`, inside a store transaction in which the kernel has checked this
  // replica's lease: its writes commit together with the task's next due time, or none do (an
  // error rolls them back and the task stays due). It changes phases through TaskKernel::move().
  virtual Status step(Step& step) = 0;
};

// A kind made of a table and a step function: what most kinds are (the service's are).
class FunctionKind final : public TaskKind {
 public:
  FunctionKind(const PhaseTable& table, std::function<Status(Step&)> step)
      : table_(table), step_(std::move(step)) {}
  const PhaseTable& table() const override { return table_; }
  Status step(Step& step) override { return step_(step); }

 private:
  const PhaseTable& table_;
  std::function<Status(Step&)> step_;
};

struct KernelOptions {
  std::string owner = "trainerd";  // this replica's name on the leases it takes
  double lease_seconds = 30;       // a lease lasts this long unless renewed (renewed at half)
  int64_t batch = 100000;          // the most tasks of one kind stepped in one pass
  // Test hook (trainerd: TRAINER_TEST_KILL_AFTER=KIND:PHASE): the process SIGKILLs itself right
  // after the commit of the step that created or moved a task of KIND into PHASE, so a test can
  // restart it at that exact boundary. "" = none.
  std::string kill_after = {};
  // A task in a phase that waits for its claim (PhaseSpec::waits_for_claim) is stepped when a grant
  // wakes it (wake_claim_owner()), else again after this many seconds: the safety tick that finds
  // what no wake announces (a claim whose capacity windows have all passed).
  double claim_recheck_seconds = 30;
};

class TaskKernel {
 public:
  TaskKernel(store::Store& store, std::shared_ptr<Clock> clock, KernelOptions options);

  // Registers a kind, before the first pass; the kind outlives the kernel. Kinds are stepped in the
  // order they were added.
  void add_kind(TaskKind& kind);
  // The table of `kind`; null when no such kind was added.
  const PhaseTable* table(const std::string& kind) const;
  // Every kind's table (PhaseTable::to_json()), in the order they were added.
  nlohmann::json describe() const;

  // Creates the task of a new thing in `phase`, due at once. Call inside the transaction that
  // stores the thing.
  Status create(const std::string& kind, const std::string& id, const std::string& phase);
  // Moves a task to `to`, checked against its kind's table; it is due at once unless `to` is
  // terminal or idle. Moving to the phase it is in changes nothing. Call inside the transaction
  // that stores the change: both commit or neither does.
  Status move(const std::string& kind, const std::string& id, const std::string& to);

  // move() when the task exists, else create(): a thing that enters `phase` again (a failed
  // registration registered anew) or a record an older store kept without a task.
  Status enter(const std::string& kind, const std::string& id, const std::string& phase);

  // One pass: every due task of every kind stepped once under its lease, earliest due first.
  // A step's error is logged ("trainerd: KIND ID: ...") and counted, and the task stays due; the
  // same error again is counted, not logged again (common/repeated_errors.h).
  // Returns the tasks stepped.
  int drive_once();
  // Admission granted `owner`'s claim (call inside the transaction that writes the grant, with
  // the caller's lock): the owner's task, of whichever kind has phases that wait for a claim, is
  // due at once (Store::wake_task), whichever replica holds its lease. A row another transaction
  // holds locked (a step of that task on another replica) is woken again at this kernel's next
  // pass, so a grant that step did not see is never left for the safety tick.
  Status wake_claim_owner(const std::string& owner);
  // The task being stepped continues on the next pass (a job's identity registered now, the job
  // started by its next step): its next step is due at once, even in a phase that waits for its
  // claim. Outside a step, the same as wake().
  void step_again_at_once();
  // Something changed: the driver's next wait() ends now.
  void wake();
  // Waits until wake() or until `tick` passed: what the driver does between passes.
  void wait(std::chrono::milliseconds tick);
  int64_t step_errors() const { return step_errors_.load(); }
  // Inside a step: checks again, in the step's transaction, that this replica still holds the
  // stepped task's lease under the step's fence (failed_precondition for a lease taken over;
  // unavailable when the server ended the step's transaction, as it does to a replica that was
  // stopped longer than its idle limit). Called right before an effect outside the store that must
  // happen at most once per attempt (starting a job), so that a replica resuming from a stop does
  // not start what the replica that took its lease over has started. ok outside a step.
  Status recheck_lease();
  // Inside a step: the fence of the stepped task's lease (what a job started by the step carries,
  // TRAINER_LAUNCH_FENCE, and proves its start with: docs/durability.md, "Replicas"). 0 outside a step.
  int64_t step_fence() const { return in_step_ && stepping_ != nullptr ? stepping_fence_ : 0; }
  // Waits for every launched work to end (the service's stop()); later launches are refused.
  void stop_work();
  // Whether stop_work() was called: long work made of many pieces checks it between them and ends
  // early (its task's next step after a restart launches it anew).
  bool work_stopping();
  // Gives back the leases this replica took (the service's stop(), after the driver's last pass),
  // so that another replica may step its tasks at once instead of waiting for the leases to run
  // out, as it must for a replica that was killed.
  void release_leases();
  ~TaskKernel();

 private:
  friend class Step;
  struct Work {
    std::thread thread;
    bool done = false;                              // guarded by work_mu_
    std::optional<Result<nlohmann::json>> outcome;  // guarded by work_mu_, set when done
  };
  static std::string work_key(const store::TaskRow& task) { return task.kind + '\n' + task.id; }

  // One step of `task` of `kind` in its own transaction; false when another replica holds it.
  Result<bool> step_task(TaskKind& kind, const store::TaskRow& task, double now);
  double due_after(const PhaseTable& table, const std::string& phase) const;
  // The wakes wake_claim_owner() could not write (the row was locked), tried again; those still
  // locked stay for the next pass.
  void retry_wakes();
  void recheck_claim_waits_at_start();  // the first pass's: every task waiting for its claim due now
  void note_entered(const std::string& kind, const std::string& id, const std::string& phase);
  // wake(), or, inside a step, once the step's transaction has committed.
  void wake_when_committed();

  store::Store& store_;
  const std::shared_ptr<Clock> clock_;
  const KernelOptions opt_;
  std::map<std::string, TaskKind*> kinds_;     // constant after the first pass
  std::vector<TaskKind*> order_;               // constant after the first pass
  std::atomic<int64_t> step_errors_{0};
  bool first_pass_done_ = false;  // guarded by the caller's lock
  RepeatedErrors said_;      // guarded by the caller's lock: the step errors logged, by "KIND ID"
  bool in_step_ = false;     // guarded by the caller's lock: a step runs
  const store::TaskRow* stepping_ = nullptr;  // guarded by the caller's lock: the task a step runs for
  int64_t stepping_fence_ = 0;                // guarded by the caller's lock: that step's fence
  bool wake_after_step_ = false;  // guarded by the caller's lock: the step moved a task
  bool step_again_ = false;       // guarded by the caller's lock: the stepped task asked for its next step at once
  std::string kill_reason_;  // guarded by the caller's lock: the hook's boundary, once crossed in a step
  std::set<std::pair<std::string, std::string>> unwoken_;  // guarded by the caller's lock: (kind, id) to wake again

  std::mutex held_mu_;
  std::set<std::pair<std::string, std::string>> held_;  // guarded by held_mu_: (kind, id) leased by us

  std::mutex work_mu_;
  std::map<std::string, std::unique_ptr<Work>> work_;  // guarded by work_mu_, by work_key()
  bool work_stopped_ = false;                          // guarded by work_mu_

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool woken_ = false;  // guarded by wake_mu_
};

}  // namespace trainer::tasks

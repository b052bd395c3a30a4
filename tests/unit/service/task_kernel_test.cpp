// The task kernel on a real store, SQLite and PostgreSQL (the session's server, as the store's own
// suite: store_databases.h): due tasks stepped under leases, phase changes checked against the
// table, idle and terminal phases left alone, a failed step's writes rolled back, and two replicas
// on one database never stepping the same task.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "../store/store_databases.h"
#include "service/tasks/task_kernel.h"

namespace trainer::tasks {
namespace {

// A toy kind: A -> B -> DONE, B may park (idle) and be woken back to B by a request.
class ToyKind final : public TaskKind {
 public:
  explicit ToyKind(TaskKernel* kernel)
      : kernel_(kernel),
        table_(*PhaseTable::make("toy", {{"A"}, {"B"}, {"PARKED", false, false, true}, {"DONE", true}},
                                 {{"A", {"B", "DONE"}}, {"B", {"PARKED", "DONE"}}, {"PARKED", {"B"}}})) {}
  const PhaseTable& table() const override { return table_; }
  Status step(Step& step) override {
    const std::string& id = step.task().id;
    ++steps[id];
    if (on_step) return on_step(step);
    if (step.task().phase == "A") return kernel_->move("toy", id, "B");
    return Status::ok();
  }
  std::map<std::string, int> steps;
  std::function<Status(Step&)> on_step;

 private:
  TaskKernel* kernel_;
  PhaseTable table_;
};

// A fresh database of the parameter's store for each test.
class TaskKernelTest : public ::testing::TestWithParam<store::Kind> {
 protected:
  void SetUp() override {
    db_ = store::make_database(GetParam());
    if (!db_->ready()) GTEST_FAIL() << "the test's database could not be made";
    clock_ = std::make_shared<ManualClock>(1000.0);
  }

  // A connection (a replica's store) to the test's database; each call opens another.
  std::unique_ptr<store::Store> open() {
    auto s = db_->open();
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s.is_ok()) return nullptr;
    return std::move(*s);
  }

  std::unique_ptr<store::TestDatabase> db_;
  std::shared_ptr<ManualClock> clock_;
};

INSTANTIATE_TEST_SUITE_P(Sqlite, TaskKernelTest, ::testing::Values(store::Kind::kSqlite), store::kind_name);
INSTANTIATE_TEST_SUITE_P(Postgres, TaskKernelTest, ::testing::Values(store::Kind::kPostgres), store::kind_name);

// Two replicas of one kind on one database: "replica-a" and "replica-b", leases of 30 s.
struct TwoReplicas {
  TwoReplicas(std::unique_ptr<store::Store> sa, std::unique_ptr<store::Store> sb, const std::shared_ptr<ManualClock>& clock)
      : store_a(std::move(sa)),
        store_b(std::move(sb)),
        a(*store_a, clock, KernelOptions{"replica-a", 30}),
        b(*store_b, clock, KernelOptions{"replica-b", 30}),
        kind_a(&a),
        kind_b(&b) {
    a.add_kind(kind_a);
    b.add_kind(kind_b);
  }
  std::unique_ptr<store::Store> store_a, store_b;
  TaskKernel a, b;
  ToyKind kind_a, kind_b;
};

TEST_P(TaskKernelTest, ADueTaskIsSteppedUntilItEndsAndNeverAfter) {
  auto store = open();
  TaskKernel kernel(*store, clock_, KernelOptions{});
  ToyKind kind(&kernel);
  kernel.add_kind(kind);
  ASSERT_TRUE(store->transaction([&] { return kernel.create("toy", "t1", "A"); }).is_ok());
  EXPECT_EQ(kernel.drive_once(), 1);
  EXPECT_EQ((*store->get_task("toy", "t1"))->phase, "B");
  EXPECT_EQ(kernel.drive_once(), 1) << "B wants a step every pass";
  ASSERT_TRUE(store->transaction([&] { return kernel.move("toy", "t1", "DONE"); }).is_ok());
  EXPECT_EQ(kernel.drive_once(), 0);
  EXPECT_EQ(kind.steps["t1"], 2);
  EXPECT_TRUE((*store->get_task("toy", "t1"))->terminal);
}

TEST_P(TaskKernelTest, AnIdlePhaseWaitsForAMoveAndAStepMayAskForALaterStep) {
  auto store = open();
  TaskKernel kernel(*store, clock_, KernelOptions{});
  ToyKind kind(&kernel);
  kernel.add_kind(kind);
  ASSERT_TRUE(store->transaction([&] {
                     TRAINER_RETURN_IF_ERROR(kernel.create("toy", "t1", "B"));
                     return kernel.move("toy", "t1", "PARKED");
                   })
                  .is_ok());
  EXPECT_EQ(kernel.drive_once(), 0) << "a parked task is not due";
  ASSERT_TRUE(store->transaction([&] { return kernel.move("toy", "t1", "B"); }).is_ok());
  kind.on_step = [&](Step& s) {
    s.due_at(s.now() + 60);
    return Status::ok();
  };
  EXPECT_EQ(kernel.drive_once(), 1);
  EXPECT_EQ(kernel.drive_once(), 0) << "it asked for its next step a minute later";
  clock_->advance(std::chrono::seconds(61));
  EXPECT_EQ(kernel.drive_once(), 1);
}

TEST_P(TaskKernelTest, AMoveTheTableDoesNotAllowIsRefusedAndChangesNothing) {
  auto store = open();
  TaskKernel kernel(*store, clock_, KernelOptions{});
  ToyKind kind(&kernel);
  kernel.add_kind(kind);
  ASSERT_TRUE(store->transaction([&] { return kernel.create("toy", "t1", "A"); }).is_ok());
  Status st = store->transaction([&] { return kernel.move("toy", "t1", "PARKED"); });
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("a toy cannot move from A to PARKED"), std::string::npos) << st.message();
  EXPECT_EQ((*store->get_task("toy", "t1"))->phase, "A");
}

TEST_P(TaskKernelTest, AFailedStepRollsBackItsWritesAndTheTaskStaysDue) {
  auto store = open();
  TaskKernel kernel(*store, clock_, KernelOptions{});
  ToyKind kind(&kernel);
  kernel.add_kind(kind);
  ASSERT_TRUE(store->transaction([&] { return kernel.create("toy", "t1", "A"); }).is_ok());
  kind.on_step = [&](Step& s) -> Status {
    TRAINER_RETURN_IF_ERROR(kernel.move("toy", s.task().id, "B"));
    TRAINER_RETURN_IF_ERROR(store->put_base_model({{"name", "written-by-the-step"}}));
    return unavailable("the backend did not answer");
  };
  EXPECT_EQ(kernel.drive_once(), 0);
  EXPECT_EQ(kernel.step_errors(), 1);
  EXPECT_EQ((*store->get_task("toy", "t1"))->phase, "A") << "the move was rolled back";
  EXPECT_TRUE(store->list_base_models()->empty()) << "and so was the step's own write";
  kind.on_step = nullptr;
  EXPECT_EQ(kernel.drive_once(), 1) << "it is stepped again on the next pass";
  EXPECT_EQ((*store->get_task("toy", "t1"))->phase, "B");
}

TEST_P(TaskKernelTest, TwoReplicasOnOneDatabaseNeverStepTheSameTaskAndTheSecondTakesOverOnceTheLeaseRunsOut) {
  TwoReplicas r(open(), open(), clock_);
  auto& [store_a, store_b, a, b, kind_a, kind_b] = r;
  ASSERT_TRUE(store_a->transaction([&] { return a.create("toy", "t1", "B"); }).is_ok());
  for (int pass = 0; pass < 3; ++pass) {
    a.drive_once();
    b.drive_once();
    clock_->advance(std::chrono::seconds(10));  // a renews its lease at half-time
  }
  EXPECT_EQ(kind_a.steps["t1"], 3);
  EXPECT_EQ(kind_b.steps["t1"], 0);
  const int64_t fence_a = (*store_a->get_task("toy", "t1"))->fence;
  clock_->advance(std::chrono::seconds(31));  // replica-a stalls past its lease
  EXPECT_EQ(b.drive_once(), 1);
  auto now = *store_b->get_task("toy", "t1");
  EXPECT_EQ(now->owner, "replica-b");
  EXPECT_EQ(now->fence, fence_a + 1);
  EXPECT_EQ(a.drive_once(), 0) << "replica-a finds the task under replica-b's lease";
  Status stale = store_a->check_task_lease("toy", "t1", "replica-a", fence_a);
  EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition) << "its writes under the old fence are refused";
}

TEST_P(TaskKernelTest, LongWorkRunsOffTheDriverAndItsOutcomeIsTakenByALaterStepOnce) {
  auto store = open();
  TaskKernel kernel(*store, clock_, KernelOptions{});
  ToyKind kind(&kernel);
  kernel.add_kind(kind);
  ASSERT_TRUE(store->transaction([&] { return kernel.create("toy", "t1", "B"); }).is_ok());
  std::mutex gate;
  gate.lock();  // the work waits on it: the driver must not
  int launched = 0;
  std::optional<Result<nlohmann::json>> seen;
  kind.on_step = [&](Step& s) -> Status {
    if (auto outcome = s.take_outcome()) {
      seen = std::move(outcome);
      return kernel.move("toy", s.task().id, "DONE");
    }
    if (!s.working()) {
      ++launched;
      s.launch([&]() -> Result<nlohmann::json> {
        std::lock_guard<std::mutex> wait(gate);
        return nlohmann::json{{"copied", 3}};
      });
    }
    return Status::ok();
  };
  EXPECT_EQ(kernel.drive_once(), 1);
  EXPECT_EQ(kernel.drive_once(), 1) << "the driver goes on while the work runs";
  EXPECT_EQ(launched, 1) << "a step that finds its work running does not launch it again";
  gate.unlock();
  for (int i = 0; i < 200 && !seen; ++i) {
    kernel.wait(std::chrono::milliseconds(50));  // the work's end wakes the driver
    kernel.drive_once();
  }
  ASSERT_TRUE(seen.has_value());
  ASSERT_TRUE(seen->is_ok());
  EXPECT_EQ((**seen)["copied"], 3);
  EXPECT_TRUE((*store->get_task("toy", "t1"))->terminal);
}

TEST_P(TaskKernelTest, ARestartedReplicaOfTheSameNameStepsItsTasksAtOnce) {
  auto store = open();
  {
    TaskKernel before(*store, clock_, KernelOptions{});
    ToyKind kind(&before);
    before.add_kind(kind);
    ASSERT_TRUE(store->transaction([&] { return before.create("toy", "t1", "B"); }).is_ok());
    EXPECT_EQ(before.drive_once(), 1);
  }
  TaskKernel after(*store, clock_, KernelOptions{});
  ToyKind kind(&after);
  after.add_kind(kind);
  EXPECT_EQ(after.drive_once(), 1) << "its own lease is renewed, not waited out";
}

TEST_P(TaskKernelTest, AReplicaThatStopsGivesItsLeasesBackAndAnotherStepsItsTasksAtOnce) {
  TwoReplicas r(open(), open(), clock_);
  auto& [store_a, store_b, a, b, kind_a, kind_b] = r;
  ASSERT_TRUE(store_a->transaction([&] { return a.create("toy", "t1", "B"); }).is_ok());
  EXPECT_EQ(a.drive_once(), 1);
  EXPECT_EQ(b.drive_once(), 0) << "replica-a's lease runs";
  a.stop_work();
  a.release_leases();
  EXPECT_EQ((*store_a->get_task("toy", "t1"))->owner, "");
  EXPECT_EQ(b.drive_once(), 1) << "no wait for the lease to run out";
  EXPECT_EQ((*store_b->get_task("toy", "t1"))->owner, "replica-b");
}

// A kind whose WAITING phase waits for its claim: A -> WAITING -> GO -> DONE.
class ClaimKind final : public TaskKind {
 public:
  ClaimKind()
      : table_(*PhaseTable::make("claimer",
                                 {{"WAITING", false, true, false, true}, {"GO", false, true}, {"DONE", true}},
                                 {{"WAITING", {"GO", "DONE"}}, {"GO", {"DONE"}}})) {}
  const PhaseTable& table() const override { return table_; }
  Status step(Step& step) override {
    ++steps[step.task().id];
    if (again_steps > 0) {
      --again_steps;
      again->step_again_at_once();  // as a step that registers its job's identity and starts it next
    }
    return Status::ok();
  }
  std::map<std::string, int> steps;
  TaskKernel* again = nullptr;
  int again_steps = 0;  // how many steps ask for the next one at once

 private:
  PhaseTable table_;
};

TEST_P(TaskKernelTest, AWaitingStepThatContinuesOnTheNextPassIsSteppedAgainAtOnce) {
  auto store = open();
  KernelOptions options;
  options.claim_recheck_seconds = 30;
  TaskKernel kernel(*store, clock_, options);
  ClaimKind kind;
  kind.again = &kernel;
  kind.again_steps = 1;
  kernel.add_kind(kind);
  ASSERT_TRUE(store->transaction([&] { return kernel.create("claimer", "c1", "WAITING"); }).is_ok());
  EXPECT_EQ(kernel.drive_once(), 1) << "the first step registers what its next step starts";
  EXPECT_EQ(kernel.drive_once(), 1) << "the next step comes at once, not at the claim's recheck";
  EXPECT_EQ(kernel.drive_once(), 0) << "a step that does not ask waits for its claim again";
  EXPECT_EQ(kind.steps["c1"], 2);
}

TEST_P(TaskKernelTest, APhaseThatWaitsForItsClaimIsSteppedWhenTheGrantWakesItOrAtTheRecheck) {
  auto store = open();
  KernelOptions options;
  options.claim_recheck_seconds = 30;
  TaskKernel kernel(*store, clock_, options);
  ClaimKind kind;
  ToyKind toy(&kernel);
  kernel.add_kind(toy);
  kernel.add_kind(kind);
  ASSERT_TRUE(store->transaction([&] { return kernel.create("claimer", "c1", "WAITING"); }).is_ok());
  EXPECT_EQ(kernel.drive_once(), 1) << "entering the phase, it is stepped at once";
  EXPECT_EQ(kernel.drive_once(), 0) << "then it waits for its claim";
  clock_->advance(std::chrono::seconds(10));
  EXPECT_EQ(kernel.drive_once(), 0);
  // Admission grants its claim: woken, it is due at once (the toy kind has no such phase).
  ASSERT_TRUE(store->transaction([&] { return kernel.wake_claim_owner("c1"); }).is_ok());
  EXPECT_EQ(kernel.drive_once(), 1);
  EXPECT_EQ(kernel.drive_once(), 0);
  // Without a grant, the recheck steps it again (a window that passed is found there).
  clock_->advance(std::chrono::seconds(31));
  EXPECT_EQ(kernel.drive_once(), 1);
  EXPECT_EQ(kind.steps["c1"], 3);
  EXPECT_TRUE(toy.steps.empty());
  // A task that ended is not woken.
  ASSERT_TRUE(store->transaction([&] { return kernel.move("claimer", "c1", "DONE"); }).is_ok());
  ASSERT_TRUE(store->transaction([&] { return kernel.wake_claim_owner("c1"); }).is_ok());
  EXPECT_EQ(kernel.drive_once(), 0);
  EXPECT_TRUE((*store->get_task("claimer", "c1"))->terminal);
}

TEST_P(TaskKernelTest, AGrantWokenOnAnotherReplicaIsSteppedByTheLeaseHolder) {
  auto sa = open();
  auto sb = open();
  TaskKernel a(*sa, clock_, KernelOptions{"replica-a", 60});
  TaskKernel b(*sb, clock_, KernelOptions{"replica-b", 60});
  ClaimKind kind_a, kind_b;
  a.add_kind(kind_a);
  b.add_kind(kind_b);
  ASSERT_TRUE(sa->transaction([&] { return a.create("claimer", "c1", "WAITING"); }).is_ok());
  EXPECT_EQ(a.drive_once(), 1);
  EXPECT_EQ(b.drive_once(), 0);
  // replica-b's admission grants the claim: replica-a, whose lease still runs, steps it.
  ASSERT_TRUE(sb->transaction([&] { return b.wake_claim_owner("c1"); }).is_ok());
  EXPECT_EQ(b.drive_once(), 0) << "due, but under replica-a's lease";
  EXPECT_EQ(a.drive_once(), 1);
  EXPECT_EQ(kind_a.steps["c1"], 2);
  EXPECT_EQ(kind_b.steps["c1"], 0);
}

}  // namespace
}  // namespace trainer::tasks

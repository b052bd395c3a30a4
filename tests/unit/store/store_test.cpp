// The Store's specification, run against both implementations: SQLite (a file in a temporary
// folder) and PostgreSQL (a fresh database on the server the CTest fixture `postgres` starts,
// tools/test-postgres). Migrations, uniqueness, ordering, paging, transactions, the change counter,
// leases and fences, and what holds between two connections to one database (two processes).
// What holds for one implementation only is in postgres_store_test.cpp.
#include "store/store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>
#include <tuple>
#include <vector>

#include "store_databases.h"

namespace trainer::store {
namespace {

class StoreTest : public StoreFixture {};

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreTest, ::testing::Values(Kind::kSqlite), kind_name);
INSTANTIATE_TEST_SUITE_P(Postgres, StoreTest, ::testing::Values(Kind::kPostgres), kind_name);

TEST_P(StoreTest, MigratesOnceAndRecordsTheSchemaVersion) {
  EXPECT_EQ(open()->schema_version(), kSchemaVersion);
  EXPECT_EQ(open()->schema_version(), kSchemaVersion);  // reopening applies nothing again
  EXPECT_EQ(db_->number("SELECT COUNT(*) FROM schema_migrations"), kSchemaVersion);
}

TEST_P(StoreTest, RefusesASchemaNewerThanItKnows) {
  { auto s = open(); }
  db_->exec("INSERT INTO schema_migrations(version) VALUES (99)");
  auto s = db_->open();
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("schema version 99 is newer"), std::string::npos);
}

TEST_P(StoreTest, ASubmissionIdBelongsToOneRun) {
  auto s = open();
  json a = run("aa01", "QUEUED");
  a["submissionId"] = "sub";
  ASSERT_TRUE(s->insert_run(a).is_ok());
  json b = run("bb02", "QUEUED");
  b["submissionId"] = "sub";
  Status st = s->insert_run(b);
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(st.field(), "submissionId");
  EXPECT_EQ(st.describe(), "submissionId: already used by another run");
  auto found = s->run_by_submission("sub");
  ASSERT_TRUE(found.is_ok() && found->has_value());
  EXPECT_EQ((**found)["runId"], "aa01");
  EXPECT_FALSE(s->get_run("bb02")->has_value());
}

TEST_P(StoreTest, ListsRunsNewestFirstWithFiltersAndTotals) {
  auto s = open();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        s->insert_run(run("r" + std::to_string(i), i % 2 ? "TRAINING" : "COMPLETED", i < 3 ? "w1" : "w2"))
            .is_ok());
  }
  RunFilter f;
  f.limit = 2;
  auto page = s->list_runs(f);
  ASSERT_TRUE(page.is_ok());
  EXPECT_EQ(page->total, 5);
  ASSERT_EQ(page->runs.size(), 2u);
  EXPECT_EQ(page->runs[0]["runId"], "r4");
  EXPECT_EQ(page->runs[1]["runId"], "r3");
  f.phases = {"TRAINING"};
  f.limit = 50;
  page = s->list_runs(f);
  EXPECT_EQ(page->total, 2);
  f.workload_id = "w2";
  page = s->list_runs(f);
  ASSERT_EQ(page->total, 1);
  EXPECT_EQ(page->runs[0]["runId"], "r3");
}

TEST_P(StoreTest, ATransactionThatFailsLeavesNothingBehind) {
  auto s = open();
  Status st = s->transaction([&]() -> Status {
    EXPECT_TRUE(s->insert_run(run("aa", "QUEUED")).is_ok());
    ClaimRow c{"aa", "SFT", "w1", "cpu", 1, "QUEUED", "t", 0};
    EXPECT_TRUE(s->insert_claim(c).is_ok());
    return internal_error("boom");
  });
  EXPECT_EQ(st.message(), "boom");
  EXPECT_FALSE(s->get_run("aa")->has_value());
  EXPECT_TRUE(s->list_claims()->empty());
}

TEST_P(StoreTest, ClaimsKeepTheirAdmissionOrderAcrossReopen) {
  {
    auto s = open();
    for (const char* owner : {"c", "a", "b"}) {
      ClaimRow c{owner, "SFT", "w1", "cpu", 1, "QUEUED", "t", 0};
      ASSERT_TRUE(s->insert_claim(c).is_ok());
    }
    ClaimRow again{"a", "SFT", "w1", "cpu", 1, "QUEUED", "t", 0};
    EXPECT_EQ(s->insert_claim(again).code(), StatusCode::kAlreadyExists);
    ClaimRow granted{"a", "SFT", "w1", "cpu", 2, "GRANTED", "t2", 0, {3, 10}};
    ASSERT_TRUE(s->update_claim(granted).is_ok());
  }
  auto s = open();
  auto claims = s->list_claims();
  ASSERT_TRUE(claims.is_ok());
  ASSERT_EQ(claims->size(), 3u);
  EXPECT_EQ((*claims)[0].owner, "c");
  EXPECT_EQ((*claims)[1].owner, "a");
  EXPECT_EQ((*claims)[1].state, "GRANTED");
  EXPECT_EQ((*claims)[1].device_ids, (std::vector<int>{3, 10}));  // the grant's device indices
  EXPECT_TRUE((*claims)[0].device_ids.empty());
  EXPECT_EQ((*claims)[2].owner, "b");
  // One claim by its owner: the same row the list has.
  auto one = s->get_claim("a");
  ASSERT_TRUE(one.is_ok() && one->has_value());
  EXPECT_EQ(((*one)->owner), "a");
  EXPECT_EQ(((*one)->state), "GRANTED");
  EXPECT_EQ(((*one)->devices), 2);
  EXPECT_EQ(((*one)->seq), (*claims)[1].seq);
  EXPECT_EQ(((*one)->device_ids), (std::vector<int>{3, 10}));
  ASSERT_TRUE(s->delete_claim("a").is_ok());
  ASSERT_TRUE(s->delete_claim("a").is_ok());  // absent is fine
  EXPECT_EQ(s->list_claims()->size(), 2u);
  auto gone = s->get_claim("a");
  ASSERT_TRUE(gone.is_ok());
  EXPECT_FALSE(gone->has_value());
}

TEST_P(StoreTest, ClaimsInOneStateAreListedByPoolInAdmissionOrder) {
  auto s = open();
  for (const auto& [owner, pool, state] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"q1", "cpu", "QUEUED"}, {"g1", "gpu", "GRANTED"}, {"q2", "gpu", "QUEUED"},
           {"q3", "other", "QUEUED"}, {"q4", "cpu", "QUEUED"}, {"g2", "cpu", "GRANTED"}}) {
    ClaimRow c{owner, "SFT", "w1", pool, 1, state, "t", 0};
    if (state == "GRANTED") c.device_ids = {0};
    ASSERT_TRUE(s->insert_claim(c).is_ok());
  }
  auto owners = [](const Result<std::vector<ClaimRow>>& claims) {
    std::vector<std::string> out;
    for (const auto& c : *claims) out.push_back(c.owner);
    return out;
  };
  auto granted = s->list_claims_in("GRANTED", {});
  ASSERT_TRUE(granted.is_ok()) << granted.status().to_string();
  EXPECT_EQ(owners(granted), (std::vector<std::string>{"g1", "g2"}));
  EXPECT_EQ((*granted)[0].device_ids, (std::vector<int>{0}));
  auto queued = s->list_claims_in("QUEUED", {"cpu", "gpu"});
  ASSERT_TRUE(queued.is_ok()) << queued.status().to_string();
  EXPECT_EQ(owners(queued), (std::vector<std::string>{"q1", "q2", "q4"}));
  EXPECT_EQ(owners(s->list_claims_in("QUEUED", {})), (std::vector<std::string>{"q1", "q2", "q3", "q4"}));
  EXPECT_TRUE(s->list_claims_in("QUEUED", {"nowhere"})->empty());
}

TEST_P(StoreTest, EventsAreNumberedPerRunAndStepMetricsReplaceARepeatedStep) {
  auto s = open();
  EXPECT_EQ(*s->append_run_event("r1", {{"type", "phase"}}), 1);
  EXPECT_EQ(*s->append_run_event("r1", {{"type", "step"}}), 2);
  EXPECT_EQ(*s->append_run_event("r2", {{"type", "phase"}}), 1);
  auto after = s->run_events("r1", 1, 10);
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0]["seq"], 2);
  ASSERT_TRUE(s->put_step_metrics("r1", 2, {{"step", 2}, {"loss", 1.0}}).is_ok());
  ASSERT_TRUE(s->put_step_metrics("r1", 1, {{"step", 1}, {"loss", 2.0}}).is_ok());
  ASSERT_TRUE(s->put_step_metrics("r1", 2, {{"step", 2}, {"loss", 0.5}}).is_ok());
  auto steps = s->step_metrics("r1", 10);
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0]["step"], 1);
  EXPECT_EQ((*steps)[1]["loss"], 0.5);
  EXPECT_EQ(s->step_metrics("r1", 1)->front()["step"], 2);  // the last N, ascending
}

TEST_P(StoreTest, WorkloadNamesAreUniqueAndFreedByRename) {
  auto s = open();
  ASSERT_TRUE(s->insert_workload({{"id", "i1"}, {"name", "a"}}).is_ok());
  EXPECT_EQ(s->insert_workload({{"id", "i2"}, {"name", "a"}}).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(s->update_workload({{"id", "i1"}, {"name", "b"}}).is_ok());
  ASSERT_TRUE(s->insert_workload({{"id", "i2"}, {"name", "a"}}).is_ok());
  EXPECT_EQ((**s->workload_by_name("b"))["id"], "i1");
}

TEST_P(StoreTest, TheChangeCountGrowsWithRunsWorkloadsAndClaimsOnly) {
  auto s = open();
  uint64_t v = *s->change_count();
  auto grew = [&] {
    uint64_t now = *s->change_count();
    bool g = now > v;
    v = now;
    return g;
  };
  ASSERT_TRUE(s->insert_run(run("aa", "QUEUED")).is_ok());
  EXPECT_TRUE(grew()) << "insert_run";
  ASSERT_TRUE(s->update_run(run("aa", "RUNNING")).is_ok());
  EXPECT_TRUE(grew()) << "update_run";
  ASSERT_TRUE(s->insert_workload({{"id", "i1"}, {"name", "a"}}).is_ok());
  EXPECT_TRUE(grew()) << "insert_workload";
  ASSERT_TRUE(s->update_workload({{"id", "i1"}, {"name", "b"}}).is_ok());
  EXPECT_TRUE(grew()) << "update_workload";
  ClaimRow c{"aa", "SFT", "i1", "cpu", 1, "QUEUED", "t", 0};
  ASSERT_TRUE(s->insert_claim(c).is_ok());
  EXPECT_TRUE(grew()) << "insert_claim";
  c.state = "GRANTED";
  ASSERT_TRUE(s->update_claim(c).is_ok());
  EXPECT_TRUE(grew()) << "update_claim";
  ASSERT_TRUE(s->delete_claim("aa").is_ok());
  EXPECT_TRUE(grew()) << "delete_claim";
  // What a list of runs does not show leaves it alone, and so do reads.
  ASSERT_TRUE(s->append_run_event("aa", {{"type", "x"}}).is_ok());
  ASSERT_TRUE(s->put_step_metrics("aa", 1, {{"loss", 1.0}}).is_ok());
  ASSERT_TRUE(s->list_run_rows(RunFilter{}).is_ok());
  EXPECT_FALSE(grew());
}

TEST_P(StoreTest, TheChangeCountIsKeptInTheDatabaseAndSeenByEveryConnection) {
  auto a = open();
  auto b = open();  // a second process on the same file, as a second trainerd would be
  const uint64_t before = *b->change_count();
  ASSERT_TRUE(a->insert_run(run("aa", "QUEUED")).is_ok());
  EXPECT_GT(*b->change_count(), before);
  const uint64_t after = *a->change_count();
  a.reset();
  b.reset();
  EXPECT_EQ(*open()->change_count(), after) << "the count survives closing the store";
}

TEST_P(StoreTest, ARolledBackWriteLeavesTheChangeCountAlone) {
  auto s = open();
  const uint64_t before = *s->change_count();
  Status st = s->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(s->insert_run(run("aa", "QUEUED")));
    return internal_error("no");
  });
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(*s->change_count(), before);
}

TEST_P(StoreTest, ATaskIsInsertedOnceAndListedWhenDueEarliestFirst) {
  auto s = open();
  ASSERT_TRUE(s->insert_task(task("t2", "A", 20)).is_ok());
  ASSERT_TRUE(s->insert_task(task("t1", "A", 10)).is_ok());
  ASSERT_TRUE(s->insert_task(task("t3", "A", kNeverDue)).is_ok());
  EXPECT_EQ(s->insert_task(task("t1")).code(), StatusCode::kAlreadyExists);
  auto due = s->due_tasks("toy", 25, 10);
  ASSERT_TRUE(due.is_ok());
  ASSERT_EQ(due->size(), 2u);
  EXPECT_EQ((*due)[0].id, "t1");
  EXPECT_EQ((*due)[1].id, "t2");
  EXPECT_EQ((*due)[0].version, 1);
  EXPECT_TRUE(s->due_tasks("other", 25, 10)->empty());
}

TEST_P(StoreTest, ALeaseIsRenewedByItsOwnerAndTakenOverWithANewFenceOnlyOnceItRunsOut) {
  auto s = open();
  ASSERT_TRUE(s->insert_task(task("t1")).is_ok());
  auto a = s->acquire_task_lease("toy", "t1", "replica-a", 100, 30);
  ASSERT_TRUE(a.is_ok() && a->has_value());
  EXPECT_EQ((*a)->fence, 1);
  EXPECT_FALSE(s->acquire_task_lease("toy", "t1", "replica-b", 120, 30)->has_value())
      << "a's lease still runs";
  auto renewed = s->acquire_task_lease("toy", "t1", "replica-a", 125, 30);
  ASSERT_TRUE(renewed->has_value());
  EXPECT_EQ((*renewed)->fence, 1) << "a renewal keeps the fence";
  auto b = s->acquire_task_lease("toy", "t1", "replica-b", 160, 30);
  ASSERT_TRUE(b->has_value()) << "a's lease ran out at 155";
  EXPECT_EQ((*b)->fence, 2);
  EXPECT_EQ(s->acquire_task_lease("toy", "nope", "replica-a", 100, 30).status().code(),
            StatusCode::kNotFound);
}

TEST_P(StoreTest, AWriteUnderAStaleFenceIsRefusedAndChangesNothing) {
  auto s = open();
  ASSERT_TRUE(s->insert_task(task("t1")).is_ok());
  const int64_t old_fence = (*s->acquire_task_lease("toy", "t1", "replica-a", 100, 30))->fence;
  // replica-a stalls past its lease; replica-b takes the task over and moves it on.
  const int64_t new_fence = (*s->acquire_task_lease("toy", "t1", "replica-b", 200, 30))->fence;
  ASSERT_TRUE(s->update_task(task("t1", "B", 300), new_fence).is_ok());
  // replica-a wakes up and writes what it decided before: refused by the fence.
  Status st = s->update_task(task("t1", "C", 0), old_fence);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("stale"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("replica-b"), std::string::npos) << st.message();
  EXPECT_EQ(s->check_task_lease("toy", "t1", "replica-a", old_fence).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s->check_task_lease("toy", "t1", "replica-b", new_fence).is_ok());
  auto now = s->get_task("toy", "t1");
  EXPECT_EQ((*now)->phase, "B");
  EXPECT_DOUBLE_EQ((*now)->due_at, 300);
  EXPECT_EQ((*now)->version, 2);
}

TEST_P(StoreTest, AWriteOfAnOldVersionIsRefused) {
  auto s = open();
  ASSERT_TRUE(s->insert_task(task("t1")).is_ok());
  ASSERT_TRUE(s->update_task_if_version(task("t1", "B"), 1).is_ok());
  EXPECT_EQ(s->update_task_if_version(task("t1", "C"), 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*s->get_task("toy", "t1"))->phase, "B");
}

TEST_P(StoreTest, AReleasedLeaseIsTakenAtOnceUnderANewFence) {
  auto s = open();
  ASSERT_TRUE(s->insert_task(task("t1")).is_ok());
  ASSERT_TRUE(s->acquire_task_lease("toy", "t1", "replica-a", 100, 30)->has_value());
  ASSERT_TRUE(s->release_task_lease("toy", "t1", "replica-a").is_ok());
  auto b = s->acquire_task_lease("toy", "t1", "replica-b", 101, 30);
  ASSERT_TRUE(b->has_value());
  EXPECT_EQ((*b)->fence, 2);
}

TEST_P(StoreTest, AWokenTaskIsDueAtOnceUnlessItEnded) {
  auto s = open();
  ASSERT_TRUE(s->insert_task(task("t1", "WAITING", 130)).is_ok());
  ASSERT_TRUE(s->insert_task(task("t2", "WAITING", kNeverDue)).is_ok());
  TaskRow ended = task("t3", "DONE", kNeverDue);
  ended.terminal = true;
  ASSERT_TRUE(s->insert_task(ended).is_ok());
  const int64_t fence = (*s->acquire_task_lease("toy", "t1", "replica-a", 100, 30))->fence;
  EXPECT_TRUE(s->due_tasks("toy", 110, 10)->empty());
  for (const char* id : {"t1", "t2", "t3", "absent"}) {
    auto woken = s->wake_task("toy", id);
    ASSERT_TRUE(woken.is_ok()) << woken.status().to_string();
    EXPECT_TRUE(*woken) << id << ": done, or nothing to do";
  }
  auto due = s->due_tasks("toy", 110, 10);
  ASSERT_EQ(due->size(), 2u);
  EXPECT_EQ((*due)[0].id, "t1");
  EXPECT_EQ((*due)[1].id, "t2");
  auto t1 = *s->get_task("toy", "t1");
  EXPECT_DOUBLE_EQ(t1->due_at, 0);
  EXPECT_EQ(t1->phase, "WAITING");
  EXPECT_EQ(t1->owner, "replica-a") << "the wake leaves the lease alone";
  EXPECT_EQ(t1->fence, fence);
  EXPECT_EQ((*s->get_task("toy", "t3"))->due_at, kNeverDue) << "an ended task is not woken";
}

TEST_P(StoreTest, ReplicasBeatAndOnlyRecentBeatsAreLive) {
  auto s = open();
  ASSERT_TRUE(s->beat_replica({"b-1", "host-b", "http://127.0.0.1:2", 100, 100}).is_ok());
  ASSERT_TRUE(s->beat_replica({"a-1", "host-a", "http://127.0.0.1:1", 90, 95}).is_ok());
  // A later beat moves the heartbeat and keeps when the replica started.
  ASSERT_TRUE(s->beat_replica({"a-1", "host-a", "http://127.0.0.1:1", 120, 120}).is_ok());
  auto live = s->live_replicas(100);
  ASSERT_TRUE(live.is_ok()) << live.status().to_string();
  ASSERT_EQ(live->size(), 2u);
  EXPECT_EQ((*live)[0].name, "a-1");
  EXPECT_EQ((*live)[0].instance, "host-a");
  EXPECT_EQ((*live)[0].url, "http://127.0.0.1:1");
  EXPECT_EQ((*live)[0].started_at, 90);
  EXPECT_EQ((*live)[0].heartbeat_at, 120);
  EXPECT_EQ((*live)[1].name, "b-1");
  // A replica whose last beat is older than `since` is not live.
  auto recent = s->live_replicas(110);
  ASSERT_TRUE(recent.is_ok());
  ASSERT_EQ(recent->size(), 1u);
  EXPECT_EQ((*recent)[0].name, "a-1");
  // A clean stop removes the row; removing it again is no error.
  ASSERT_TRUE(s->remove_replica("a-1").is_ok());
  ASSERT_TRUE(s->remove_replica("a-1").is_ok());
  auto after = s->live_replicas(0);
  ASSERT_TRUE(after.is_ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].name, "b-1");
}

TEST_P(StoreTest, TheAdmissionLockIsTakenInsideATransaction) {
  auto s = open();
  Status st = s->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(s->lock_admission());
    TRAINER_RETURN_IF_ERROR(s->lock_admission());  // taken again by the same transaction: no wait
    return s->list_claims().status();
  });
  EXPECT_TRUE(st.is_ok()) << st.to_string();
}

TEST_P(StoreTest, MigrationNineGivesEveryExistingRunATask) {
  {
    auto s = open();
    ASSERT_TRUE(s->insert_run(run("aa", "TRAINING")).is_ok());
  }
  // Rewind to schema 8 as an older trainerd left it: no task rows, no counter (nor job reports, nor
  // endpoints, nor replicas).
  db_->exec(
      GetParam() == Kind::kSqlite
          ? "DROP TABLE tasks; DROP TABLE counters; DROP TRIGGER runs_inserted; DROP TRIGGER runs_updated;"
            "DROP TRIGGER runs_deleted; DROP TRIGGER workloads_inserted; DROP TRIGGER workloads_updated;"
            "DROP TRIGGER workloads_deleted; DROP TRIGGER claims_inserted; DROP TRIGGER claims_updated;"
            "DROP TRIGGER claims_deleted; DROP TABLE job_attempts; DROP TABLE job_events; DROP TABLE "
            "job_logs;"
            "DROP TABLE endpoints; DROP TABLE dataset_analyses; DROP TABLE claim_holds; DROP TABLE replicas; DROP TABLE sessions; DROP TABLE curations; DROP TABLE curation_scores; DROP TABLE pipelines; DROP TABLE distillations; DROP TABLE distillation_chunks; DROP TABLE api_tokens; DROP TABLE audit_log;"
            "DELETE FROM schema_migrations WHERE version >= 9;"
          : "DROP TABLE tasks; DROP TABLE counters; DROP FUNCTION count_change() CASCADE;"
            "DROP TABLE job_attempts; DROP TABLE job_events; DROP TABLE job_logs; DROP TABLE endpoints;"
            "DROP TABLE dataset_analyses; DROP TABLE claim_holds; DROP TABLE replicas; DROP TABLE sessions; DROP TABLE curations; DROP TABLE curation_scores; DROP TABLE pipelines; DROP TABLE distillations; DROP TABLE distillation_chunks; DROP TABLE api_tokens; DROP TABLE audit_log;"
            "DELETE FROM schema_migrations WHERE version >= 9;");
  auto s = open();
  auto t = s->get_task("run", "aa");
  ASSERT_TRUE(t.is_ok() && t->has_value());
  EXPECT_EQ((*t)->phase, "TRAINING");
  EXPECT_FALSE((*t)->terminal);
}

TEST_P(StoreTest, ClaimHoldsEndOnReleaseAndListByOverlapAcrossReopen) {
  {
    auto s = open();
    ClaimHoldRow a{0, "a", "SFT", "w1", "cpu", 2, 1000, std::nullopt};
    ClaimHoldRow b{0, "b", "SERVING", "w2", "gpu", 1, 1500, std::nullopt};
    ClaimHoldRow old{0, "c", "EVALUATION", "w1", "cpu", 1, 100, 200.0};
    ASSERT_TRUE(s->insert_claim_hold(a).is_ok());
    ASSERT_TRUE(s->insert_claim_hold(b).is_ok());
    ASSERT_TRUE(s->insert_claim_hold(old).is_ok());
    EXPECT_LT(a.seq, b.seq);
    ASSERT_TRUE(s->end_claim_holds("a", 2000).is_ok());
    ASSERT_TRUE(s->end_claim_holds("a", 3000).is_ok());  // nothing open: the first release stays
    ASSERT_TRUE(s->end_claim_holds("nobody", 3000).is_ok());
    ClaimHoldRow again{0, "a", "SFT", "w1", "cpu", 2, 2500.25, std::nullopt};  // granted again
    ASSERT_TRUE(s->insert_claim_hold(again).is_ok());
  }
  auto s = open();
  auto all = s->list_claim_holds(0, 1e12);
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].owner, "a");
  EXPECT_EQ((*all)[0].kind, "SFT");
  EXPECT_EQ((*all)[0].workload_id, "w1");
  EXPECT_EQ((*all)[0].pool, "cpu");
  EXPECT_EQ((*all)[0].devices, 2);
  EXPECT_EQ((*all)[0].granted_at, 1000);
  EXPECT_EQ((*all)[0].released_at, std::optional<double>(2000));
  EXPECT_FALSE((*all)[1].released_at.has_value());  // b is still held
  EXPECT_EQ((*all)[3].granted_at, 2500.25);
  EXPECT_FALSE((*all)[3].released_at.has_value());
  // [2000, 2400): a's first hold ended at 2000 exactly (not in it), c long before; b holds on.
  auto mid = s->list_claim_holds(2000, 2400);
  ASSERT_TRUE(mid.is_ok());
  ASSERT_EQ(mid->size(), 1u);
  EXPECT_EQ((*mid)[0].owner, "b");
  // [0, 1000): only c, granted at 100; a was granted at the range's end.
  auto early = s->list_claim_holds(0, 1000);
  ASSERT_TRUE(early.is_ok());
  ASSERT_EQ(early->size(), 1u);
  EXPECT_EQ((*early)[0].owner, "c");
}

TEST_P(StoreTest, AClaimHoldWrittenInAFailedTransactionIsGone) {
  auto s = open();
  Status st = s->transaction([&]() -> Status {
    ClaimHoldRow h{0, "a", "SFT", "w1", "cpu", 1, 10, std::nullopt};
    EXPECT_TRUE(s->insert_claim_hold(h).is_ok());
    return internal_error("boom");
  });
  EXPECT_EQ(st.message(), "boom");
  EXPECT_TRUE(s->list_claim_holds(0, 1e12)->empty());
}

TEST_P(StoreTest, MigrationThirteenGivesEveryGrantedClaimAnOpenHoldFromItsSince) {
  {
    auto s = open();
    ClaimRow granted{"a", "SFT", "w1", "cpu", 2, "QUEUED", "2026-01-31T18:00:00.000Z", 0};
    ASSERT_TRUE(s->insert_claim(granted).is_ok());
    granted.state = "GRANTED";
    granted.since = "2026-01-31T18:00:01.500Z";
    ASSERT_TRUE(s->update_claim(granted).is_ok());
    ClaimRow queued{"b", "SFT", "w1", "cpu", 1, "QUEUED", "2026-01-31T18:00:00.000Z", 0};
    ASSERT_TRUE(s->insert_claim(queued).is_ok());
  }
  // Rewind to schema 12, as the trainerd before claim holds left it (and before replicas).
  db_->exec("DROP TABLE claim_holds; DROP TABLE replicas; DROP TABLE sessions; DROP TABLE curations; DROP TABLE curation_scores; DROP TABLE pipelines; DROP TABLE distillations; DROP TABLE distillation_chunks; DROP TABLE api_tokens; DROP TABLE audit_log; DELETE FROM schema_migrations WHERE version >= 13;");
  auto s = open();
  auto holds = s->list_claim_holds(0, 1e12);
  ASSERT_TRUE(holds.is_ok());
  ASSERT_EQ(holds->size(), 1u);
  EXPECT_EQ((*holds)[0].owner, "a");
  EXPECT_EQ((*holds)[0].devices, 2);
  EXPECT_DOUBLE_EQ((*holds)[0].granted_at, 1769882401.5);  // 2026-01-31T18:00:01.5Z
  EXPECT_FALSE((*holds)[0].released_at.has_value());
}

TEST_P(StoreTest, PagesTakeEveryRowForANegativeLimitAndCountANegativeOffsetAsZero) {
  auto s = open();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->insert_run(run("r" + std::to_string(i), "QUEUED")).is_ok());
  RunFilter f;
  f.limit = -1;
  f.offset = -5;
  auto page = s->list_runs(f);
  ASSERT_TRUE(page.is_ok()) << page.status().to_string();
  ASSERT_EQ(page->runs.size(), 3u);
  EXPECT_EQ(page->runs[0]["runId"], "r2");
  ASSERT_TRUE(s->insert_child("c1", "p").is_ok());
  ASSERT_TRUE(s->insert_child("c2", "p").is_ok());
  EXPECT_EQ(s->run_children("p", -1, 0)->run_ids.size(), 2u);
  ASSERT_TRUE(s->append_run_event("r0", {{"type", "a"}}).is_ok());
  ASSERT_TRUE(s->append_run_event("r0", {{"type", "b"}}).is_ok());
  EXPECT_EQ(s->run_events("r0", 0, -1)->size(), 2u);
}

TEST_P(StoreTest, IdsAndNamesAreOrderedByteByByte) {
  auto s = open();
  for (const char* id : {"ab", "a_1", "aB", "b"}) ASSERT_TRUE(s->insert_run(run(id, "QUEUED")).is_ok());
  // 'B' (0x42) < '_' (0x5f) < 'b' (0x62), whatever the database's locale says.
  EXPECT_EQ(*s->run_ids_with_prefix("a", 10), (std::vector<std::string>{"aB", "a_1", "ab"}));
  ASSERT_TRUE(s->insert_workload({{"id", "1"}, {"name", "beta"}}).is_ok());
  ASSERT_TRUE(s->insert_workload({{"id", "2"}, {"name", "Zeta"}}).is_ok());
  auto all = s->list_workloads();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0]["name"], "Zeta");
}

TEST_P(StoreTest, ANestedTransactionJoinsTheOuterOne) {
  auto s = open();
  Status st = s->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(s->transaction([&]() -> Status { return s->insert_run(run("aa", "QUEUED")); }));
    EXPECT_TRUE(s->get_run("aa")->has_value()) << "the inner write is seen inside the outer transaction";
    return internal_error("outer fails");
  });
  EXPECT_EQ(st.message(), "outer fails");
  EXPECT_FALSE(s->get_run("aa")->has_value()) << "the inner transaction's write went with the outer one";
}

TEST_P(StoreTest, TwoConnectionsRacingForALeaseGetItOnceEachRound) {
  auto a = open();
  auto b = open();  // a second process on the same database, as a second trainerd would be
  ASSERT_TRUE(a->insert_task(task("t1")).is_ok());
  for (int round = 0; round < 20; ++round) {
    const double now = 100.0 * (round + 1);  // the previous round's lease (30 s) ran out
    std::latch go(2);
    Result<std::optional<TaskLease>> got_a = internal_error("not run"), got_b = internal_error("not run");
    std::thread ta([&] {
      go.arrive_and_wait();
      got_a = a->acquire_task_lease("toy", "t1", "replica-a", now, 30);
    });
    std::thread tb([&] {
      go.arrive_and_wait();
      got_b = b->acquire_task_lease("toy", "t1", "replica-b", now, 30);
    });
    ta.join();
    tb.join();
    ASSERT_TRUE(got_a.is_ok()) << got_a.status().to_string();
    ASSERT_TRUE(got_b.is_ok()) << got_b.status().to_string();
    ASSERT_NE(got_a->has_value(), got_b->has_value())
        << "round " << round << ": exactly one replica holds the lease";
    const std::string winner = got_a->has_value() ? "replica-a" : "replica-b";
    const int64_t fence = got_a->has_value() ? (*got_a)->fence : (*got_b)->fence;
    auto row = b->get_task("toy", "t1");
    EXPECT_EQ((*row)->owner, winner);
    EXPECT_EQ((*row)->fence, fence);
  }
}

TEST_P(StoreTest, ALeaseCheckedInATransactionCannotBeTakenOverBeforeItsWritesCommit) {
  auto a = open();
  auto b = open();
  ASSERT_TRUE(a->insert_task(task("t1")).is_ok());
  ASSERT_TRUE(a->insert_run(run("r1", "QUEUED")).is_ok());
  const int64_t fence = (*a->acquire_task_lease("toy", "t1", "replica-a", 100, 30))->fence;
  std::latch checked(2);
  Status step;
  std::thread replica_a([&] {
    step = a->transaction([&]() -> Status {
      TRAINER_RETURN_IF_ERROR(a->check_task_lease("toy", "t1", "replica-a", fence));
      checked.arrive_and_wait();
      // A slow step: replica-b sees the lease as run out meanwhile.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return a->update_run(run("r1", "TRAINING"));
    });
  });
  checked.arrive_and_wait();
  auto taken = b->acquire_task_lease("toy", "t1", "replica-b", 1000, 30);
  // The takeover waited for replica-a's transaction: its write is there once b holds the lease.
  auto seen = b->get_run("r1");
  replica_a.join();
  EXPECT_TRUE(step.is_ok()) << step.to_string();
  ASSERT_TRUE(taken.is_ok()) << taken.status().to_string();
  ASSERT_TRUE(taken->has_value());
  EXPECT_EQ((*taken)->fence, fence + 1);
  ASSERT_TRUE(seen.is_ok() && seen->has_value());
  EXPECT_EQ((**seen)["phase"], "TRAINING") << "the lease was taken over before the guarded write committed";
}

TEST_P(StoreTest, TwoProcessesOpeningANewDatabaseAtOnceMigrateItOnce) {
  constexpr int kOpeners = 4;
  std::vector<Result<std::unique_ptr<Store>>> opened;
  for (int i = 0; i < kOpeners; ++i) opened.emplace_back(internal_error("not run"));
  std::latch go(kOpeners);
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&, i] {
      go.arrive_and_wait();
      opened[i] = db_->open();  // a connection of its own, as another trainerd's
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : opened) {
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_EQ((*s)->schema_version(), kSchemaVersion);
  }
  EXPECT_EQ(db_->number("SELECT COUNT(*) FROM schema_migrations"), kSchemaVersion);
}

}  // namespace
}  // namespace trainer::store

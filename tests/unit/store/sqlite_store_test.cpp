// The SQLite store: migrations, durability settings, uniqueness, ordering, transactions.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "store/store.h"

namespace trainer::store {
namespace {

namespace fs = std::filesystem;

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("store-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "state.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Store> open() {
    auto s = open_sqlite_store(path_);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return std::move(*s);
  }

  static json run(const std::string& id, const std::string& phase, const std::string& workload = "w1") {
    return {{"runId", id}, {"workload", {{"id", workload}, {"name", "n"}}}, {"phase", phase}, {"submissionId", nullptr}};
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(SqliteStoreTest, MigratesOnceAndRecordsTheSchemaVersion) {
  EXPECT_EQ(open()->schema_version(), 12);
  EXPECT_EQ(open()->schema_version(), 12);  // reopening applies nothing again
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM schema_migrations", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 12);
  sqlite3_finalize(st);
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST_F(SqliteStoreTest, BundleVersionsAreKeptPerNameInVersionOrder) {
  auto s = open();
  ASSERT_TRUE(s->insert_bundle_version({{"name", "scoring"}, {"version", 2}, {"sha", "bb"}}).is_ok());
  ASSERT_TRUE(s->insert_bundle_version({{"name", "scoring"}, {"version", 1}, {"sha", "aa"}}).is_ok());
  ASSERT_TRUE(s->insert_bundle_version({{"name", "other"}, {"version", 1}, {"sha", "aa"}}).is_ok());
  Status again = s->insert_bundle_version({{"name", "scoring"}, {"version", 1}, {"sha", "cc"}});
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  auto all = s->list_bundle_versions();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0]["name"], "other");
  EXPECT_EQ((*all)[1]["sha"], "aa");
  EXPECT_EQ((*all)[2]["version"], 2);
}

TEST_F(SqliteStoreTest, RefusesASchemaNewerThanItKnows) {
  { auto s = open(); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "INSERT INTO schema_migrations(version) VALUES (99)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto s = open_sqlite_store(path_);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("schema version 99 is newer"), std::string::npos);
}

TEST_F(SqliteStoreTest, ASubmissionIdBelongsToOneRun) {
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

TEST_F(SqliteStoreTest, ListsRunsNewestFirstWithFiltersAndTotals) {
  auto s = open();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(s->insert_run(run("r" + std::to_string(i), i % 2 ? "TRAINING" : "COMPLETED", i < 3 ? "w1" : "w2")).is_ok());
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

TEST_F(SqliteStoreTest, ATransactionThatFailsLeavesNothingBehind) {
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

TEST_F(SqliteStoreTest, ClaimsKeepTheirAdmissionOrderAcrossReopen) {
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
  ASSERT_TRUE(s->delete_claim("a").is_ok());
  ASSERT_TRUE(s->delete_claim("a").is_ok());  // absent is fine
  EXPECT_EQ(s->list_claims()->size(), 2u);
}

TEST_F(SqliteStoreTest, ClaimHoldsEndOnReleaseAndListByOverlapAcrossReopen) {
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
    ClaimHoldRow again{0, "a", "SFT", "w1", "cpu", 2, 2500, std::nullopt};  // granted again
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
  EXPECT_EQ((*all)[3].granted_at, 2500);
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

TEST_F(SqliteStoreTest, AClaimHoldWrittenInAFailedTransactionIsGone) {
  auto s = open();
  Status st = s->transaction([&]() -> Status {
    ClaimHoldRow h{0, "a", "SFT", "w1", "cpu", 1, 10, std::nullopt};
    EXPECT_TRUE(s->insert_claim_hold(h).is_ok());
    return internal_error("boom");
  });
  EXPECT_EQ(st.message(), "boom");
  EXPECT_TRUE(s->list_claim_holds(0, 1e12)->empty());
}

TEST_F(SqliteStoreTest, DatasetsAreInsertedOnceAndAliasesMove) {
  auto s = open();
  EXPECT_TRUE(*s->insert_dataset({{"hash", "abc1"}, {"rows", 1}}));
  EXPECT_FALSE(*s->insert_dataset({{"hash", "abc1"}, {"rows", 1}}));
  EXPECT_TRUE(*s->insert_dataset({{"hash", "abd2"}, {"rows", 2}}));
  ASSERT_TRUE(s->set_alias("train", "abc1").is_ok());
  ASSERT_TRUE(s->set_alias("train", "abd2").is_ok());
  EXPECT_EQ(**s->get_alias("train"), "abd2");
  EXPECT_EQ(s->datasets_with_prefix("ab")->size(), 2u);
  EXPECT_EQ(s->datasets_with_prefix("abc")->size(), 1u);
  EXPECT_EQ((*s->list_datasets())[0]["hash"], "abd2");  // newest first
  EXPECT_EQ(s->set_alias("x", "nothing").code(), StatusCode::kInternal);  // a dangling alias is refused
}

TEST_F(SqliteStoreTest, EventsAreNumberedPerRunAndStepMetricsReplaceARepeatedStep) {
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

TEST_F(SqliteStoreTest, WorkloadNamesAreUniqueAndFreedByRename) {
  auto s = open();
  ASSERT_TRUE(s->insert_workload({{"id", "i1"}, {"name", "a"}}).is_ok());
  EXPECT_EQ(s->insert_workload({{"id", "i2"}, {"name", "a"}}).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(s->update_workload({{"id", "i1"}, {"name", "b"}}).is_ok());
  ASSERT_TRUE(s->insert_workload({{"id", "i2"}, {"name", "a"}}).is_ok());
  EXPECT_EQ((**s->workload_by_name("b"))["id"], "i1");
}

TEST_F(SqliteStoreTest, TheChangeCountGrowsWithRunsWorkloadsAndClaimsOnly) {
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

TEST_F(SqliteStoreTest, TheChangeCountIsKeptInTheDatabaseAndSeenByEveryConnection) {
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

TEST_F(SqliteStoreTest, ARolledBackWriteLeavesTheChangeCountAlone) {
  auto s = open();
  const uint64_t before = *s->change_count();
  Status st = s->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(s->insert_run(run("aa", "QUEUED")));
    return internal_error("no");
  });
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(*s->change_count(), before);
}

TaskRow task(const std::string& id, const std::string& phase = "A", double due = 0) {
  TaskRow r;
  r.kind = "toy";
  r.id = id;
  r.phase = phase;
  r.due_at = due;
  return r;
}

TEST_F(SqliteStoreTest, ATaskIsInsertedOnceAndListedWhenDueEarliestFirst) {
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

TEST_F(SqliteStoreTest, ALeaseIsRenewedByItsOwnerAndTakenOverWithANewFenceOnlyOnceItRunsOut) {
  auto s = open();
  ASSERT_TRUE(s->insert_task(task("t1")).is_ok());
  auto a = s->acquire_task_lease("toy", "t1", "replica-a", 100, 30);
  ASSERT_TRUE(a.is_ok() && a->has_value());
  EXPECT_EQ((*a)->fence, 1);
  EXPECT_FALSE(s->acquire_task_lease("toy", "t1", "replica-b", 120, 30)->has_value()) << "a's lease still runs";
  auto renewed = s->acquire_task_lease("toy", "t1", "replica-a", 125, 30);
  ASSERT_TRUE(renewed->has_value());
  EXPECT_EQ((*renewed)->fence, 1) << "a renewal keeps the fence";
  auto b = s->acquire_task_lease("toy", "t1", "replica-b", 160, 30);
  ASSERT_TRUE(b->has_value()) << "a's lease ran out at 155";
  EXPECT_EQ((*b)->fence, 2);
  EXPECT_EQ(s->acquire_task_lease("toy", "nope", "replica-a", 100, 30).status().code(), StatusCode::kNotFound);
}

TEST_F(SqliteStoreTest, AWriteUnderAStaleFenceIsRefusedAndChangesNothing) {
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

TEST_F(SqliteStoreTest, AWriteOfAnOldVersionIsRefused) {
  auto s = open();
  ASSERT_TRUE(s->insert_task(task("t1")).is_ok());
  ASSERT_TRUE(s->update_task_if_version(task("t1", "B"), 1).is_ok());
  EXPECT_EQ(s->update_task_if_version(task("t1", "C"), 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*s->get_task("toy", "t1"))->phase, "B");
}

TEST_F(SqliteStoreTest, AReleasedLeaseIsTakenAtOnceUnderANewFence) {
  auto s = open();
  ASSERT_TRUE(s->insert_task(task("t1")).is_ok());
  ASSERT_TRUE(s->acquire_task_lease("toy", "t1", "replica-a", 100, 30)->has_value());
  ASSERT_TRUE(s->release_task_lease("toy", "t1", "replica-a").is_ok());
  auto b = s->acquire_task_lease("toy", "t1", "replica-b", 101, 30);
  ASSERT_TRUE(b->has_value());
  EXPECT_EQ((*b)->fence, 2);
}

TEST_F(SqliteStoreTest, MigrationNineGivesEveryExistingRunATask) {
  {
    auto s = open();
    ASSERT_TRUE(s->insert_run(run("aa", "TRAINING")).is_ok());
  }
  // Rewind to schema 8 as an older trainerd left it: no task rows, no counter (nor job reports, nor endpoints).
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE tasks; DROP TABLE counters; DROP TRIGGER runs_inserted; DROP TRIGGER runs_updated;"
                         "DROP TRIGGER runs_deleted; DROP TRIGGER workloads_inserted; DROP TRIGGER workloads_updated;"
                         "DROP TRIGGER workloads_deleted; DROP TRIGGER claims_inserted; DROP TRIGGER claims_updated;"
                         "DROP TRIGGER claims_deleted; DROP TABLE job_attempts; DROP TABLE job_events; DROP TABLE job_logs;"
                         "DROP TABLE endpoints; DROP TABLE claim_holds;"
                         "DELETE FROM schema_migrations WHERE version >= 9;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = open();
  auto t = s->get_task("run", "aa");
  ASSERT_TRUE(t.is_ok() && t->has_value());
  EXPECT_EQ((*t)->phase, "TRAINING");
  EXPECT_FALSE((*t)->terminal);
}

TEST_F(SqliteStoreTest, MigrationTwelveGivesEveryGrantedClaimAnOpenHoldFromItsSince) {
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
  // Rewind to schema 11, as the trainerd before claim holds left it.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE claim_holds; DELETE FROM schema_migrations WHERE version >= 12;", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = open();
  auto holds = s->list_claim_holds(0, 1e12);
  ASSERT_TRUE(holds.is_ok());
  ASSERT_EQ(holds->size(), 1u);
  EXPECT_EQ((*holds)[0].owner, "a");
  EXPECT_EQ((*holds)[0].devices, 2);
  EXPECT_DOUBLE_EQ((*holds)[0].granted_at, 1769882401.5);  // 2026-01-31T18:00:01.5Z
  EXPECT_FALSE((*holds)[0].released_at.has_value());
}

TEST_F(SqliteStoreTest, SnapshotCatalogKeepsOneRowPerIdAndListsARunsCommittedSnapshotsNewestFirst) {
  auto s = open();
  auto snap = [](const std::string& id, const std::string& run, int64_t step, const std::string& state) {
    return json{{"snapshotId", id}, {"runId", run}, {"savedStep", step}, {"state", state}};
  };
  ASSERT_TRUE(s->insert_snapshot(snap("aa01", "r1", 2, "committed")).is_ok());
  ASSERT_TRUE(s->insert_snapshot(snap("aa02", "r1", 4, "reserved")).is_ok());
  ASSERT_TRUE(s->insert_snapshot(snap("bb01", "r1", 6, "committed")).is_ok());
  ASSERT_TRUE(s->insert_snapshot(snap("cc01", "r2", 2, "committed")).is_ok());
  EXPECT_EQ(s->insert_snapshot(snap("aa01", "r1", 2, "reserved")).code(), StatusCode::kAlreadyExists);

  auto committed = s->list_snapshots("r1", "committed", 50, 0);
  ASSERT_TRUE(committed.is_ok());
  ASSERT_EQ(committed->total, 2);
  EXPECT_EQ(committed->snapshots[0]["snapshotId"], "bb01");
  EXPECT_EQ(committed->snapshots[1]["snapshotId"], "aa01");
  auto any = s->list_snapshots("r1", "", 1, 1);
  ASSERT_TRUE(any.is_ok());
  EXPECT_EQ(any->total, 3);
  ASSERT_EQ(any->snapshots.size(), 1u);
  EXPECT_EQ(any->snapshots[0]["snapshotId"], "aa02");

  ASSERT_TRUE(s->update_snapshot(snap("aa02", "r1", 4, "committed")).is_ok());
  EXPECT_EQ(s->list_snapshots("r1", "committed", 50, 0)->total, 3);
  EXPECT_EQ(s->update_snapshot(snap("zz", "r1", 4, "committed")).code(), StatusCode::kNotFound);

  auto ids = s->snapshot_ids_with_prefix("aa", 10);
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::vector<std::string>{"aa01", "aa02"}));
  EXPECT_EQ((*s->get_snapshot("cc01"))->at("runId"), "r2");
  EXPECT_FALSE(s->get_snapshot("nope")->has_value());
}

TEST_F(SqliteStoreTest, ModelRegistryKeepsOneRowPerIdAndListsByWorkloadBaseModelAndStatus) {
  auto model = [](const std::string& id, const json& workload, const std::string& base, const std::string& status) {
    return json{{"modelId", id}, {"workload", workload}, {"baseModel", {{"name", base}}}, {"status", status}};
  };
  const json w1 = {{"id", "w1"}, {"name", "one"}};
  {
    auto s = open();
    ASSERT_TRUE(s->insert_trained_model(model("ab01", w1, "tiny", "PENDING")).is_ok());
    ASSERT_TRUE(s->insert_trained_model(model("ab02", nullptr, "tiny", "REGISTERED")).is_ok());
    ASSERT_TRUE(s->insert_trained_model(model("cd01", w1, "other", "COPYING")).is_ok());
    EXPECT_EQ(s->insert_trained_model(model("ab01", w1, "tiny", "PENDING")).code(), StatusCode::kAlreadyExists);
    EXPECT_EQ(s->update_trained_model(model("zz", w1, "tiny", "FAILED")).code(), StatusCode::kNotFound);
    ASSERT_TRUE(s->update_trained_model(model("ab01", w1, "tiny", "REGISTERED")).is_ok());
  }
  auto s = open();  // durable across reopening
  auto ids = [](const Result<std::vector<json>>& r) {
    std::vector<std::string> out;
    for (const auto& m : *r) out.push_back(m["modelId"]);
    return out;
  };
  EXPECT_EQ(ids(s->list_trained_models("", "", {})), (std::vector<std::string>{"cd01", "ab02", "ab01"}));
  EXPECT_EQ(ids(s->list_trained_models("w1", "", {})), (std::vector<std::string>{"cd01", "ab01"}));
  EXPECT_EQ(ids(s->list_trained_models("", "tiny", {"REGISTERED"})), (std::vector<std::string>{"ab02", "ab01"}));
  EXPECT_EQ(ids(s->list_trained_models("", "", {"PENDING", "COPYING"})), (std::vector<std::string>{"cd01"}));
  EXPECT_EQ((*s->get_trained_model("ab01"))->at("status"), "REGISTERED");
  EXPECT_FALSE(s->get_trained_model("ab")->has_value());
  EXPECT_EQ(*s->trained_model_ids_with_prefix("ab", 10), (std::vector<std::string>{"ab01", "ab02"}));
}

TEST_F(SqliteStoreTest, LineageListsAParentsChildrenNewestFirstAndGivesEachChildOneParent) {
  {
    auto s = open();
    ASSERT_TRUE(s->insert_child("c1", "p").is_ok());
    ASSERT_TRUE(s->insert_child("c2", "p").is_ok());
    ASSERT_TRUE(s->insert_child("g1", "c1").is_ok());
    EXPECT_EQ(s->insert_child("c1", "other").code(), StatusCode::kAlreadyExists);
  }
  auto s = open();  // durable across a reopen
  auto page = s->run_children("p", 50, 0);
  ASSERT_TRUE(page.is_ok());
  EXPECT_EQ(page->total, 2);
  EXPECT_EQ(page->run_ids, (std::vector<std::string>{"c2", "c1"}));
  auto second = s->run_children("p", 1, 1);
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(second->total, 2);
  EXPECT_EQ(second->run_ids, (std::vector<std::string>{"c1"}));
  EXPECT_EQ(s->run_children("c1", 50, 0)->run_ids, (std::vector<std::string>{"g1"}));
  EXPECT_EQ(s->run_children("nobody", 50, 0)->total, 0);
}

TEST_F(SqliteStoreTest, ComparisonsKeepOneRowPerIdAndListBySourceAndPhaseNewestFirst) {
  auto comparison = [](const std::string& id, const std::string& source, const std::string& phase) {
    return json{{"comparisonId", id}, {"source", {{"snapshotId", source}}}, {"phase", phase}};
  };
  auto ids = [](const Result<ComparisonPage>& page) {
    std::vector<std::string> out;
    for (const auto& c : page->comparisons) out.push_back(c["comparisonId"].get<std::string>());
    return out;
  };
  {
    auto s = open();
    ASSERT_TRUE(s->insert_comparison(comparison("c1", "s1", "PREPARING")).is_ok());
    ASSERT_TRUE(s->insert_comparison(comparison("c2", "s2", "RUNNING")).is_ok());
    ASSERT_TRUE(s->insert_comparison(comparison("c3", "s1", "PREPARING")).is_ok());
    EXPECT_EQ(s->insert_comparison(comparison("c1", "s1", "PREPARING")).code(), StatusCode::kAlreadyExists);
    ASSERT_TRUE(s->update_comparison(comparison("c1", "s1", "COMPLETED")).is_ok());
    EXPECT_EQ(s->update_comparison(comparison("zz", "s1", "COMPLETED")).code(), StatusCode::kNotFound);
  }
  auto s = open();  // durable across a reopen
  auto all = s->list_comparisons("", {}, 100, 0);
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all->total, 3);
  EXPECT_EQ(ids(all), (std::vector<std::string>{"c3", "c2", "c1"}));
  auto second = s->list_comparisons("", {}, 1, 1);
  EXPECT_EQ(second->total, 3);
  EXPECT_EQ(ids(second), (std::vector<std::string>{"c2"}));
  EXPECT_EQ(ids(s->list_comparisons("s1", {}, 100, 0)), (std::vector<std::string>{"c3", "c1"}));
  EXPECT_EQ(ids(s->list_comparisons("", {"PREPARING", "RUNNING"}, 100, 0)), (std::vector<std::string>{"c3", "c2"}));
  EXPECT_EQ(s->list_comparisons("s1", {"PREPARING"}, 100, 0)->total, 1);
  EXPECT_EQ((*s->get_comparison("c1"))->at("phase"), "COMPLETED");
  EXPECT_FALSE(s->get_comparison("c")->has_value());
  EXPECT_EQ(*s->comparison_ids_with_prefix("c", 2), (std::vector<std::string>{"c1", "c2"}));
}

TEST_F(SqliteStoreTest, EndpointsKeepOneRowPerIdAndListByPhaseNewestFirst) {
  auto endpoint = [](const std::string& id, const std::string& phase) {
    return json{{"endpointId", id}, {"phase", phase}};
  };
  auto ids = [](const Result<std::vector<json>>& docs) {
    std::vector<std::string> out;
    for (const auto& d : *docs) out.push_back(d["endpointId"].get<std::string>());
    return out;
  };
  {
    auto s = open();
    ASSERT_TRUE(s->put_endpoint(endpoint("e1", "STARTING")).is_ok());
    ASSERT_TRUE(s->put_endpoint(endpoint("e2", "READY")).is_ok());
    ASSERT_TRUE(s->put_endpoint(endpoint("e1", "DELETED")).is_ok());  // replaced, keeps its place
  }
  auto s = open();  // durable across a reopen
  EXPECT_EQ(ids(s->list_endpoints({})), (std::vector<std::string>{"e2", "e1"}));
  EXPECT_EQ(ids(s->list_endpoints({"READY", "STARTING"})), (std::vector<std::string>{"e2"}));
  EXPECT_EQ((*s->get_endpoint("e1"))->at("phase"), "DELETED");
  EXPECT_FALSE(s->get_endpoint("e")->has_value());
  EXPECT_EQ(*s->endpoint_ids_with_prefix("e", 5), (std::vector<std::string>{"e1", "e2"}));
}

}  // namespace
}  // namespace trainer::store

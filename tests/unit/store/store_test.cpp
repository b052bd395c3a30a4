// The Store's specification, run against both implementations: SQLite (a file in a temporary
// folder) and PostgreSQL (a fresh database on the server the CTest fixture `postgres` starts,
// tools/test-postgres). Migrations, uniqueness, ordering, paging, transactions, the change counter,
// leases and fences, and what holds between two connections to one database (two processes).
// Tests named PostgresStore.* and SqliteStore.* are about one implementation only.
#include "store/store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <latch>
#include <ostream>
#include <thread>
#include <vector>

namespace trainer::store {
namespace {

namespace fs = std::filesystem;

enum class Kind { kSqlite, kPostgres };

// How gtest (and so ctest's test names) shows a parameter.
void PrintTo(Kind kind, std::ostream* os) {
  *os << (kind == Kind::kSqlite ? "sqlite" : "postgres");
}

// One empty database of one implementation, and what a test does behind the store's back (raw
// SQL, as an older trainerd or an operator would).
// The schema version both stores migrate to (one per migration; each store's list has them all).
constexpr int kSchemaVersion = 19;

class TestDatabase {
 public:
  virtual ~TestDatabase() = default;
  // Whether the database was made (a failure to make it is reported already).
  virtual bool ready() const = 0;
  virtual Result<std::unique_ptr<Store>> open() = 0;
  // Runs `sql` (one statement or several); a failure fails the test.
  virtual void exec(const std::string& sql) = 0;
  // The integer in the first column of the first row `sql` returns (-1 and a test failure when none).
  virtual int64_t number(const std::string& sql) = 0;
};

std::string test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "-" + info->name();
  for (char& c : name) {
    if (c == '/') c = '-';
  }
  return name;
}

class SqliteDatabase final : public TestDatabase {
 public:
  SqliteDatabase() {
    dir_ = fs::temp_directory_path() / ("store-test-" + std::to_string(::getpid()) + "-" + test_name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "state.db").string();
  }
  ~SqliteDatabase() override { fs::remove_all(dir_); }

  bool ready() const override { return true; }

  Result<std::unique_ptr<Store>> open() override { return open_sqlite_store(path_); }

  void exec(const std::string& sql) override {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "") << "\n"
                                                                                << sql;
    sqlite3_free(err);
    sqlite3_close(db);
  }

  int64_t number(const std::string& sql) override {
    sqlite3* db = nullptr;
    if (sqlite3_open(path_.c_str(), &db) != SQLITE_OK) {
      ADD_FAILURE() << "cannot open " << path_;
      return -1;
    }
    sqlite3_stmt* st = nullptr;
    int64_t out = -1;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      out = sqlite3_column_int64(st, 0);
    } else {
      ADD_FAILURE() << sqlite3_errmsg(db) << "\n" << sql;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  }

  const std::string& path() const { return path_; }

 private:
  fs::path dir_;
  std::string path_;
};

// The server's URL (a superuser's, ending in /DATABASE): $TRAINER_TEST_POSTGRES_URL, else the
// file $TRAINER_TEST_POSTGRES_URL_FILE names (what the CTest fixture writes). "" when neither.
std::string server_url() {
  if (const char* url = std::getenv("TRAINER_TEST_POSTGRES_URL"); url != nullptr && *url != '\0') return url;
  const char* file = std::getenv("TRAINER_TEST_POSTGRES_URL_FILE");
  if (file == nullptr || *file == '\0') return "";
  std::ifstream in(file);
  std::string url;
  std::getline(in, url);
  return url;
}

// A libpq connection of the test's own (to make databases, and to act behind the store's back).
class RawConnection {
 public:
  explicit RawConnection(const std::string& url) : conn_(PQconnectdb(url.c_str())) {}
  ~RawConnection() { PQfinish(conn_); }
  bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }
  std::string error() const { return PQerrorMessage(conn_); }
  // Runs `sql`; "" when it succeeded, else the server's message.
  std::string exec(const std::string& sql, std::string* first_value = nullptr) {
    PGresult* r = PQexec(conn_, sql.c_str());
    std::string err;
    const ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      err = PQresultErrorMessage(r);
      if (err.empty()) err = "failed";
    } else if (first_value != nullptr) {
      if (PQntuples(r) > 0) {
        *first_value = PQgetvalue(r, 0, 0);
      } else {
        err = "no rows";
      }
    }
    PQclear(r);
    return err;
  }

 private:
  PGconn* conn_;
};

class PostgresDatabase final : public TestDatabase {
 public:
  PostgresDatabase() {
    server_ = server_url();
    if (server_.empty()) {
      ADD_FAILURE()
          << "no PostgreSQL server for the tests: run them through ctest (its fixture `postgres` starts one "
             "with tools/test-postgres), or set TRAINER_TEST_POSTGRES_URL to a superuser's "
             "postgresql://USER@HOST:PORT/DATABASE";
      return;
    }
    static std::atomic<int> made{0};
    name_ = "store_test_" + std::to_string(::getpid()) + "_" + std::to_string(made++);
    RawConnection admin(server_);
    if (!admin.ok()) {
      ADD_FAILURE() << "cannot connect to the tests' PostgreSQL server " << server_ << ": " << admin.error();
      return;
    }
    const std::string err = admin.exec("CREATE DATABASE " + name_);
    if (!err.empty()) {
      ADD_FAILURE() << "CREATE DATABASE " << name_ << ": " << err;
      return;
    }
    made_ = true;
    url_ = server_.substr(0, server_.rfind('/') + 1) + name_;
  }
  ~PostgresDatabase() override {
    if (name_.empty()) return;
    RawConnection admin(server_);
    if (admin.ok()) (void)admin.exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  }

  bool ready() const override { return made_; }

  Result<std::unique_ptr<Store>> open() override {
    if (!made_) return unavailable("no PostgreSQL server for the tests (see the failure above)");
    return open_postgres_store(url_);
  }

  void exec(const std::string& sql) override {
    RawConnection db(url_);
    ASSERT_TRUE(db.ok()) << db.error();
    EXPECT_EQ(db.exec(sql), "") << sql;
  }

  int64_t number(const std::string& sql) override {
    RawConnection db(url_);
    std::string value;
    const std::string err = db.ok() ? db.exec(sql, &value) : db.error();
    if (!err.empty()) {
      ADD_FAILURE() << err << "\n" << sql;
      return -1;
    }
    return std::stoll(value);
  }

  const std::string& url() const { return url_; }
  const std::string& name() const { return name_; }

 private:
  std::string server_;  // the server's URL (its own database)
  std::string name_;    // this test's database
  std::string url_;     // the URL of this test's database
  bool made_ = false;   // the database was created
};

// Waits for `latch` at most `bound` (a guard against a hang in a test, never a timing): whether it
// was reached.
bool all_read_within(std::latch& latch, std::chrono::seconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!latch.try_wait()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

json queued_run(const std::string& id) {
  return {{"runId", id},
          {"workload", {{"id", "w1"}, {"name", "n"}}},
          {"phase", "QUEUED"},
          {"submissionId", nullptr}};
}

std::unique_ptr<TestDatabase> make_database(Kind kind) {
  if (kind == Kind::kSqlite) return std::make_unique<SqliteDatabase>();
  return std::make_unique<PostgresDatabase>();
}

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    db_ = make_database(GetParam());
    if (!db_->ready()) GTEST_FAIL() << "the test's database could not be made";
  }

  std::unique_ptr<Store> open() {
    auto s = db_->open();
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s.is_ok()) return nullptr;
    return std::move(*s);
  }

  static json run(const std::string& id, const std::string& phase, const std::string& workload = "w1") {
    return {{"runId", id},
            {"workload", {{"id", workload}, {"name", "n"}}},
            {"phase", phase},
            {"submissionId", nullptr}};
  }

  std::unique_ptr<TestDatabase> db_;
};

std::string kind_name(const ::testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kSqlite ? "sqlite" : "postgres";
}

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreTest, ::testing::Values(Kind::kSqlite), kind_name);
INSTANTIATE_TEST_SUITE_P(Postgres, StoreTest, ::testing::Values(Kind::kPostgres), kind_name);

TEST_P(StoreTest, MigratesOnceAndRecordsTheSchemaVersion) {
  EXPECT_EQ(open()->schema_version(), kSchemaVersion);
  EXPECT_EQ(open()->schema_version(), kSchemaVersion);  // reopening applies nothing again
  EXPECT_EQ(db_->number("SELECT COUNT(*) FROM schema_migrations"), kSchemaVersion);
}

TEST_P(StoreTest, BundleVersionsAreKeptPerNameInVersionOrder) {
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

TEST_P(StoreTest, DatasetsAreInsertedOnceAndAliasesMove) {
  auto s = open();
  EXPECT_TRUE(*s->insert_dataset({{"hash", "abc1"}, {"rows", 1}}));
  EXPECT_FALSE(*s->insert_dataset({{"hash", "abc1"}, {"rows", 1}}));
  EXPECT_TRUE(*s->insert_dataset({{"hash", "abd2"}, {"rows", 2}}));
  ASSERT_TRUE(s->set_alias("train", "abc1").is_ok());
  ASSERT_TRUE(s->set_alias("train", "abd2").is_ok());
  EXPECT_EQ(**s->get_alias("train"), "abd2");
  EXPECT_EQ(s->datasets_with_prefix("ab")->size(), 2u);
  EXPECT_EQ(s->datasets_with_prefix("abc")->size(), 1u);
  EXPECT_EQ((*s->list_datasets())[0]["hash"], "abd2");                    // newest first
  EXPECT_EQ(s->set_alias("x", "nothing").code(), StatusCode::kInternal);  // a dangling alias is refused
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

TaskRow task(const std::string& id, const std::string& phase = "A", double due = 0) {
  TaskRow r;
  r.kind = "toy";
  r.id = id;
  r.phase = phase;
  r.due_at = due;
  return r;
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

TEST_P(StoreTest, SnapshotCatalogKeepsOneRowPerIdAndListsARunsCommittedSnapshotsNewestFirst) {
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

TEST_P(StoreTest, ModelRegistryKeepsOneRowPerIdAndListsByWorkloadBaseModelAndStatus) {
  auto model = [](const std::string& id, const json& workload, const std::string& base,
                  const std::string& status) {
    return json{{"modelId", id}, {"workload", workload}, {"baseModel", {{"name", base}}}, {"status", status}};
  };
  const json w1 = {{"id", "w1"}, {"name", "one"}};
  {
    auto s = open();
    ASSERT_TRUE(s->insert_trained_model(model("ab01", w1, "tiny", "PENDING")).is_ok());
    ASSERT_TRUE(s->insert_trained_model(model("ab02", nullptr, "tiny", "REGISTERED")).is_ok());
    ASSERT_TRUE(s->insert_trained_model(model("cd01", w1, "other", "COPYING")).is_ok());
    EXPECT_EQ(s->insert_trained_model(model("ab01", w1, "tiny", "PENDING")).code(),
              StatusCode::kAlreadyExists);
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
  EXPECT_EQ(ids(s->list_trained_models("", "tiny", {"REGISTERED"})),
            (std::vector<std::string>{"ab02", "ab01"}));
  EXPECT_EQ(ids(s->list_trained_models("", "", {"PENDING", "COPYING"})), (std::vector<std::string>{"cd01"}));
  EXPECT_EQ((*s->get_trained_model("ab01"))->at("status"), "REGISTERED");
  EXPECT_FALSE(s->get_trained_model("ab")->has_value());
  EXPECT_EQ(*s->trained_model_ids_with_prefix("ab", 10), (std::vector<std::string>{"ab01", "ab02"}));
}

TEST_P(StoreTest, LineageListsAParentsChildrenNewestFirstAndGivesEachChildOneParent) {
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

TEST_P(StoreTest, ComparisonsKeepOneRowPerIdAndListBySourceAndPhaseNewestFirst) {
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
  EXPECT_EQ(ids(s->list_comparisons("", {"PREPARING", "RUNNING"}, 100, 0)),
            (std::vector<std::string>{"c3", "c2"}));
  EXPECT_EQ(s->list_comparisons("s1", {"PREPARING"}, 100, 0)->total, 1);
  EXPECT_EQ((*s->get_comparison("c1"))->at("phase"), "COMPLETED");
  EXPECT_FALSE(s->get_comparison("c")->has_value());
  EXPECT_EQ(*s->comparison_ids_with_prefix("c", 2), (std::vector<std::string>{"c1", "c2"}));
}

TEST_P(StoreTest, EndpointsKeepOneRowPerIdAndListByPhaseNewestFirst) {
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

TEST_P(StoreTest, PipelinesKeepOneRowPerIdAndListByPhaseNewestFirst) {
  auto pipeline = [](const std::string& id, const std::string& phase) {
    return json{{"pipelineId", id}, {"phase", phase}, {"stages", json::array()}};
  };
  auto ids = [](const Result<std::vector<json>>& docs) {
    std::vector<std::string> out;
    for (const auto& d : *docs) out.push_back(d["pipelineId"].get<std::string>());
    return out;
  };
  {
    auto s = open();
    ASSERT_TRUE(s->put_pipeline(pipeline("p1", "RUNNING")).is_ok());
    ASSERT_TRUE(s->put_pipeline(pipeline("p2", "RUNNING")).is_ok());
    ASSERT_TRUE(s->put_pipeline(pipeline("p1", "COMPLETED")).is_ok());  // replaced, keeps its place
  }
  auto s = open();  // durable across a reopen
  EXPECT_EQ(ids(s->list_pipelines({})), (std::vector<std::string>{"p2", "p1"}));
  EXPECT_EQ(ids(s->list_pipelines({"RUNNING"})), (std::vector<std::string>{"p2"}));
  EXPECT_EQ((*s->get_pipeline("p1"))->at("phase"), "COMPLETED");
  EXPECT_FALSE(s->get_pipeline("p")->has_value());
  EXPECT_EQ(*s->pipeline_ids_with_prefix("p", 5), (std::vector<std::string>{"p1", "p2"}));
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

TEST_P(StoreTest, DatasetAnalysesKeepOneRowPerIdAndListADatasetsNewestFirst) {
  auto analysis = [](const std::string& id, const std::string& hash, const std::string& phase) {
    return json{{"analysisId", id}, {"dataset", {{"hash", hash}}}, {"phase", phase}};
  };
  auto ids = [](const Result<std::vector<json>>& docs) {
    std::vector<std::string> out;
    for (const auto& d : *docs) out.push_back(d["analysisId"].get<std::string>());
    return out;
  };
  {
    auto s = open();
    ASSERT_TRUE(s->put_dataset_analysis(analysis("a1", "h1", "PENDING")).is_ok());
    ASSERT_TRUE(s->put_dataset_analysis(analysis("a2", "h2", "PENDING")).is_ok());
    ASSERT_TRUE(s->put_dataset_analysis(analysis("a3", "h1", "RUNNING")).is_ok());
    ASSERT_TRUE(s->put_dataset_analysis(analysis("a1", "h1", "COMPLETED")).is_ok());  // replaced, keeps its place
  }
  auto s = open();  // durable across a reopen
  EXPECT_EQ(ids(s->list_dataset_analyses("h1")), (std::vector<std::string>{"a3", "a1"}));
  EXPECT_EQ(ids(s->list_dataset_analyses("h2")), (std::vector<std::string>{"a2"}));
  EXPECT_TRUE(s->list_dataset_analyses("h3")->empty());
  EXPECT_EQ((*s->get_dataset_analysis("a1"))->at("phase"), "COMPLETED");
  EXPECT_FALSE(s->get_dataset_analysis("a")->has_value());
  // A document without its keyed fields is refused, not stored half.
  EXPECT_FALSE(s->put_dataset_analysis(json{{"analysisId", "a4"}, {"phase", "PENDING"}}).is_ok());
  EXPECT_FALSE(s->get_dataset_analysis("a4")->has_value());
}

TEST_P(StoreTest, SessionsAreKeptOncePerHash) {
  {
    auto s = open();
    EXPECT_TRUE(*s->insert_session(json{{"hash", "h1"}, {"source", "oasst1"}}));
    EXPECT_FALSE(*s->insert_session(json{{"hash", "h1"}, {"source", "otel"}}));  // the first one stays
  }
  auto s = open();
  EXPECT_EQ((*s->get_session("h1"))->at("source"), "oasst1");
  EXPECT_FALSE(s->get_session("h2")->has_value());
}

TEST_P(StoreTest, CurationScoresAreKeptOncePerCandidateAcrossAReopen) {
  {
    auto s = open();
    ASSERT_TRUE(s->put_curation(json{{"curationId", "c1"}, {"phase", "PENDING"}}).is_ok());
    ASSERT_TRUE(s->put_curation(json{{"curationId", "c2"}, {"phase", "PENDING"}}).is_ok());
    ASSERT_TRUE(s->put_curation(json{{"curationId", "c1"}, {"phase", "JUDGING"}}).is_ok());  // replaced
    EXPECT_TRUE(*s->put_curation_score("c1", json{{"candidate", 2}, {"score", 0.5}}));
    EXPECT_TRUE(*s->put_curation_score("c1", json{{"candidate", 0}, {"score", 0.9}}));
    EXPECT_FALSE(*s->put_curation_score("c1", json{{"candidate", 2}, {"score", 0.1}}));  // judged once
    EXPECT_TRUE(*s->put_curation_score("c2", json{{"candidate", 2}, {"score", 0.3}}));
  }
  auto s = open();
  auto curations = s->list_curations();
  ASSERT_TRUE(curations.is_ok());
  ASSERT_EQ(curations->size(), 2u);
  EXPECT_EQ((*curations)[0]["curationId"], "c2");  // newest first
  EXPECT_EQ((*s->get_curation("c1"))->at("phase"), "JUDGING");
  auto scores = s->list_curation_scores("c1");
  ASSERT_TRUE(scores.is_ok());
  ASSERT_EQ(scores->size(), 2u);
  EXPECT_EQ((*scores)[0]["candidate"], 0);
  EXPECT_EQ((*scores)[1]["score"], 0.5);
  EXPECT_FALSE(s->put_curation_score("c1", json{{"score", 1}}).is_ok());  // no candidate index
  EXPECT_FALSE(s->put_curation(json{{"phase", "PENDING"}}).is_ok());
}

TEST_P(StoreTest, DistillationChunksAreStoredOnceEachAcrossAReopen) {
  {
    auto s = open();
    ASSERT_TRUE(s->put_distillation(json{{"distillationId", "d1"}, {"phase", "PENDING"}}).is_ok());
    ASSERT_TRUE(s->put_distillation(json{{"distillationId", "d2"}, {"phase", "PENDING"}}).is_ok());
    ASSERT_TRUE(s->put_distillation(json{{"distillationId", "d1"}, {"phase", "PAUSED"}}).is_ok());  // replaced
    EXPECT_TRUE(*s->put_distillation_chunk("d1", json{{"chunk", 1}, {"answers", json::array({1})}}));
    EXPECT_TRUE(*s->put_distillation_chunk("d1", json{{"chunk", 0}, {"answers", json::array()}}));
    EXPECT_FALSE(*s->put_distillation_chunk("d1", json{{"chunk", 1}, {"answers", json::array({2})}}));  // once
    EXPECT_TRUE(*s->put_distillation_chunk("d2", json{{"chunk", 1}}));
  }
  auto s = open();
  auto all = s->list_distillations();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0]["distillationId"], "d2");  // newest first
  EXPECT_EQ((*s->get_distillation("d1"))->at("phase"), "PAUSED");
  EXPECT_FALSE(s->get_distillation("d3")->has_value());
  auto chunks = s->list_distillation_chunks("d1");
  ASSERT_TRUE(chunks.is_ok());
  ASSERT_EQ(chunks->size(), 2u);
  EXPECT_EQ((*chunks)[0]["chunk"], 0);
  EXPECT_EQ((*chunks)[1]["answers"], json::array({1}));  // the first write stays
  EXPECT_FALSE(s->put_distillation_chunk("d1", json{{"answers", 1}}).is_ok());  // no chunk index
  EXPECT_FALSE(s->put_distillation(json{{"phase", "PENDING"}}).is_ok());
}

TEST_P(StoreTest, ApiTokensAreFoundByTheirHashAndListedOldestFirst) {
  auto token = [](const std::string& id, const std::string& hash, const std::string& role) {
    return json{{"tokenId", id}, {"hash", hash}, {"role", role}};
  };
  {
    auto s = open();
    ASSERT_TRUE(s->put_api_token(token("t1", "h1", "admin")).is_ok());
    ASSERT_TRUE(s->put_api_token(token("t2", "h2", "read")).is_ok());
    json revoked = token("t1", "h1", "admin");
    revoked["revokedAt"] = "2026-12-05T00:00:00Z";
    ASSERT_TRUE(s->put_api_token(revoked).is_ok());  // replaced, keeps its place
  }
  auto s = open();  // durable across a reopen
  auto all = s->list_api_tokens();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0]["tokenId"], "t1");
  EXPECT_EQ((*all)[0]["revokedAt"], "2026-12-05T00:00:00Z");
  EXPECT_EQ((*all)[1]["tokenId"], "t2");
  EXPECT_EQ((*s->find_api_token("h2"))->at("role"), "read");
  EXPECT_FALSE(s->find_api_token("h3")->has_value());
  // Another token with a hash already taken is refused: one secret names one token.
  EXPECT_FALSE(s->put_api_token(token("t3", "h2", "admin")).is_ok());
  EXPECT_FALSE(s->put_api_token(json{{"tokenId", "t4"}}).is_ok());
  EXPECT_EQ(s->list_api_tokens()->size(), 2u);
}

TEST_P(StoreTest, AuditLogListsTheNewestMatchingEntriesFirstAndKeepsThemAcrossAReopen) {
  auto entry = [](const std::string& token_id, const std::string& name, const std::string& workload,
                  const std::string& path) {
    return json{{"tokenId", token_id}, {"tokenName", name}, {"workload", workload}, {"path", path}};
  };
  {
    auto s = open();
    ASSERT_TRUE(s->append_audit(100.0, entry("t1", "alice", "w1", "/a")).is_ok());
    ASSERT_TRUE(s->append_audit(200.5, entry("t2", "bob", "w2", "/b")).is_ok());
    ASSERT_TRUE(s->append_audit(300.0, entry("t1", "alice", "", "/c")).is_ok());
  }
  auto s = open();  // durable across a reopen
  auto paths = [&](const AuditQuery& q) {
    std::vector<std::string> out;
    auto rows = s->list_audit(q);
    EXPECT_TRUE(rows.is_ok()) << rows.status().describe();
    if (rows.is_ok()) {
      for (const json& r : *rows) out.push_back(r.value("path", std::string()));
    }
    return out;
  };
  auto query = [](double since, const std::string& token, const std::string& workload, int64_t limit) {
    AuditQuery q;
    q.since = since;
    q.token = token;
    q.workload = workload;
    q.limit = limit;
    return q;
  };
  EXPECT_EQ(paths(query(0, "", "", 100)), (std::vector<std::string>{"/c", "/b", "/a"}));
  EXPECT_EQ(paths(query(200.5, "", "", 100)), (std::vector<std::string>{"/c", "/b"}));
  EXPECT_EQ(paths(query(0, "t1", "", 100)), (std::vector<std::string>{"/c", "/a"}));
  EXPECT_EQ(paths(query(0, "bob", "", 100)), (std::vector<std::string>{"/b"}));  // by name too
  EXPECT_EQ(paths(query(0, "", "w1", 100)), (std::vector<std::string>{"/a"}));
  EXPECT_EQ(paths(query(0, "", "", 2)), (std::vector<std::string>{"/c", "/b"}));
  EXPECT_TRUE(paths(query(0, "nobody", "", 100)).empty());
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

TEST_P(StoreTest, SnapshotsWithAReservedKindAreListedOldestFirst) {
  auto s = open();
  auto snap = [](const std::string& id, const json& kinds) {
    return json{
        {"snapshotId", id}, {"runId", "r1"}, {"savedStep", 1}, {"state", "reserved"}, {"kinds", kinds}};
  };
  ASSERT_TRUE(s->insert_snapshot(snap("s2", {{"adapter", {{"state", "reserved"}}}})).is_ok());
  ASSERT_TRUE(s->insert_snapshot(snap("s1", {{"adapter", {{"state", "committed"}}}})).is_ok());
  ASSERT_TRUE(s->insert_snapshot(
                   snap("s0", {{"adapter", {{"state", "committed"}}}, {"training", {{"state", "reserved"}}}}))
                  .is_ok());
  auto found = s->snapshots_with_reserved_kinds(10);
  ASSERT_TRUE(found.is_ok()) << found.status().to_string();
  ASSERT_EQ(found->size(), 2u);
  EXPECT_EQ((*found)[0]["snapshotId"], "s2");
  EXPECT_EQ((*found)[1]["snapshotId"], "s0");
  EXPECT_EQ(s->snapshots_with_reserved_kinds(1)->size(), 1u);
}

TEST_P(StoreTest, JobReportsAreStoredOncePerSeqAndReadBackInOrder) {
  auto s = open();
  auto first = s->register_job_attempt({"RUN-1", "run", "run1", "secret"});
  ASSERT_TRUE(first.is_ok());
  auto again = s->register_job_attempt({"RUN-1", "run", "run1", "other"});
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->token, "secret") << "an attempt registered before keeps its token";
  EXPECT_FALSE(s->get_job_attempt("RUN-2")->has_value());
  EXPECT_EQ(*s->put_job_events("RUN-1", {{1, "a"}, {2, "b"}}), 2);
  EXPECT_EQ(*s->put_job_events("RUN-1", {{2, "changed"}, {3, "c"}}), 1);
  auto events = s->job_events("RUN-1", 1, 10);
  ASSERT_TRUE(events.is_ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].text, "b");
  EXPECT_EQ((*events)[1].seq, 3);
  EXPECT_EQ(*s->put_job_log_lines("RUN-1", {{1, "l1"}, {2, "l2"}, {3, "l3"}}), 3);
  auto tail = s->job_log_tail("RUN-1", 2);
  ASSERT_EQ(tail->size(), 2u);
  EXPECT_EQ((*tail)[0].text, "l2");
  EXPECT_EQ((*tail)[1].text, "l3");
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

// ---- SQLite only

TEST(SqliteStore, RunsInWalMode) {
  SqliteDatabase db;
  auto s = db.open();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.path().c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(raw);
  EXPECT_EQ((*s)->description(), "SQLite " + db.path());
}

// ---- PostgreSQL only

class PostgresStore : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!db_.ready()) GTEST_FAIL() << "the test's database could not be made";
  }
  // The server's address as the store names it, "PostgreSQL at 127.0.0.1:PORT/DATABASE".
  std::string server_name() const {
    const std::string& url = db_.url();
    const size_t at = url.find('@') + 1;
    return "PostgreSQL at " + url.substr(at);
  }
  // Ends every other session on the test's database (as a server restart or a network cut would)
  // and waits until they are gone.
  void cut_connections() {
    db_.exec(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()");
    for (int i = 0; i < 200; ++i) {
      if (db_.number("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND pid <> pg_backend_pid()") == 0) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "the store's session did not end";
  }
  // The store's sessions on the test's database (its pool's connections; listeners' too).
  int64_t sessions() {
    return db_.number(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'trainerd'");
  }

  PostgresDatabase db_;
};

TEST_F(PostgresStore, NamesItsServerWithoutThePassword) {
  auto s = db_.open();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ((*s)->description(), server_name());
}

TEST_F(PostgresStore, AConnectionEndedByTheServerIsReplacedAndTheNextCallSucceeds) {
  auto s = db_.open();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_TRUE((*s)->insert_run(queued_run("aa")).is_ok());
  cut_connections();
  auto again = (*s)->get_run("aa");
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE(again->has_value());
}

TEST_F(PostgresStore, ATransactionThatLosesItsConnectionFailsWholeAndTheStoreGoesOn) {
  auto s = db_.open();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  Store& store = **s;
  Status st = store.transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(store.insert_run(queued_run("aa")));
    cut_connections();
    return store.insert_run(queued_run("bb"));
  });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  EXPECT_NE(st.message().find("lost the connection to " + server_name()), std::string::npos) << st.message();
  auto aa = store.get_run("aa");
  ASSERT_TRUE(aa.is_ok()) << aa.status().to_string();
  EXPECT_FALSE(aa->has_value()) << "nothing of the lost transaction was committed";
  EXPECT_TRUE(store.insert_run(queued_run("cc")).is_ok());
}

TEST_F(PostgresStore, AStalledReplicasTransactionIsEndedByTheServerAndAnotherTakesTheLeaseOver) {
  // Two replicas with short session limits: A locks a task's row in a transaction and stalls there
  // (as a SIGSTOPped trainerd would); B's writes to the row wait at most lock_timeout and fail with
  // unavailable until the server ends A's idle transaction, then B takes the lease over.
  PostgresSessionLimits limits;
  limits.idle_in_transaction_ms = 500;
  limits.lock_timeout_ms = 100;
  auto a = open_postgres_store(db_.url(), limits);
  auto b = open_postgres_store(db_.url(), limits);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  ASSERT_TRUE((*a)->insert_task(task("t1", "P1")).is_ok());
  auto lease = (*a)->acquire_task_lease("toy", "t1", "replica-a", 100, 10);
  ASSERT_TRUE(lease.is_ok() && lease->has_value());

  std::latch locked(1);
  std::latch taken_over(1);
  Status stalled;
  std::thread replica_a([&] {
    stalled = (*a)->transaction([&]() -> Status {
      TRAINER_RETURN_IF_ERROR((*a)->check_task_lease("toy", "t1", "replica-a", 1));
      locked.count_down();
      taken_over.wait();  // stalled, holding the row's lock, until B has the lease
      return (*a)->update_task(task("t1", "P2"), 1);
    });
  });
  locked.wait();
  int refused = 0;
  Result<std::optional<TaskLease>> b_lease = std::optional<TaskLease>();
  for (int i = 0; i < 600; ++i) {  // a guard against a hang; each try waits at most lock_timeout
    b_lease = (*b)->acquire_task_lease("toy", "t1", "replica-b", 200, 10);
    if (b_lease.is_ok()) break;
    EXPECT_EQ(b_lease.status().code(), StatusCode::kUnavailable) << b_lease.status().to_string();
    ++refused;
  }
  taken_over.count_down();
  replica_a.join();
  ASSERT_TRUE(b_lease.is_ok()) << b_lease.status().to_string();
  ASSERT_TRUE(b_lease->has_value()) << "A's lease ran out: B takes it";
  EXPECT_EQ((*b_lease)->fence, 2);
  EXPECT_FALSE(stalled.is_ok()) << "the stalled transaction never commits";
  auto task = (*b)->get_task("toy", "t1");
  ASSERT_TRUE(task.is_ok() && task->has_value());
  EXPECT_EQ((*task)->phase, "P1") << "nothing of the stalled transaction was committed";
  EXPECT_EQ((*task)->owner, "replica-b");
  std::printf("B's lease was refused %d times (lock_timeout) before the server ended A's transaction\n", refused);
}

TEST_F(PostgresStore, TheAdmissionLockMakesASecondAdmissionWaitAndThenSeeTheFirstsGrants) {
  auto a = db_.open();
  auto b = db_.open();
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ((*a)->lock_admission().code(), StatusCode::kFailedPrecondition) << "only inside a transaction";
  std::latch a_holds(1);
  std::vector<ClaimRow> b_saw;
  Status b_done;
  std::thread replica_b;
  Status a_done = (*a)->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR((*a)->lock_admission());
    replica_b = std::thread([&] {
      a_holds.wait();
      b_done = (*b)->transaction([&]() -> Status {
        TRAINER_RETURN_IF_ERROR((*b)->lock_admission());
        TRAINER_ASSIGN_OR_RETURN(b_saw, (*b)->list_claims());
        return Status::ok();
      });
    });
    a_holds.count_down();
    // B is waiting for the lock (the server says so) before A grants and commits.
    const std::string waiting =
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    for (int i = 0; i < 2000 && db_.number(waiting) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(db_.number(waiting), 1);
    ClaimRow c{"run-a", "SFT", "w1", "p", 1, "GRANTED", "2026-01-01T00:00:00Z", 0, {}};
    return (*a)->insert_claim(c);
  });
  replica_b.join();
  ASSERT_TRUE(a_done.is_ok()) << a_done.to_string();
  ASSERT_TRUE(b_done.is_ok()) << b_done.to_string();
  ASSERT_EQ(b_saw.size(), 1u) << "B read the claims after A's grant committed";
  EXPECT_EQ(b_saw[0].owner, "run-a");
}

TEST_F(PostgresStore, AChangeIsHeardByTheOtherReplicasListenersAtCommitAndNotByItsOwn) {
  auto a = db_.open();
  auto b = db_.open();
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  auto a_hears = (*a)->listen_for_changes("replica-a");
  auto b_hears = (*b)->listen_for_changes("replica-b");
  ASSERT_TRUE(a_hears.is_ok() && *a_hears) << a_hears.status().to_string();
  ASSERT_TRUE(b_hears.is_ok() && *b_hears) << b_hears.status().to_string();
  const auto bound = std::chrono::seconds(30);  // a guard against a hang; a notice ends the wait
  const auto none = std::chrono::milliseconds(300);

  // A rolled-back transaction's notice is never delivered; a committed one's is, to B only.
  Status rolled_back = (*a)->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR((*a)->announce_change("replica-a"));
    return failed_precondition("changed its mind");
  });
  EXPECT_FALSE(rolled_back.is_ok());
  auto nothing = (*b_hears)->wait(none);
  ASSERT_TRUE(nothing.is_ok()) << nothing.status().to_string();
  EXPECT_FALSE(*nothing) << "a rolled-back change is not announced";
  ASSERT_TRUE((*a)->transaction([&] { return (*a)->announce_change("replica-a"); }).is_ok());
  auto heard = (*b_hears)->wait(bound);
  ASSERT_TRUE(heard.is_ok()) << heard.status().to_string();
  EXPECT_TRUE(*heard);
  auto own = (*a_hears)->wait(none);
  ASSERT_TRUE(own.is_ok()) << own.status().to_string();
  EXPECT_FALSE(*own) << "a replica's listener ignores its own notices";

  // A listener whose connection was cut answers unavailable, then listens again and says a notice
  // may have been missed.
  cut_connections();
  Result<bool> after_cut = false;
  for (int i = 0; i < 100 && after_cut.is_ok() && !*after_cut; ++i) after_cut = (*b_hears)->wait(none);
  EXPECT_EQ(after_cut.status().code(), StatusCode::kUnavailable) << after_cut.status().to_string();
  auto again = (*b_hears)->wait(none);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE(*again) << "listening again, it may have missed one";
  // A's own connection was cut too: its pool connects again when the call leases it.
  ASSERT_TRUE((*a)->announce_change("replica-a").is_ok());
  auto later = (*b_hears)->wait(bound);
  ASSERT_TRUE(later.is_ok()) << later.status().to_string();
  EXPECT_TRUE(*later);
}

// ---- PostgreSQL only: the pool of connections (store/postgres_pool.h)

TEST_F(PostgresStore, ReadersAreAnsweredWhileAWriteTransactionIsOpenAndSeeItsWritesOnlyOnceCommitted) {
  // The writer's transaction stays open until every reader has read through it: readers queued
  // behind the writer's connection would never get there (the guard below ends the test).
  auto s = db_.open();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  Store& store = **s;
  ASSERT_TRUE(store.insert_run(queued_run("aa")).is_ok());
  constexpr int kReaders = 6;
  constexpr int kReads = 40;
  std::latch written(1);
  std::latch all_read(kReaders);
  std::atomic<int> failed{0};
  std::atomic<int> saw_uncommitted{0};
  Status writer_done;
  std::thread writer([&] {
    writer_done = store.transaction([&]() -> Status {
      TRAINER_RETURN_IF_ERROR(store.insert_run(queued_run("bb")));
      json aa = queued_run("aa");
      aa["phase"] = "RUNNING";
      TRAINER_RETURN_IF_ERROR(store.update_run(aa));
      written.count_down();
      // A guard against a hang (readers blocked behind this transaction), not a timing.
      if (!all_read_within(all_read, std::chrono::seconds(60))) return internal_error("the readers never finished");
      return Status::ok();
    });
  });
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      written.wait();
      for (int k = 0; k < kReads; ++k) {
        auto aa = store.get_run("aa");
        auto bb = store.get_run("bb");
        auto page = store.list_run_rows(RunFilter{});
        if (!aa.is_ok() || !bb.is_ok() || !page.is_ok() || !aa->has_value()) {
          ++failed;
          continue;
        }
        if ((**aa)["phase"] != "QUEUED" || bb->has_value() || page->total != 1) ++saw_uncommitted;
      }
      all_read.count_down();
    });
  }
  for (auto& r : readers) r.join();
  writer.join();
  ASSERT_TRUE(writer_done.is_ok()) << writer_done.to_string();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(saw_uncommitted.load(), 0) << "a reader saw the open transaction's writes";
  auto aa = store.get_run("aa");
  auto bb = store.get_run("bb");
  ASSERT_TRUE(aa.is_ok() && aa->has_value() && bb.is_ok());
  EXPECT_EQ((**aa)["phase"], "RUNNING") << "committed: every reader now sees it";
  EXPECT_TRUE(bb->has_value());
  EXPECT_GE(sessions(), 2) << "the readers were answered on connections of their own";
}

TEST_F(PostgresStore, OfTwoTransactionsWritingOneTaskTheSecondWaitsAndIsRefusedByNameThenItsRetryHolds) {
  // Both on one store (two threads of one trainerd): A locks the task's row (check_task_lease) and
  // moves it; B read the same version and writes under it. B's write waits for A's commit, then
  // finds the version moved: refused by name, B's transaction rolled back whole. B's retry, on what
  // A committed, succeeds.
  auto s = db_.open();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  Store& store = **s;
  ASSERT_TRUE(store.insert_task(task("t1", "P1")).is_ok());
  auto lease = store.acquire_task_lease("toy", "t1", "replica-a", 100, 60);
  ASSERT_TRUE(lease.is_ok() && lease->has_value());
  auto before = store.get_task("toy", "t1");
  ASSERT_TRUE(before.is_ok() && before->has_value());
  const int64_t version = (*before)->version;

  std::latch a_locked(1);
  std::latch b_waits(1);
  Status a_done;
  std::thread a([&] {
    a_done = store.transaction([&]() -> Status {
      TRAINER_RETURN_IF_ERROR(store.check_task_lease("toy", "t1", "replica-a", (*lease)->fence));
      a_locked.count_down();
      b_waits.wait();
      TaskRow moved = **before;
      moved.phase = "P2";
      return store.update_task(moved, (*lease)->fence);
    });
  });
  a_locked.wait();
  std::thread b_thread;
  Status b_done;
  b_thread = std::thread([&] {
    b_done = store.transaction([&]() -> Status {
      TRAINER_ASSIGN_OR_RETURN(int64_t seq, store.append_run_event("aa", {{"type", "b"}}));
      (void)seq;
      TaskRow mine = **before;
      mine.phase = "P3";
      return store.update_task_if_version(mine, version);
    });
  });
  // B is waiting for A's row lock (the server says so) before A writes and commits.
  const std::string waiting =
      "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
  for (int i = 0; i < 2000 && db_.number(waiting) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GE(db_.number(waiting), 1);
  b_waits.count_down();
  a.join();
  b_thread.join();
  ASSERT_TRUE(a_done.is_ok()) << a_done.to_string();
  EXPECT_EQ(b_done.code(), StatusCode::kFailedPrecondition) << b_done.to_string();
  EXPECT_NE(b_done.message().find("is stale"), std::string::npos) << b_done.message();
  auto events = store.run_events("aa", 0, 10);
  ASSERT_TRUE(events.is_ok());
  EXPECT_TRUE(events->empty()) << "nothing of the refused transaction was committed";
  auto after_a = store.get_task("toy", "t1");
  ASSERT_TRUE(after_a.is_ok() && after_a->has_value());
  EXPECT_EQ((*after_a)->phase, "P2");

  // The retry reads what A committed and writes under its version.
  Status retried = store.transaction([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(std::optional<TaskRow> now, store.get_task("toy", "t1"));
    if (!now) return not_found("t1");
    TaskRow mine = *now;
    mine.phase = "P3";
    return store.update_task_if_version(mine, now->version);
  });
  ASSERT_TRUE(retried.is_ok()) << retried.to_string();
  auto last = store.get_task("toy", "t1");
  ASSERT_TRUE(last.is_ok() && last->has_value());
  EXPECT_EQ((*last)->phase, "P3");
  EXPECT_EQ((*last)->version, version + 2) << "A's write and the retry's, nothing else";
}

TEST_F(PostgresStore, AdmissionsOfOneStoresThreadsAtOnceNeverGrantMoreThanThePoolHolds) {
  // Eight threads of one trainerd admit at once, each granting only while fewer than 3 claims are
  // granted: the admission lock, not a lock of this process, makes each see the others' grants.
  auto s = db_.open();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  Store& store = **s;
  constexpr int kThreads = 8;
  constexpr int kDevices = 3;
  std::latch go(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      go.arrive_and_wait();
      for (int k = 0; k < 4; ++k) {
        Status st = store.transaction([&]() -> Status {
          TRAINER_RETURN_IF_ERROR(store.lock_admission());
          TRAINER_ASSIGN_OR_RETURN(std::vector<ClaimRow> claims, store.list_claims());
          if (static_cast<int>(claims.size()) >= kDevices) return Status::ok();
          ClaimRow c{"run-" + std::to_string(t) + "-" + std::to_string(k), "SFT", "w1", "p", 1, "GRANTED",
                     "2026-01-01T00:00:00Z", 0, {}};
          return store.insert_claim(c);
        });
        if (!st.is_ok()) {
          ++errors;
          ADD_FAILURE() << st.to_string();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  auto claims = store.list_claims();
  ASSERT_TRUE(claims.is_ok()) << claims.status().to_string();
  EXPECT_EQ(claims->size(), static_cast<size_t>(kDevices)) << "never over-granted";
}

TEST_F(PostgresStore, ConnectionsEndedByTheServerAreEachReplacedWhenNextLeased) {
  // Three threads hold a connection each (open transactions), so the pool has three; the server
  // ends them all; every later call, from several threads at once, is answered.
  auto s = db_.open();
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  Store& store = **s;
  ASSERT_TRUE(store.insert_run(queued_run("aa")).is_ok());
  {
    std::latch holding(3);
    std::latch release(1);
    std::vector<std::thread> holders;
    for (int i = 0; i < 3; ++i) {
      holders.emplace_back([&] {
        Status st = store.transaction([&]() -> Status {
          TRAINER_ASSIGN_OR_RETURN(auto r, store.get_run("aa"));
          (void)r;
          holding.count_down();
          release.wait();
          return Status::ok();
        });
        EXPECT_TRUE(st.is_ok()) << st.to_string();
      });
    }
    holding.wait();
    EXPECT_GE(sessions(), 3);
    release.count_down();
    for (auto& h : holders) h.join();
  }
  cut_connections();
  EXPECT_EQ(sessions(), 0);
  std::atomic<int> failed{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&] {
      for (int k = 0; k < 10; ++k) {
        auto r = store.get_run("aa");
        if (!r.is_ok() || !r->has_value()) {
          ++failed;
          ADD_FAILURE() << (r.is_ok() ? "no run aa" : r.status().to_string());
        }
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(failed.load(), 0) << "a lost connection is replaced, never handed on";
  EXPECT_GE(sessions(), 1);
  ASSERT_TRUE(store.insert_run(queued_run("bb")).is_ok());
}

TEST_F(PostgresStore, ACallThatFindsEveryConnectionInUseWaitsThenFailsNamingThePoolSize) {
  // A pool of one, held by a transaction: a read waits for it, at most the statement timeout, then
  // is refused naming store.poolSize; once the transaction ends, the read is answered.
  PostgresSessionLimits limits;
  limits.statement_timeout_ms = 300;
  auto s = open_postgres_store(db_.url(), limits, 1);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  Store& store = **s;
  ASSERT_TRUE(store.insert_run(queued_run("aa")).is_ok());
  std::latch holding(1);
  std::latch release(1);
  std::thread holder([&] {
    Status st = store.transaction([&]() -> Status {
      holding.count_down();
      release.wait();
      return Status::ok();
    });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
  });
  holding.wait();
  auto busy = store.get_run("aa");
  release.count_down();
  holder.join();
  ASSERT_FALSE(busy.is_ok());
  EXPECT_EQ(busy.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(busy.status().message().find("all 1 connections to " + server_name() + " (store.poolSize)"),
            std::string::npos)
      << busy.status().message();
  auto free = store.get_run("aa");
  ASSERT_TRUE(free.is_ok()) << free.status().to_string();
  EXPECT_TRUE(free->has_value());
  EXPECT_EQ(sessions(), 1) << "never more connections than the pool's size";
}

TEST(PostgresStoreOpen, APoolSizeOutOfRangeIsRefusedNamingTheField) {
  for (int size : {0, -1, kMaxPostgresPoolSize + 1}) {
    auto s = open_postgres_store("postgresql://pg@127.0.0.1:1/nothing", {}, size);
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("store.poolSize: " + std::to_string(size) + " connections; must be between 1 and 64"),
              std::string::npos)
        << s.status().message();
  }
}

TEST(PostgresStoreOpen, AServerThatDoesNotAnswerIsUnavailableAndNamed) {
  auto s = open_postgres_store("postgresql://pg:secret@127.0.0.1:1/nothing");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("cannot connect to PostgreSQL at 127.0.0.1:1/nothing"),
            std::string::npos)
      << s.status().message();
  EXPECT_EQ(s.status().message().find("secret"), std::string::npos) << "the password is never repeated";
}

TEST(PostgresStoreOpen, AUrlThatDoesNotParseIsRefused) {
  auto s = open_postgres_store("not a url");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("not a PostgreSQL connection URL"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace trainer::store

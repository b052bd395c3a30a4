// The test databases of the suites that run on both stores: the store's own (store_test.cpp, the
// specification both stores meet, and postgres_store_test.cpp, what holds for one implementation
// only) and the service's suites that build a task kernel or a service on a store
// (tests/unit/service: parametrised by Kind, instantiated as Sqlite/... and Postgres/...; CMake's
// trainer_gtest(... ON_STORES) gives the Postgres ones the session's server). One empty database
// of each implementation, and raw SQL behind the store's back. Each test file has its own copy (an
// anonymous namespace).
#pragma once

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
#include <memory>
#include <ostream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "store/store.h"

namespace trainer::store {
namespace {


namespace fs = std::filesystem;

enum class Kind { kSqlite, kPostgres };

// How gtest (and so ctest's test names) shows a parameter.
inline void PrintTo(Kind kind, std::ostream* os) {
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

inline std::string test_name() {
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
inline std::string server_url() {
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
inline bool all_read_within(std::latch& latch, std::chrono::seconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!latch.try_wait()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

inline json queued_run(const std::string& id) {
  return {{"runId", id},
          {"workload", {{"id", "w1"}, {"name", "n"}}},
          {"phase", "QUEUED"},
          {"submissionId", nullptr}};
}

// A task row of the kind "toy".
inline TaskRow task(const std::string& id, const std::string& phase = "A", double due = 0) {
  TaskRow r;
  r.kind = "toy";
  r.id = id;
  r.phase = phase;
  r.due_at = due;
  return r;
}

inline std::unique_ptr<TestDatabase> make_database(Kind kind) {
  if (kind == Kind::kSqlite) return std::make_unique<SqliteDatabase>();
  return std::make_unique<PostgresDatabase>();
}


// A fresh database of the parameter's implementation for each test.
class StoreFixture : public ::testing::TestWithParam<Kind> {
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

inline std::string kind_name(const ::testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kSqlite ? "sqlite" : "postgres";
}
}  // namespace
}  // namespace trainer::store

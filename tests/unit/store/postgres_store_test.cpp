// What holds for one implementation of the Store only: SQLite's journal mode; PostgreSQL's
// server names, lost connections, stalled replicas, the admission lock across connections,
// change notification, the pool of connections under concurrent readers and writers, and its
// opening errors. The specification both meet is store_test.cpp.
#include "store/store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>
#include <vector>

#include "store_databases.h"

namespace trainer::store {
namespace {

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
    // B is waiting for the lock (the server says so) before A grants and commits: for the change
    // counter's row, which lock_admission() locks before its advisory lock (the lock order).
    const std::string waiting =
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
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

TEST_F(PostgresStore, AWakeDoesNotWaitForATaskRowAnotherTransactionHoldsAndSaysSo) {
  // A step on replica A holds its task's row (check_task_lease: FOR UPDATE) while replica B's
  // admission, under the admission lock, wakes that task: B must not wait for the row (A's step may
  // be waiting for the admission lock B holds). B is told the wake was not written; once A
  // committed, B's retry writes it.
  auto a = db_.open();
  auto b = db_.open();
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  ASSERT_TRUE((*a)->insert_task(task("t1", "WAITING", 500)).is_ok());
  auto lease = (*a)->acquire_task_lease("toy", "t1", "replica-a", 100, 60);
  ASSERT_TRUE(lease.is_ok() && lease->has_value());
  std::latch locked(1);
  std::latch woken(1);
  Status stepped;
  std::thread replica_a([&] {
    stepped = (*a)->transaction([&]() -> Status {
      TRAINER_RETURN_IF_ERROR((*a)->check_task_lease("toy", "t1", "replica-a", (*lease)->fence));
      locked.count_down();
      woken.wait();
      return (*a)->update_task(task("t1", "WAITING", 530), (*lease)->fence);
    });
  });
  locked.wait();
  Result<bool> first = false;
  Status admission = (*b)->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR((*b)->lock_admission());
    first = (*b)->wake_task("toy", "t1");
    return first.status();
  });
  woken.count_down();
  replica_a.join();
  ASSERT_TRUE(admission.is_ok()) << admission.to_string();
  ASSERT_TRUE(stepped.is_ok()) << stepped.to_string();
  EXPECT_FALSE(*first) << "the row was locked: not written, and said so";
  EXPECT_DOUBLE_EQ((*(*b)->get_task("toy", "t1"))->due_at, 530);
  auto again = (*b)->wake_task("toy", "t1");
  ASSERT_TRUE(again.is_ok() && *again);
  EXPECT_DOUBLE_EQ((*(*b)->get_task("toy", "t1"))->due_at, 0);
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

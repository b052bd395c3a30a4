// Writers of runs and claims on two replicas of one service at once, against PostgreSQL (the
// session's server: store_databases.h): each replica's driver steps the runs it leases while
// requests through both replicas submit, annotate and cancel the same runs, so their transactions
// meet on the same task, run and claim rows, the change counter and the admission lock. The lock
// order of docs/durability.md ("Lock order") holds: no call fails, none with a deadlock (SQLSTATE
// 40P01), the server counts no deadlock, and every run ends with no claim left.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../store/store_databases.h"
#include "scripted_backend.h"
#include "service/service.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kRuns = 40;            // submitted before the requests start
constexpr int kLateRuns = 8;         // submitted while they run
constexpr int kRequestThreads = 6;   // each annotates every run, then cancels every run, in its own order

template <typename F>
bool wait_for(F f) {
  for (int i = 0; i < 3000; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class ConcurrentWriters : public ::testing::TestWithParam<store::Kind> {
 protected:
  void SetUp() override {
    db_ = store::make_database(GetParam());
    ASSERT_TRUE(db_->ready()) << "the test's database could not be made";
    dir_ = fs::temp_directory_path() / ("concurrent-writers-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    std::ofstream(dir_ / "model" / "config.json") << R"({"architectures": ["Qwen3ForCausalLM"]})";
  }
  void TearDown() override {
    for (auto& r : replicas_) {
      if (r) r->stop();
    }
    replicas_.clear();  // their connections close before the database is dropped
    fs::remove_all(dir_);
  }

  // A replica named `name` on the test's database and the shared data folder and jobs.
  Service* start_replica(const std::string& name) {
    ServiceOptions o;
    o.data_dir = (dir_ / "data").string();
    o.config.base_models = {{"tiny", (dir_ / "model").string()}};
    o.config.pools = {{"cpu", "cpu", false, /*declared=*/4, /*max_claim=*/1, {}, {}}};
    o.config.default_workload_quota = 8;
    o.instance = name;
    o.replica = name;
    o.tick = std::chrono::milliseconds(5);
    auto store = db_->open();
    EXPECT_TRUE(store.is_ok()) << store.status().to_string();
    if (!store.is_ok()) return nullptr;
    auto s = make_service(std::move(o), std::move(*store), std::make_unique<ScriptedBackend>(jobs_));
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s.is_ok()) return nullptr;
    Status started = (*s)->start();
    EXPECT_TRUE(started.is_ok()) << started.to_string();
    replicas_.push_back(std::move(*s));
    return replicas_.back().get();
  }

  static json plan() {
    return {{"kind", "run"}, {"workload", "w"}, {"baseModel", "tiny"}, {"config", {{"dataset", "d"}}},
            {"execution", {{"gpus", 0}}}};
  }

  std::unique_ptr<store::TestDatabase> db_;
  fs::path dir_;
  std::shared_ptr<ScriptedBackend::Jobs> jobs_ = std::make_shared<ScriptedBackend::Jobs>();
  std::vector<std::unique_ptr<Service>> replicas_;
};

INSTANTIATE_TEST_SUITE_P(Postgres, ConcurrentWriters, ::testing::Values(store::Kind::kPostgres), store::kind_name);

TEST_P(ConcurrentWriters, DriverStepsAndRequestsOnTheSameRunsAndClaimsNeverDeadlockAndAllEnd) {
  Service* a = start_replica("replica-a");
  Service* b = start_replica("replica-b");
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ASSERT_TRUE(a->select_base_model("tiny").is_ok());
  ASSERT_TRUE(wait_for([&] { return (*a->get_base_model("tiny"))["status"] == "ready"; }));
  ASSERT_TRUE(a->create_workload({{"name", "w"}}).is_ok());
  ASSERT_TRUE(
      a->register_dataset("d", R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})",
                          std::nullopt)
          .is_ok());
  Service* replicas[] = {a, b};

  std::mutex mu;
  std::vector<std::string> ids;     // guarded by mu
  std::vector<std::string> failed;  // guarded by mu: every call that failed other than as expected
  auto submit = [&](Service* svc) {
    auto r = svc->submit_run(plan(), false);
    std::lock_guard<std::mutex> lock(mu);
    if (!r.is_ok()) {
      failed.push_back("submit: " + r.status().to_string());
      return;
    }
    ids.push_back(r->first["runId"]);
  };
  for (int i = 0; i < kRuns; ++i) submit(replicas[i % 2]);
  ASSERT_EQ(ids.size(), static_cast<size_t>(kRuns)) << ::testing::PrintToString(failed);

  // A cancel of a run that ended, or is finalising, is refused by name; nothing else may fail.
  auto expected = [](const Status& st) {
    return st.code() == StatusCode::kFailedPrecondition && st.message().find("deadlock") == std::string::npos &&
           (st.message().find("already ended") != std::string::npos ||
            st.message().find("can no longer be cancelled") != std::string::npos);
  };
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kRequestThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::string> mine;
      {
        std::lock_guard<std::mutex> lock(mu);
        mine = ids;
      }
      std::mt19937 order(static_cast<unsigned>(t + 1));
      std::shuffle(mine.begin(), mine.end(), order);
      Service* svc = replicas[t % 2];
      for (const std::string& id : mine) {
        auto r = svc->annotate_run(id, {{"description", "thread " + std::to_string(t)}});
        ++calls;
        if (!r.is_ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failed.push_back("annotate " + id + ": " + r.status().to_string());
        }
      }
      std::shuffle(mine.begin(), mine.end(), order);
      for (const std::string& id : mine) {
        auto r = svc->cancel_run(id);
        ++calls;
        if (!r.is_ok() && !expected(r.status())) {
          std::lock_guard<std::mutex> lock(mu);
          failed.push_back("cancel " + id + ": " + r.status().to_string());
        }
      }
    });
  }
  std::thread late([&] {
    for (int i = 0; i < kLateRuns; ++i) submit(replicas[i % 2]);
  });
  for (auto& th : threads) th.join();
  late.join();
  EXPECT_TRUE(failed.empty()) << ::testing::PrintToString(failed);
  EXPECT_EQ(calls.load(), kRequestThreads * kRuns * 2);

  // The late runs are cancelled too; then every run ends and gives its claim back.
  for (size_t i = kRuns; i < ids.size(); ++i) {
    auto r = a->cancel_run(ids[i]);
    EXPECT_TRUE(r.is_ok() || expected(r.status())) << r.status().to_string();
  }
  for (const std::string& id : ids) {
    EXPECT_TRUE(wait_for([&] { return (*b->get_run(id))["phase"] == "CANCELLED"; })) << id << " "
                                                                                     << (*b->get_run(id))["phase"];
  }
  EXPECT_TRUE(wait_for([&] { return (*a->capacity(""))["claims"].empty(); }));

  // The server's own count, once every connection of the replicas has ended (a backend's counts
  // are flushed before it leaves pg_stat_activity).
  for (auto& r : replicas_) r->stop();
  replicas_.clear();
  ASSERT_TRUE(wait_for([&] {
    return db_->number("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                       "pid <> pg_backend_pid()") == 0;
  }));
  EXPECT_EQ(db_->number("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"), 0);
}

}  // namespace
}  // namespace trainer::service

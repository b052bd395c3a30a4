// Admission of claims against declared capacity and quotas, through the Service with a real store
// (SQLite and PostgreSQL, the session's server: store_databases.h) and a scripted backend (jobs
// that run until the test ends them).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "../common/test_folder.h"
#include "../store/store_databases.h"
#include "scripted_backend.h"
#include "service/service.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class AdmissionTest : public ::testing::TestWithParam<store::Kind> {
 protected:
  void SetUp() override {
    dir_ = trainer::testing::test_folder("admission");
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    std::ofstream(dir_ / "model" / "config.json") << R"({"architectures": ["Qwen3ForCausalLM"]})";
    db_ = store::make_database(GetParam());
    if (!db_->ready()) GTEST_FAIL() << "the test's database could not be made";
  }
  void TearDown() override {
    if (svc_) svc_->stop();
    svc_.reset();  // its store's connections close before the database is dropped
    fs::remove_all(dir_);
  }

  void start(int declared, int quota, std::vector<CapacityWindow> windows = {}, int max_claim = 1) {
    ServiceOptions o;
    o.data_dir = (dir_ / "data").string();
    o.config.base_models = {{"tiny", (dir_ / "model").string()}};
    o.config.pools = {{"cpu", "cpu", false, declared, max_claim, {}, std::move(windows)}};
    o.clock = clock_;
    o.config.default_workload_quota = quota;
    o.instance = "test";
    o.tick = std::chrono::milliseconds(10);
    auto store = db_->open();
    ASSERT_TRUE(store.is_ok()) << store.status().to_string();
    auto backend = std::make_unique<ScriptedBackend>();
    backend_ = backend.get();
    auto s = make_service(std::move(o), std::move(*store), std::move(backend));
    ASSERT_TRUE(s.is_ok());
    svc_ = std::move(*s);
    ASSERT_TRUE(svc_->start().is_ok());
    ASSERT_TRUE(svc_->select_base_model("tiny").is_ok());
    ASSERT_TRUE(wait_for([&] { return (*svc_->get_base_model("tiny"))["status"] == "ready"; }));
    ASSERT_TRUE(svc_->create_workload({{"name", "w"}}).is_ok());
    ASSERT_TRUE(svc_->register_dataset(
                        "d", R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})",
                        std::nullopt)
                    .is_ok());
  }

  std::string submit(int gpus = 0) {
    auto r = svc_->submit_run({{"kind", "run"}, {"workload", "w"}, {"baseModel", "tiny"},
                               {"config", {{"dataset", "d"}}}, {"execution", {{"gpus", gpus}}}},
                              false);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r->first["runId"];
  }

  std::string phase(const std::string& id) { return (*svc_->get_run(id))["phase"]; }

  template <typename F>
  static bool wait_for(F f) {
    for (int i = 0; i < 500; ++i) {
      if (f()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  static constexpr double kStart = 1769882400;  // 2026-01-31T18:00:00Z
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>(kStart);
  fs::path dir_;
  std::unique_ptr<store::TestDatabase> db_;  // dropped after svc_ (TearDown stops it first)
  std::unique_ptr<Service> svc_;
  ScriptedBackend* backend_ = nullptr;  // owned by svc_
};

INSTANTIATE_TEST_SUITE_P(Sqlite, AdmissionTest, ::testing::Values(store::Kind::kSqlite), store::kind_name);
INSTANTIATE_TEST_SUITE_P(Postgres, AdmissionTest, ::testing::Values(store::Kind::kPostgres), store::kind_name);

TEST_P(AdmissionTest, TheSecondRunWaitsForTheOnlyDeviceAndIsAdmittedWhenItFrees) {
  start(/*declared=*/1, /*quota=*/8);
  std::string a = submit(), b = submit();
  ASSERT_TRUE(wait_for([&] { return phase(a) == "QUEUED" && phase(b) == "WAITING_FOR_DEVICES"; }));
  EXPECT_EQ(backend_->started(), 1);
  auto cap = *svc_->capacity("");
  EXPECT_EQ(cap["pools"][0]["granted"], 1);
  EXPECT_EQ(cap["pools"][0]["queued"], 1);
  ASSERT_TRUE(svc_->cancel_run(a).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(a) == "CANCELLED" && phase(b) == "QUEUED"; }));
  EXPECT_EQ(backend_->started(), 2);
  ASSERT_TRUE(svc_->cancel_run(b).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(b) == "CANCELLED"; }));
  EXPECT_TRUE((*svc_->capacity(""))["claims"].empty());
}

TEST_P(AdmissionTest, AWorkloadAtItsQuotaWaitsWhileDevicesAreFree) {
  start(/*declared=*/3, /*quota=*/1);
  std::string a = submit(), b = submit();
  ASSERT_TRUE(wait_for([&] { return phase(a) == "QUEUED" && phase(b) == "WAITING_FOR_DEVICES"; }));
  auto cap = *svc_->capacity("");
  EXPECT_EQ(cap["pools"][0]["granted"], 1);
  EXPECT_EQ(cap["quotas"][0], json({{"workload", "w"}, {"quota", 1}, {"held", 1}, {"queued", 1}}));
  ASSERT_TRUE(svc_->cancel_run(b).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(b) == "CANCELLED"; }));
  ASSERT_TRUE(svc_->cancel_run(a).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(a) == "CANCELLED"; }));
}

TEST_P(AdmissionTest, ARunLargerThanEveryPoolIsRefusedAndNothingIsStored) {
  start(/*declared=*/1, /*quota=*/8);
  auto r = svc_->submit_run({{"kind", "run"}, {"workload", "w"}, {"baseModel", "tiny"},
                             {"config", {{"dataset", "d"}}}, {"execution", {{"gpus", 2}}}},
                            false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().field(), "execution.gpus");
  EXPECT_EQ(r.status().describe(),
            "execution.gpus: no CPU training pool can ever hold a claim of 2 devices (pools: cpu (maxClaim 1, "
            "declared 1)); ask for fewer devices");
  EXPECT_EQ((*svc_->list_runs({}))["total"], 0);
}

TEST_P(AdmissionTest, AClaimLargerThanThePoolWaitsForItsWindowAndKeepsItsDevicesAfterTheWindowEnds) {
  // One slot always, one more from 18:10 to 18:20 UTC; a claim of two fits only while it is open.
  start(/*declared=*/1, /*quota=*/8, {{1, kStart + 600, kStart + 1200, {1}}}, /*max_claim=*/2);
  const std::string a = submit(/*gpus=*/2);
  ASSERT_TRUE(wait_for([&] { return phase(a) == "WAITING_FOR_DEVICES"; }));
  auto before = *svc_->capacity("");
  EXPECT_EQ(before["pools"][0]["declared"], 1);
  EXPECT_EQ(before["claims"][0]["state"], "QUEUED");

  clock_->advance(std::chrono::seconds(600));  // the window opens
  ASSERT_TRUE(wait_for([&] { return phase(a) == "QUEUED"; }));  // granted; its job was started
  auto open = *svc_->capacity("");
  EXPECT_EQ(open["pools"][0]["declared"], 2);
  EXPECT_EQ(open["pools"][0]["granted"], 2);
  EXPECT_EQ(open["pools"][0]["free"], 0);
  EXPECT_EQ(open["claims"][0]["deviceIds"], json::array({0, 1}));
  EXPECT_TRUE(open["warnings"].empty());

  clock_->advance(std::chrono::seconds(600));  // the window ends while the claim holds its device
  auto ended = *svc_->capacity("");
  EXPECT_EQ(ended["pools"][0]["declared"], 1);
  EXPECT_EQ(ended["pools"][0]["granted"], 1);
  EXPECT_EQ(ended["pools"][0]["heldBeyondDeclared"], 1);
  ASSERT_EQ(ended["warnings"].size(), 1u);
  EXPECT_EQ(ended["warnings"][0]["owner"], a);
  EXPECT_EQ(ended["warnings"][0]["deviceIds"], json::array({1}));
  EXPECT_EQ(phase(a), "QUEUED");  // not stopped
  EXPECT_EQ(backend_->started(), 1);

  // Device-hours: two devices from 18:10 to now (18:20), still held.
  auto hours = *svc_->device_hours("2026-01-31T18:00:00Z", "2026-01-31T19:00:00Z", "");
  ASSERT_EQ(hours["rows"].size(), 1u);
  EXPECT_EQ(hours["rows"][0]["key"], "cpu");
  EXPECT_EQ(hours["rows"][0]["deviceSeconds"], 1200.0);
  EXPECT_EQ(hours["rows"][0]["held"], true);

  // No window remains: a claim of two can never be held now, and is refused.
  auto r = svc_->submit_run({{"kind", "run"}, {"workload", "w"}, {"baseModel", "tiny"},
                             {"config", {{"dataset", "d"}}}, {"execution", {{"gpus", 2}}}},
                            false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().field(), "execution.gpus");
  EXPECT_EQ(r.status().describe(),
            "execution.gpus: no CPU training pool can ever hold a claim of 2 devices (pools: cpu (maxClaim 2, "
            "declared 1, windows: +1 from 2026-01-31T18:10:00Z to 2026-01-31T18:20:00Z (ended))); no remaining "
            "window adds enough; ask for fewer devices");
  ASSERT_TRUE(svc_->cancel_run(a).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(a) == "CANCELLED"; }));
}

// docs/durability.md, "Replicas": the job carries the fence of the step that started it and asks
// leave to train with it; only the job recorded for the attempt (under that fence) trains.
TEST_P(AdmissionTest, AJobIsLetTrainOnlyUnderTheFenceItsStartWasRecordedWith) {
  start(/*declared=*/1, /*quota=*/8);
  const std::string a = submit();
  ASSERT_TRUE(wait_for([&] { return phase(a) == "QUEUED"; }));
  ASSERT_EQ(backend_->specs().size(), 1u);
  const backend::JobSpec spec = backend_->specs()[0];
  EXPECT_EQ(spec.job_id, a + "-1");
  if (GetParam() == store::Kind::kSqlite) {
    EXPECT_EQ(spec.launch_fence, 0) << "one trainerd alone on its store: no fence, the job trains without asking";
    ASSERT_TRUE(svc_->cancel_run(a).is_ok());
    ASSERT_TRUE(wait_for([&] { return phase(a) == "CANCELLED"; }));
    return;
  }
  ASSERT_GE(spec.launch_fence, 1) << "the step's lease fence travels with the job";
  auto leave = svc_->confirm_job_start(spec.job_id, {{"launchFence", spec.launch_fence}});
  ASSERT_TRUE(leave.is_ok()) << leave.status().to_string();
  EXPECT_EQ(*leave, json({{"train", true}}));
  auto stale = svc_->confirm_job_start(spec.job_id, {{"launchFence", spec.launch_fence + 1}});
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(stale.status().field(), "launchFence");
  EXPECT_NE(stale.status().message().find("lost run " + a + "'s lease"), std::string::npos) << stale.status().message();
  auto bad = svc_->confirm_job_start(spec.job_id, {{"launchFence", "seven"}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().field(), "launchFence");
  ASSERT_TRUE(svc_->cancel_run(a).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(a) == "CANCELLED"; }));
}

TEST_P(AdmissionTest, DeviceHoursRefuseABadRangeByName) {
  start(/*declared=*/1, /*quota=*/8);
  auto bad = [&](const char* from, const char* to, const char* by) { return svc_->device_hours(from, to, by).status(); };
  EXPECT_EQ(bad("yesterday", "", "").describe(),
            "from: 'yesterday' is not an ISO 8601 UTC time; write YYYY-MM-DDTHH:MM:SSZ (or an offset such as +02:00)");
  EXPECT_EQ(bad("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z", "").describe(),
            "from: 2026-01-02T00:00:00Z is not before to 2026-01-01T00:00:00Z; the range must be forwards");
  EXPECT_EQ(bad("2025-01-01T00:00:00Z", "2026-01-03T00:00:00Z", "").describe(),
            "from: the range 2025-01-01T00:00:00Z to 2026-01-03T00:00:00Z is 367 days long; at most 366 days");
  EXPECT_EQ(bad("", "", "owner").describe(), "by: 'owner' is not a grouping; use pool, endpoint or workload");
  auto fine = svc_->device_hours("", "", "");
  ASSERT_TRUE(fine.is_ok());
  EXPECT_EQ((*fine)["from"], "2026-01-30T18:00:00Z");  // the last 24 hours of the service's clock
  EXPECT_EQ((*fine)["to"], "2026-01-31T18:00:00Z");
  EXPECT_EQ((*fine)["by"], "pool");
}

}  // namespace
}  // namespace trainer::service

// Admission of claims against declared capacity and quotas, through the Service with a real
// SQLite store and a scripted backend (jobs that run until the test ends them).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "service/service.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Jobs "run" until finish() writes their outcome into the events file and marks them exited.
class ScriptedBackend final : public backend::Backend {
 public:
  std::string name() const override { return "scripted"; }
  std::string describe(const backend::JobHandle& h) const override { return "job " + h.value; }
  Result<backend::JobHandle> start(const backend::JobSpec& spec) override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t pid = next_pid_++;
    specs_[pid] = spec;
    return backend::JobHandle{std::to_string(pid)};
  }
  backend::JobStatus poll(const backend::JobHandle& h) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t pid = std::stoll(h.value);
    if (exited_.count(pid)) return {backend::JobState::kExited, exited_[pid]};
    return {backend::JobState::kRunning, std::nullopt};
  }
  void request_stop(const backend::JobHandle& h) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t pid = std::stoll(h.value);
    std::ofstream(specs_[pid].events_path, std::ios::app) << R"({"type":"cancelled"})" << "\n";
    exited_[pid] = 143;
  }
  void kill(const backend::JobHandle& h) override { request_stop(h); }
  std::optional<backend::JobHandle> find(const backend::JobSpec&) override { return std::nullopt; }
  Result<std::string> run_tool(const std::vector<std::string>&, int) override { return unavailable("none"); }
  std::map<std::string, int> observed_devices() override { return {{"cpu", 1}}; }
  std::string observed_source() const override { return "scripted"; }

  int started() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(specs_.size());
  }

 private:
  std::mutex mu_;
  int64_t next_pid_ = 1000;
  std::map<int64_t, backend::JobSpec> specs_;
  std::map<int64_t, int> exited_;
};

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("admission-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    std::ofstream(dir_ / "model" / "config.json") << R"({"architectures": ["Qwen3ForCausalLM"]})";
  }
  void TearDown() override {
    if (svc_) svc_->stop();
    fs::remove_all(dir_);
  }

  void start(int declared, int quota) {
    ServiceOptions o;
    o.data_dir = (dir_ / "data").string();
    o.config.base_models = {{"tiny", (dir_ / "model").string()}};
    o.config.pools = {{"cpu", "cpu", false, declared, 1}};
    o.config.default_workload_quota = quota;
    o.instance = "test";
    o.tick = std::chrono::milliseconds(10);
    auto store = store::open_sqlite_store((dir_ / "state.db").string());
    ASSERT_TRUE(store.is_ok());
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
                        "d", R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})")
                    .is_ok());
  }

  std::string submit() {
    auto r = svc_->submit_run({{"kind", "run"}, {"workload", "w"}, {"baseModel", "tiny"},
                               {"config", {{"dataset", "d"}}}, {"execution", {{"gpus", 0}}}},
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

  fs::path dir_;
  std::unique_ptr<Service> svc_;
  ScriptedBackend* backend_ = nullptr;  // owned by svc_
};

TEST_F(AdmissionTest, TheSecondRunWaitsForTheOnlyDeviceAndIsAdmittedWhenItFrees) {
  start(/*declared=*/1, /*quota=*/8);
  std::string a = submit(), b = submit();
  ASSERT_TRUE(wait_for([&] { return phase(a) == "QUEUED" && phase(b) == "WAITING_FOR_DEVICES"; }));
  EXPECT_EQ(backend_->started(), 1);
  auto cap = *svc_->capacity();
  EXPECT_EQ(cap["pools"][0]["granted"], 1);
  EXPECT_EQ(cap["pools"][0]["queued"], 1);
  ASSERT_TRUE(svc_->cancel_run(a).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(a) == "CANCELLED" && phase(b) == "QUEUED"; }));
  EXPECT_EQ(backend_->started(), 2);
  ASSERT_TRUE(svc_->cancel_run(b).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(b) == "CANCELLED"; }));
  EXPECT_TRUE((*svc_->capacity())["claims"].empty());
}

TEST_F(AdmissionTest, AWorkloadAtItsQuotaWaitsWhileDevicesAreFree) {
  start(/*declared=*/3, /*quota=*/1);
  std::string a = submit(), b = submit();
  ASSERT_TRUE(wait_for([&] { return phase(a) == "QUEUED" && phase(b) == "WAITING_FOR_DEVICES"; }));
  auto cap = *svc_->capacity();
  EXPECT_EQ(cap["pools"][0]["granted"], 1);
  EXPECT_EQ(cap["quotas"][0], json({{"workload", "w"}, {"quota", 1}, {"held", 1}, {"queued", 1}}));
  ASSERT_TRUE(svc_->cancel_run(b).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(b) == "CANCELLED"; }));
  ASSERT_TRUE(svc_->cancel_run(a).is_ok());
  ASSERT_TRUE(wait_for([&] { return phase(a) == "CANCELLED"; }));
}

TEST_F(AdmissionTest, ARunLargerThanEveryPoolIsRefusedAndNothingIsStored) {
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

}  // namespace
}  // namespace trainer::service

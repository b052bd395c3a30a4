// Time through the injected clock: the cancel grace period runs on a ManualClock, so the test
// moves time instead of sleeping through it. On both stores (SQLite and the session's PostgreSQL:
// store_databases.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "../store/store_databases.h"
#include "service/service.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Jobs that ignore a stop request and end only when killed.
class StubbornBackend final : public backend::Backend {
 public:
  std::string name() const override { return "stubborn"; }
  std::string describe(const backend::JobHandle& h) const override { return "job " + h.value; }
  Result<backend::JobHandle> start(const backend::JobSpec& spec) override {
    std::lock_guard<std::mutex> lock(mu_);
    specs_[spec.run_id] = spec;
    return backend::JobHandle{spec.run_id};
  }
  backend::JobStatus poll(const backend::JobHandle& h) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (killed_.count(h.value)) return {backend::JobState::kExited, 128 + 9};
    return {backend::JobState::kRunning, std::nullopt};
  }
  void request_stop(const backend::JobHandle&) override { ++stops; }
  void kill(const backend::JobHandle& h) override {
    std::lock_guard<std::mutex> lock(mu_);
    killed_[h.value] = true;
    ++kills;
  }
  std::optional<backend::JobHandle> find(const backend::JobSpec&) override { return std::nullopt; }
  Result<std::string> run_tool(const std::vector<std::string>&, int) override { return unavailable("none"); }
  Result<std::vector<backend::NodeScan>> scan_nodes(const std::vector<std::string>&, int) override {
    return unavailable("none");
  }
  std::map<std::string, int> observed_devices() override { return {{"cpu", 1}}; }
  std::string observed_source() const override { return "stubborn"; }
  backend::JobSpec spec_of(const std::string& run) {
    std::lock_guard<std::mutex> lock(mu_);
    return specs_[run];
  }

  std::atomic<int> stops{0};
  std::atomic<int> kills{0};

 private:
  std::mutex mu_;
  std::map<std::string, backend::JobSpec> specs_;
  std::map<std::string, bool> killed_;
};

template <typename F>
bool wait_for(F f) {
  for (int i = 0; i < 1000; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class ServiceClock : public ::testing::TestWithParam<store::Kind> {};

INSTANTIATE_TEST_SUITE_P(Sqlite, ServiceClock, ::testing::Values(store::Kind::kSqlite), store::kind_name);
INSTANTIATE_TEST_SUITE_P(Postgres, ServiceClock, ::testing::Values(store::Kind::kPostgres), store::kind_name);

TEST_P(ServiceClock, CancelGraceRunsOnTheInjectedClockThenTheJobIsKilled) {
  auto db = store::make_database(GetParam());
  ASSERT_TRUE(db->ready()) << "the test's database could not be made";
  fs::path dir = fs::temp_directory_path() / ("service-clock-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "model");
  std::ofstream(dir / "model" / "config.json") << R"({"architectures": ["Qwen3ForCausalLM"]})";
  auto clock = std::make_shared<ManualClock>(1'800'000'000.0);
  ServiceOptions o;
  o.data_dir = (dir / "data").string();
  o.config = default_config();  // one CPU pool of one device
  o.config.base_models = {{"tiny", (dir / "model").string()}};
  o.config.limits.cancel_grace_seconds = 10;
  o.instance = "test";
  o.tick = std::chrono::milliseconds(5);
  o.clock = clock;
  o.job_otlp_endpoint = "http://127.0.0.1:1/otlp";
  auto store = db->open();
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  auto owned = std::make_unique<StubbornBackend>();
  StubbornBackend* backend = owned.get();
  auto made = make_service(std::move(o), std::move(*store), std::move(owned));
  ASSERT_TRUE(made.is_ok());
  Service& svc = **made;
  ASSERT_TRUE(svc.start().is_ok());
  ASSERT_TRUE(svc.select_base_model("tiny").is_ok());
  ASSERT_TRUE(wait_for([&] { return (*svc.get_base_model("tiny"))["status"] == "ready"; }));
  ASSERT_TRUE(svc.create_workload({{"name", "w"}}).is_ok());
  ASSERT_TRUE(
      svc.register_dataset("d", R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})",
                           std::nullopt)
          .is_ok());
  auto run = svc.submit_run({{"kind", "run"}, {"workload", "w"}, {"baseModel", "tiny"},
                             {"config", {{"dataset", "d"}}}, {"execution", {{"gpus", 0}}}},
                            false);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const std::string id = run->first["runId"];
  auto phase = [&] { return (*svc.get_run(id))["phase"].get<std::string>(); };
  ASSERT_TRUE(wait_for([&] { return phase() == "QUEUED"; }));
  // Timestamps come from the clock.
  EXPECT_EQ((*svc.get_run(id))["createdAt"], "2027-01-15T08:00:00.000Z");
  // The job was given its identity.
  backend::JobSpec spec = backend->spec_of(id);
  EXPECT_EQ(spec.identity.workload, "w");
  EXPECT_EQ(spec.identity.base_model, "tiny");
  EXPECT_EQ(spec.identity.profile, "cpu");
  EXPECT_EQ(spec.otlp_endpoint, "http://127.0.0.1:1/otlp");
  EXPECT_FALSE(spec.identity.base_model_sha.empty());

  ASSERT_TRUE(svc.cancel_run(id).is_ok());
  EXPECT_EQ(phase(), "CLEANING_UP");
  EXPECT_EQ(backend->stops.load(), 1);
  // However long the driver runs, the grace period has not passed on the service's clock.
  clock->advance(std::chrono::seconds(9));
  for (int i = 0; i < 20; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(backend->kills.load(), 0);
  EXPECT_EQ(phase(), "CLEANING_UP");
  clock->advance(std::chrono::seconds(2));
  ASSERT_TRUE(wait_for([&] { return phase() == "CANCELLED"; }));
  EXPECT_GE(backend->kills.load(), 1);
  // The cost is the clock's time the job held its device: 11 s.
  EXPECT_DOUBLE_EQ((*svc.get_run(id))["cost"]["gpuSeconds"].get<double>(), 11.0);
  svc.stop();
  made->reset();  // its store's connections close before the database is dropped
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trainer::service

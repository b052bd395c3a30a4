// The local backend: a job is a child process in its own session, found again by pid and start
// time, stopped with SIGTERM then SIGKILL. The "job" here is a shell script speaking nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "backend/backend.h"

namespace trainer::backend {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The local backend's handle is JSON text {"pid", "startTime"}: opaque to the service, read here.
int64_t pid_of(const JobHandle& h) { return json::parse(h.value).at("pid").get<int64_t>(); }
int64_t start_time_of(const JobHandle& h) { return json::parse(h.value).at("startTime").get<int64_t>(); }

class LocalBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("local-backend-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A job binary: a script that ignores its arguments and runs `body`.
  std::unique_ptr<Backend> backend_running(const std::string& body) {
    fs::path script = dir_ / "job.sh";
    std::ofstream(script) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(script, fs::perms::owner_all);
    return make_local_backend({script.string()});
  }

  JobSpec spec() const {
    JobSpec s;
    s.run_id = "r1";
    s.plan_path = (dir_ / "plan.json").string();
    s.output_dir = (dir_ / "out").string();
    s.events_path = (dir_ / "events.jsonl").string();
    s.log_path = (dir_ / "job.log").string();
    return s;
  }

  static JobStatus wait_end(Backend& b, const JobHandle& h) {
    for (int i = 0; i < 500; ++i) {
      JobStatus s = b.poll(h);
      if (s.state != JobState::kRunning) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return b.poll(h);
  }

  fs::path dir_;
};

TEST_F(LocalBackendTest, ReportsTheExitCodeAndTheJobsOutputGoesToItsLog) {
  auto b = backend_running("echo \"args: $*\"; exit 3");
  auto h = b->start(spec());
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_GT(start_time_of(*h), 0);
  EXPECT_EQ(b->describe(*h), "pid " + std::to_string(pid_of(*h)));
  JobStatus s = wait_end(*b, *h);
  EXPECT_EQ(s.state, JobState::kExited);
  EXPECT_EQ(s.exit_code, 3);
  EXPECT_EQ(b->poll(*h).exit_code, 3);  // asked again, the same answer
  std::ifstream log(spec().log_path);
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line, "args: run --plan " + spec().plan_path + " --output " + spec().output_dir + " --events " +
                      spec().events_path);
}

TEST_F(LocalBackendTest, AStopRequestIsSigtermAndKillIsSigkill) {
  auto b = backend_running("trap 'exit 143' TERM; while true; do sleep 0.05; done");
  auto h = b->start(spec());
  ASSERT_TRUE(h.is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(b->poll(*h).state, JobState::kRunning);
  b->request_stop(*h);
  EXPECT_EQ(wait_end(*b, *h).exit_code, 143);

  auto stubborn = backend_running("trap '' TERM; while true; do sleep 0.05; done");
  auto h2 = stubborn->start(spec());
  ASSERT_TRUE(h2.is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stubborn->request_stop(*h2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(stubborn->poll(*h2).state, JobState::kRunning);
  stubborn->kill(*h2);
  EXPECT_EQ(wait_end(*stubborn, *h2).exit_code, 128 + 9);
}

TEST_F(LocalBackendTest, AnotherBackendFindsTheJobByItsEventsPathAndPidStartTime) {
  auto b = backend_running("trap 'exit 143' TERM; while true; do sleep 0.05; done");
  auto h = b->start(spec());
  ASSERT_TRUE(h.is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // A restarted service has a new backend: the job is not its child, yet it is found running.
  auto restarted = backend_running("exit 0");
  auto found = restarted->find(spec());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(pid_of(*found), pid_of(*h));
  EXPECT_EQ(start_time_of(*found), start_time_of(*h));
  EXPECT_EQ(restarted->poll(*h).state, JobState::kRunning);
  // A recycled pid (same pid, other start time) is not the job.
  JobHandle recycled{json{{"pid", pid_of(*h)}, {"startTime", start_time_of(*h) + 1}}.dump()};
  EXPECT_EQ(restarted->poll(recycled).state, JobState::kGone);
  // A handle this backend did not write names no process.
  EXPECT_EQ(restarted->poll(JobHandle{"not a handle"}).state, JobState::kGone);
  b->request_stop(*h);
  wait_end(*b, *h);
  EXPECT_EQ(restarted->poll(*h).state, JobState::kGone);
  EXPECT_FALSE(restarted->find(spec()).has_value());
}

TEST_F(LocalBackendTest, TheJobSeesItsRunIdentityInItsEnvironment) {
  auto b = backend_running(
      "env | grep -E '^TRAINER_(RUN_ID|ATTEMPT|WORKLOAD|METHOD|BASE_MODEL|BASE_MODEL_SHA|PROFILE|OTLP_ENDPOINT|"
      "OTLP_INTERVAL_MS)=' | sort");
  JobSpec s = spec();
  s.attempt = 2;
  s.identity.workload = "sentiment";
  s.identity.method = "sft";
  s.identity.base_model = "Qwen/Qwen3-0.6B";
  s.identity.base_model_sha = "ab12";
  s.identity.profile = "cpu";
  s.otlp_endpoint = "http://127.0.0.1:9001/otlp";
  s.otlp_interval_ms = 1000;
  auto h = b->start(s);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(wait_end(*b, *h).exit_code, 0);
  std::ifstream log(s.log_path);
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text,
            "TRAINER_ATTEMPT=2\n"
            "TRAINER_BASE_MODEL=Qwen/Qwen3-0.6B\n"
            "TRAINER_BASE_MODEL_SHA=ab12\n"
            "TRAINER_METHOD=sft\n"
            "TRAINER_OTLP_ENDPOINT=http://127.0.0.1:9001/otlp\n"
            "TRAINER_OTLP_INTERVAL_MS=1000\n"
            "TRAINER_PROFILE=cpu\n"
            "TRAINER_RUN_ID=r1\n"
            "TRAINER_WORKLOAD=sentiment\n");
}

TEST(JobEnvironment, WithoutAnEndpointNoOtlpVariableIsSet) {
  JobSpec s;
  s.run_id = "r1";
  auto env = job_environment(s);
  for (const auto& [k, v] : env) EXPECT_TRUE(k == "TRAINER_RUN_ID" || k == "TRAINER_ATTEMPT") << k;
  EXPECT_EQ(env.size(), 2u);
}

TEST(MakeBackend, ChoosesTheNamedBackendAndRefusesAnUnknownOneByName) {
  ComputeConfig c;
  c.job_binary = "/bin/true";
  for (const char* name : {"local", "slurm"}) {
    c.backend = name;
    auto b = make_backend(c);
    ASSERT_TRUE(b.is_ok()) << name;
    EXPECT_EQ((*b)->name(), name);
  }
  c.backend = "ray";
  auto ray = make_backend(c);
  ASSERT_FALSE(ray.is_ok());  // a Ray backend needs the cluster's address
  EXPECT_EQ(ray.status().field(), "compute.ray.address");
  c.ray.address = "http://127.0.0.1:1";
  ray = make_backend(c);
  ASSERT_TRUE(ray.is_ok());
  EXPECT_EQ((*ray)->name(), "ray");
  c.backend = "pbs";
  auto pbs = make_backend(c);
  ASSERT_FALSE(pbs.is_ok());
  EXPECT_EQ(pbs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pbs.status().field(), "compute.backend");
  EXPECT_EQ(pbs.status().message(), "'pbs' is not a compute backend of this build; use local, slurm or ray");
}

TEST_F(LocalBackendTest, TheJobSeesExactlyTheDevicesItWasGranted) {
  auto b = backend_running("echo \"cuda=[$CUDA_VISIBLE_DEVICES] set=${CUDA_VISIBLE_DEVICES+yes}\"");
  JobSpec s = spec();
  s.gpus = 2;
  s.device_ids = {3, 1};
  auto h = b->start(s);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_EQ(wait_end(*b, *h).exit_code, 0);
  s.gpus = 0;  // a CPU run: no GPU at all (the variable set, and empty)
  s.device_ids = {0};
  h = b->start(s);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(wait_end(*b, *h).exit_code, 0);
  std::ifstream log(spec().log_path);
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "cuda=[3,1] set=yes\ncuda=[] set=yes\n");
}

TEST_F(LocalBackendTest, AClusterBackendReportsAJobItCannotReachAsRunning) {
  // No Slurm controller and no Ray dashboard answer: the state is unknown, so the job is not
  // declared ended (a controller restart must not fail every run).
  ComputeConfig c;
  c.job_binary = "/bin/true";
  c.backend = "ray";
  c.ray.address = "http://127.0.0.1:1";
  c.ray.request_timeout_s = 1;
  auto ray = make_backend(c);
  ASSERT_TRUE(ray.is_ok());
  JobHandle handle{R"({"raySubmissionId": "trainer-r1-1", "log": ""})"};
  EXPECT_EQ((*ray)->poll(handle).state, JobState::kRunning);
  EXPECT_EQ((*ray)->describe(handle), "Ray job trainer-r1-1");
  // A handle no backend wrote is gone, not a crash.
  EXPECT_EQ((*ray)->poll(JobHandle{"not json"}).state, JobState::kGone);
}

TEST_F(LocalBackendTest, AMissingJobBinaryIsANamedError) {
  auto b = make_local_backend({(dir_ / "nope").string()});
  auto h = b->start(spec());
  ASSERT_FALSE(h.is_ok());
  EXPECT_EQ(h.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(h.status().message().find("nope is not executable"), std::string::npos);
}

TEST_F(LocalBackendTest, ObservesOneCpuDeviceAndTheDriversGpus) {
  auto devices = make_local_backend({"x"})->observed_devices();
  EXPECT_EQ(devices.at("cpu"), 1);
  int gpus = 0;
  std::error_code ec;
  if (fs::is_directory("/proc/driver/nvidia/gpus", ec)) {
    for (auto it = fs::directory_iterator("/proc/driver/nvidia/gpus"); it != fs::directory_iterator(); ++it) ++gpus;
  }
  int reported = 0;
  for (const auto& [profile, n] : devices) {
    if (profile != "cpu") reported += n;
  }
  EXPECT_EQ(reported, gpus);
}

TEST_F(LocalBackendTest, RunToolReturnsStdoutOrTheErrorItPrinted) {
  auto ok = backend_running("echo '{\"rows\": 2}'");
  auto out = ok->run_tool({"analyze"}, 10);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(*out, "{\"rows\": 2}\n");
  auto bad = backend_running("echo 'no tokenizer.json in /m' >&2; exit 1");
  auto err = bad->run_tool({"analyze"}, 10);
  ASSERT_FALSE(err.is_ok());
  EXPECT_EQ(err.status().message(), "trainer-job analyze failed: no tokenizer.json in /m");
}

TEST_F(LocalBackendTest, RunToolPastItsTimeoutIsKilledAndUnavailable) {
  auto slow = backend_running("sleep 30");
  const auto started = std::chrono::steady_clock::now();
  auto r = slow->run_tool({"analyze"}, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "trainer-job analyze: " + (dir_ / "job.sh").string() + " ran past 1s");
}

}  // namespace
}  // namespace trainer::backend

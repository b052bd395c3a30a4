// The local backend: a job is a child process in its own session, found again by pid and start
// time, stopped with SIGTERM then SIGKILL. The "job" here is a shell script speaking nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "backend/backend.h"

namespace trainer::backend {
namespace {

namespace fs = std::filesystem;

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
  EXPECT_GT(h->start_time, 0);
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
  EXPECT_EQ(found->pid, h->pid);
  EXPECT_EQ(found->start_time, h->start_time);
  EXPECT_EQ(restarted->poll(*h).state, JobState::kRunning);
  // A recycled pid (same pid, other start time) is not the job.
  EXPECT_EQ(restarted->poll({h->pid, h->start_time + 1}).state, JobState::kGone);
  b->request_stop(*h);
  wait_end(*b, *h);
  EXPECT_EQ(restarted->poll(*h).state, JobState::kGone);
  EXPECT_FALSE(restarted->find(spec()).has_value());
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

}  // namespace
}  // namespace trainer::backend

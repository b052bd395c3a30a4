// A backend of the service's suites whose jobs "run" until the test (or a cancel) ends them: no
// process is started. Shared by admission_test.cpp and concurrent_writers_test.cpp.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace trainer::service {
namespace {

// Jobs "run" until a stop writes their outcome into the events file and marks them exited. Two
// backends made on one Jobs (two replicas of one service) see each other's jobs, as replicas on
// one cluster do.
class ScriptedBackend final : public backend::Backend {
 public:
  struct Jobs {
    std::mutex mu;
    int64_t next_pid = 1000;                          // guarded by mu
    std::map<int64_t, backend::JobSpec> specs;       // guarded by mu
    std::map<int64_t, int> exited;                   // guarded by mu
  };
  explicit ScriptedBackend(std::shared_ptr<Jobs> jobs = std::make_shared<Jobs>()) : jobs_(std::move(jobs)) {}

  std::string name() const override { return "scripted"; }
  std::string describe(const backend::JobHandle& h) const override { return "job " + h.value; }
  Result<backend::JobHandle> start(const backend::JobSpec& spec) override {
    std::lock_guard<std::mutex> lock(jobs_->mu);
    int64_t pid = jobs_->next_pid++;
    jobs_->specs[pid] = spec;
    return backend::JobHandle{std::to_string(pid)};
  }
  backend::JobStatus poll(const backend::JobHandle& h) override {
    std::lock_guard<std::mutex> lock(jobs_->mu);
    const int64_t pid = std::stoll(h.value);
    if (jobs_->exited.count(pid)) return {backend::JobState::kExited, jobs_->exited[pid]};
    return {backend::JobState::kRunning, std::nullopt};
  }
  void request_stop(const backend::JobHandle& h) override {
    std::lock_guard<std::mutex> lock(jobs_->mu);
    const int64_t pid = std::stoll(h.value);
    if (jobs_->exited.count(pid)) return;
    std::ofstream(jobs_->specs[pid].events_path, std::ios::app) << R"({"type":"cancelled"})" << "\n";
    jobs_->exited[pid] = 143;
  }
  void kill(const backend::JobHandle& h) override { request_stop(h); }
  std::optional<backend::JobHandle> find(const backend::JobSpec&) override { return std::nullopt; }
  Result<std::string> run_tool(const std::vector<std::string>&, int) override { return unavailable("none"); }
  Result<std::vector<backend::NodeScan>> scan_nodes(const std::vector<std::string>&, int) override {
    return unavailable("none");
  }
  std::map<std::string, int> observed_devices() override { return {{"cpu", 1}}; }
  std::string observed_source() const override { return "scripted"; }

  int started() {
    std::lock_guard<std::mutex> lock(jobs_->mu);
    return static_cast<int>(jobs_->specs.size());
  }
  // The spec of every job started, in the order they were started.
  std::vector<backend::JobSpec> specs() {
    std::lock_guard<std::mutex> lock(jobs_->mu);
    std::vector<backend::JobSpec> out;
    for (const auto& [pid, spec] : jobs_->specs) out.push_back(spec);
    return out;
  }

 private:
  std::shared_ptr<Jobs> jobs_;
};

}  // namespace
}  // namespace trainer::service

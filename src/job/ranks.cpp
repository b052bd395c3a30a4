#include "job/ranks.h"

#include <sys/wait.h>

#include <csignal>
#include <cstring>

#include "common/subprocess.h"
#include "engine/engine.h"
#include "job/stop_signals.h"

namespace trainer::job {
namespace {

using Clock = std::chrono::steady_clock;
// How often the watching thread looks for ended ranks.
constexpr std::chrono::milliseconds kPollInterval{50};

}  // namespace

std::optional<std::string> Ranks::describe_exit(int rank, pid_t pid, int wait_status) {
  const std::string who = "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
  if (WIFEXITED(wait_status)) {
    const int code = WEXITSTATUS(wait_status);
    if (code == 0 || code == kExitCancelled) return std::nullopt;
    return who + " exited with status " + std::to_string(code);
  }
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* abbrev = sigabbrev_np(sig);
    return who + " was killed by signal " + std::to_string(sig) +
           (abbrev != nullptr ? " (SIG" + std::string(abbrev) + ")" : std::string());
  }
  return who + " ended with wait status " + std::to_string(wait_status);
}

Result<std::unique_ptr<Ranks>> Ranks::start(RanksOptions options) {
  std::unique_ptr<Ranks> ranks(new Ranks(std::move(options)));
  const RanksOptions& o = ranks->options_;
  for (int rank = 1; rank < o.world_size; ++rank) {
    SpawnOptions spawn_options;
    spawn_options.argv = {o.executable};
    spawn_options.argv.insert(spawn_options.argv.end(), o.args.begin(), o.args.end());
    // The rank's world replaces any inherited one.
    spawn_options.env = {{engine::dist::kRankVar, std::to_string(rank)},
                         {engine::dist::kWorldSizeVar, std::to_string(o.world_size)},
                         {engine::dist::kMasterAddrVar, o.master_addr},
                         {engine::dist::kMasterPortVar, std::to_string(o.master_port)}};
    spawn_options.env.insert(spawn_options.env.end(), o.env.begin(), o.env.end());
    spawn_options.die_with_parent = true;  // the rank dies with rank 0, even when rank 0 is killed
    Result<pid_t> pid = spawn(spawn_options);
    if (!pid.is_ok()) {
      for (pid_t p : ranks->pids_) ::kill(p, SIGKILL);
      for (pid_t p : ranks->pids_) ::waitpid(p, nullptr, 0);
      ranks->pids_.clear();
      return Status(StatusCode::kUnavailable, "starting rank " + std::to_string(rank) + ": " + pid.status().message());
    }
    ranks->pids_.push_back(*pid);
  }
  ranks->running_.assign(ranks->pids_.size(), true);
  ranks->watcher_ = std::thread([r = ranks.get()] { r->watch(); });
  return ranks;
}

void Ranks::watch() {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<Clock::time_point> failed_at;
  while (true) {
    bool any_running = false;
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (!running_[i]) continue;
      int status = 0;
      const pid_t r = ::waitpid(pids_[i], &status, WNOHANG);
      if (r == 0) {
        any_running = true;
        continue;
      }
      running_[i] = false;
      std::optional<std::string> failed =
          r == pids_[i] ? describe_exit(static_cast<int>(i) + 1, pids_[i], status) : std::nullopt;
      if (failed && !failure_) {
        failure_ = std::move(failed);
        failed_at = Clock::now();
        for (size_t j = 0; j < pids_.size(); ++j) {
          if (running_[j]) ::kill(pids_[j], SIGKILL);
        }
      }
      changed_.notify_all();
    }
    if (!any_running && !all_ended_) {
      all_ended_ = true;
      changed_.notify_all();
    }
    if (closing_ && all_ended_) return;
    if (failed_at && all_ended_ && !closing_ && Clock::now() - *failed_at >= options_.abandon_after) {
      const std::string failure = *failure_;
      lock.unlock();
      if (options_.on_abandon) options_.on_abandon(failure);
      return;
    }
    changed_.wait_for(lock, kPollInterval);
  }
}

void Ranks::signal(int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (running_[i]) ::kill(pids_[i], signal);
  }
}

std::optional<std::string> Ranks::failure(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, grace, [&] { return failure_.has_value() || all_ended_; });
  return failure_;
}

std::optional<std::string> Ranks::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return all_ended_; });
  closing_ = true;
  return failure_;
}

Ranks::~Ranks() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (running_[i]) ::kill(pids_[i], SIGKILL);
    }
    changed_.notify_all();
  }
  if (watcher_.joinable()) watcher_.join();
}

}  // namespace trainer::job

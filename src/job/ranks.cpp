#include "job/ranks.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "engine/dist/world.h"
#include "job/stop_signals.h"

extern char** environ;

namespace trainer::job {
namespace {

using Clock = std::chrono::steady_clock;
// How often the watching thread looks for ended ranks.
constexpr std::chrono::milliseconds kPollInterval{50};

// Owns the strings behind an argv-style array.
struct CStrings {
  std::vector<std::string> strings;
  std::vector<char*> pointers() {
    std::vector<char*> out;
    for (auto& s : strings) out.push_back(s.data());
    out.push_back(nullptr);
    return out;
  }
};

bool is_rank_variable(const std::string& entry) {
  for (const char* name : {engine::dist::kRankVar, engine::dist::kWorldSizeVar, engine::dist::kMasterAddrVar,
                           engine::dist::kMasterPortVar}) {
    const size_t n = std::strlen(name);
    if (entry.compare(0, n, name) == 0 && entry.size() > n && entry[n] == '=') return true;
  }
  return false;
}

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
  const pid_t parent = ::getpid();
  for (int rank = 1; rank < o.world_size; ++rank) {
    // Everything the child needs is built before fork: after it, only exec.
    CStrings argv{{o.executable}};
    argv.strings.insert(argv.strings.end(), o.args.begin(), o.args.end());
    CStrings envp;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!is_rank_variable(*e)) envp.strings.emplace_back(*e);
    }
    envp.strings.push_back(std::string(engine::dist::kRankVar) + "=" + std::to_string(rank));
    envp.strings.push_back(std::string(engine::dist::kWorldSizeVar) + "=" + std::to_string(o.world_size));
    envp.strings.push_back(std::string(engine::dist::kMasterAddrVar) + "=" + o.master_addr);
    envp.strings.push_back(std::string(engine::dist::kMasterPortVar) + "=" + std::to_string(o.master_port));
    for (const auto& [k, v] : o.env) envp.strings.push_back(k + "=" + v);
    std::vector<char*> argv_p = argv.pointers(), envp_p = envp.pointers();
    const pid_t pid = ::fork();
    if (pid < 0) {
      const std::string error = std::strerror(errno);
      for (pid_t p : ranks->pids_) ::kill(p, SIGKILL);
      for (pid_t p : ranks->pids_) ::waitpid(p, nullptr, 0);
      ranks->pids_.clear();
      return Status(StatusCode::kUnavailable, "starting rank " + std::to_string(rank) + ": fork: " + error);
    }
    if (pid == 0) {
      // The rank dies with rank 0, even when rank 0 is killed.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::execve(argv_p[0], argv_p.data(), envp_p.data());
      ::_exit(127);
    }
    ranks->pids_.push_back(pid);
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

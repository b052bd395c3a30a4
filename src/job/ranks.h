// The other ranks of a data-parallel job (docs/data-parallel.md): rank 0 is trainer-job itself;
// ranks 1..N-1 are copies of it, started here with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
// in their environment, and watched. A rank that exits other than 0 (done, paused) or 143
// (cancelled with the others) fails the job: the others are killed (SIGKILL) and the failure
// names the rank. Every rank dies with rank 0 (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace trainer::job {

struct RanksOptions {
  std::string executable;                    // the program each rank runs (this one)
  std::vector<std::string> args;             // its arguments (argv[1...])
  int world_size = 2;                        // ranks in all, rank 0 included
  std::string master_addr;                   // rank 0's rendezvous (MASTER_ADDR, MASTER_PORT)
  int master_port = 0;
  std::map<std::string, std::string> env;    // added to the inherited environment
  // Rank 0 has not finished this long after another rank failed: called with the failure on the
  // watching thread (the job then reports it and exits).
  std::chrono::milliseconds abandon_after{std::chrono::seconds(20)};
  std::function<void(const std::string& failure)> on_abandon;
};

class Ranks {
 public:
  // Starts ranks 1..world_size-1. Unavailable names the rank that could not be started (the ones
  // already started are killed).
  static Result<std::unique_ptr<Ranks>> start(RanksOptions options);
  // Kills (SIGKILL) and reaps the ranks still running.
  ~Ranks();
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  // Sends `signal` to every rank still running. Thread-safe.
  void signal(int signal);
  // The first failure of a rank, waiting up to `grace` for one to be seen: "rank 1 (pid 4242) was
  // killed by signal 9 (SIGKILL)" or "... exited with status 1"; nullopt when none failed.
  std::optional<std::string> failure(std::chrono::milliseconds grace);
  // Waits for every rank to end; their first failure, or nullopt when all ended well.
  std::optional<std::string> wait();

  // How a rank's wait status reads in a failure; nullopt for a rank that ended well (exit 0 or
  // 143). Exposed for tests.
  static std::optional<std::string> describe_exit(int rank, pid_t pid, int wait_status);

 private:
  explicit Ranks(RanksOptions options) : options_(std::move(options)) {}
  void watch();

  // Constant after start().
  RanksOptions options_;
  std::vector<pid_t> pids_;  // rank r is pids_[r - 1]
  std::thread watcher_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<bool> running_;            // guarded by mu_, by rank - 1
  std::optional<std::string> failure_;   // guarded by mu_: the first failure seen
  bool all_ended_ = false;               // guarded by mu_
  bool closing_ = false;                 // guarded by mu_: rank 0 is done waiting
};

}  // namespace trainer::job

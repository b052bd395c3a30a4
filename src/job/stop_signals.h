// SIGTERM, SIGINT and the pause signal of trainer-job, taken on a thread of their own (sigwait)
// rather than in a handler, so that their consequences may do more than set a flag (push the
// metrics, forward the signal to the other ranks).
#pragma once

#include <csignal>
#include <functional>
#include <thread>

namespace trainer::job {

// Exit status of a job stopped by SIGTERM or SIGINT.
inline constexpr int kExitCancelled = 143;
// A pause with --checkpoint save (docs/job-protocol.md, "Signals").
inline constexpr int kPauseSignal = SIGUSR1;

// Blocks SIGTERM, SIGINT and the pause signal in the calling thread, and so in every thread it
// starts later (the exporter's, libtorch's) and in the processes it starts: call it before
// starting any, so that only StopSignals takes them.
void block_stop_signals();

class StopSignals {
 public:
  // Calls `on_signal` with each signal taken, on its own thread. The signals must be blocked
  // already (block_stop_signals).
  explicit StopSignals(std::function<void(int)> on_signal);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  std::function<void(int)> on_signal_;
  sigset_t set_;
  std::thread thread_;
};

}  // namespace trainer::job

#include "job/stop_signals.h"

#include <pthread.h>

namespace trainer::job {
namespace {

// Sent by StopSignals to its own thread to end it.
constexpr int kQuitSignal = SIGUSR2;

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, kPauseSignal);
  sigaddset(&set, kQuitSignal);
  return set;
}

}  // namespace

void block_stop_signals() {
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

StopSignals::StopSignals(std::function<void(int)> on_signal)
    : on_signal_(std::move(on_signal)), set_(stop_signal_set()) {
  thread_ = std::thread([this] {
    while (true) {
      int signal = 0;
      if (sigwait(&set_, &signal) != 0 || signal == kQuitSignal) return;
      on_signal_(signal);
    }
  });
}

StopSignals::~StopSignals() {
  pthread_kill(thread_.native_handle(), kQuitSignal);
  thread_.join();
}

}  // namespace trainer::job

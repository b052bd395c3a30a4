// The job's heartbeat: a thread of its own that writes a `heartbeat` event (with the last step)
// every TRAINER_HEARTBEAT_SECONDS, so trainerd tells a job that is alive between events (a long
// step, a model load, a slow save) from one that hangs or was stopped (SIGSTOP): a job silent past
// limits.jobSilenceSeconds is stopped as hung and its run gets a new attempt.
//
// Thread safety: constructed and destroyed by one thread; the beat goes through EventWriter,
// which is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "job/job_events.h"

namespace trainer::job {

class Heartbeat {
 public:
  // `every` <= 0: no thread, no beat.
  Heartbeat(EventWriter& writer, std::chrono::seconds every);
  ~Heartbeat();  // stops the thread (at once, not after the current wait)
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void loop();

  EventWriter& writer_;
  const std::chrono::seconds every_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace trainer::job

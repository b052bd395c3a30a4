// The clock seam: every part that reads the time, waits for a deadline or measures a duration
// takes a Clock, so tests drive time by hand (ManualClock) instead of sleeping.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

namespace trainer {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time, seconds since the Unix epoch (timestamps shown to users, stored records).
  virtual double now_seconds() const = 0;
  // A monotonic reading, for durations and deadlines; only differences mean anything.
  virtual std::chrono::steady_clock::time_point steady_now() const = 0;
};

// The real clock of the machine.
std::shared_ptr<Clock> system_clock();

// A clock whose wall time is the number of seconds since the epoch written in the file `path`,
// read again at every reading: end-to-end tests drive a whole trainerd's time from outside with
// it (TRAINER_TEST_CLOCK_FILE). Its monotonic reading is the machine's, so waits and timeouts
// still pass. A file that cannot be read or holds no number reads as the last good value (the
// machine's wall time before the first).
std::shared_ptr<Clock> file_clock(std::string path);

// A clock that moves only when told to; both readings advance together.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(double start_seconds = 1'700'000'000.0) : wall_(start_seconds) {}
  double now_seconds() const override;
  std::chrono::steady_clock::time_point steady_now() const override;
  void advance(std::chrono::duration<double> by);

 private:
  mutable std::mutex mu_;
  double wall_;                            // guarded by mu_
  std::chrono::duration<double> moved_{};  // guarded by mu_: how far advance() has moved it
};

}  // namespace trainer

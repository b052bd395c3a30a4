// Saying a recurring error once: a failure that comes back every pass of a loop (a store write
// refused because the data folder's disk is full, at every driver tick) is one log line when it
// starts, a line with its count while it lasts (every `remind_seconds`), and one when it ends,
// instead of a line per pass.
//
// Thread safety: none; its owner calls it from one thread (the driver's) or under its own lock.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace trainer {

class RepeatedErrors {
 public:
  explicit RepeatedErrors(double remind_seconds = 600) : remind_seconds_(remind_seconds) {}

  // `key` ("run 7f3a") failed with `message` at `now` (seconds): the line to log now, or nullopt
  // when this is a repeat to count quietly. A different message for the same key is logged at once,
  // with the count of the one it replaces.
  std::optional<std::string> failed(const std::string& key, const std::string& message, double now);
  // `key` succeeded at `now`: the line saying its failure ended (with its count), or nullopt when
  // it was not failing.
  std::optional<std::string> succeeded(const std::string& key, double now);

 private:
  struct Failing {
    std::string message;
    double since = 0;       // when it first failed so
    double said_at = 0;     // when a line about it was last logged
    long long times = 0;    // failures so far, the first included
    long long unsaid = 0;   // failures since the last line
  };
  const double remind_seconds_;
  std::map<std::string, Failing> failing_;
};

}  // namespace trainer

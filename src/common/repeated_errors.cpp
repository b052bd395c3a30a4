// Recurring errors said once, with a count (declared in common/repeated_errors.h).
#include "common/repeated_errors.h"

namespace trainer {
namespace {

std::string seconds_text(double s) { return std::to_string(static_cast<long long>(s + 0.5)) + " s"; }

}  // namespace

std::optional<std::string> RepeatedErrors::failed(const std::string& key, const std::string& message, double now) {
  auto it = failing_.find(key);
  if (it == failing_.end()) {
    failing_[key] = Failing{message, now, now, 1, 0};
    return key + ": " + message;
  }
  Failing& f = it->second;
  if (f.message != message) {
    std::string line = key + ": " + message + " (the previous error failed it " + std::to_string(f.times) +
                       " times in " + seconds_text(now - f.since) + ")";
    f = Failing{message, now, now, 1, 0};
    return line;
  }
  ++f.times;
  ++f.unsaid;
  if (now - f.said_at < remind_seconds_) return std::nullopt;
  std::string line = key + ": still failing, " + std::to_string(f.times) + " times in " +
                     seconds_text(now - f.since) + " (" + std::to_string(f.unsaid) + " since the last line): " + message;
  f.said_at = now;
  f.unsaid = 0;
  return line;
}

std::optional<std::string> RepeatedErrors::succeeded(const std::string& key, double now) {
  auto it = failing_.find(key);
  if (it == failing_.end()) return std::nullopt;
  std::string line = key + ": recovered after failing " + std::to_string(it->second.times) + " times in " +
                     seconds_text(now - it->second.since) + " (" + it->second.message + ")";
  failing_.erase(it);
  return line;
}

}  // namespace trainer

// How a job that ended without an outcome ended (declared in service/lost_attempts.h).
#include "service/lost_attempts.h"

#include <algorithm>

namespace trainer::service {
namespace {

constexpr int kSignalExitBase = 128;
constexpr double kMaxBackoffSeconds = 600;
constexpr int kBeatsPerSilence = 4;
constexpr int kMaxHeartbeatSeconds = 30;

std::string with_log(const std::string& reason, const std::string& log_tail) {
  return log_tail.empty() ? reason : reason + "\nlast lines of its log:\n" + log_tail;
}

}  // namespace

LostAttempt lost_attempt_of(const backend::JobStatus& status, bool reported_cancelled, const std::string& what,
                            const std::string& where, const std::string& log_tail) {
  LostAttempt lost;
  lost.exit_code = status.exit_code;
  if (reported_cancelled) {
    lost.cause = "stopped";
    lost.reason = what + " stopped on a signal trainerd did not send (it reported cancelled)";
    if (!status.reason.empty()) lost.reason += ": " + status.reason;
  } else if (!status.reason.empty()) {
    // The cluster ended it, or lost it: say so by name.
    lost.cause = "lost";
    lost.reason = with_log(status.reason, log_tail);
  } else if (status.state == backend::JobState::kGone) {
    lost.cause = "lost";
    lost.reason = with_log(what + " (" + where + ") ended while trainerd was not running and reported no outcome",
                           log_tail);
  } else {
    const int code = status.exit_code.value_or(-1);
    lost.cause = code > kSignalExitBase ? "killed" : "crashed";
    lost.reason = with_log(what + " exited with code " + std::to_string(code) + " without reporting an outcome",
                           log_tail);
  }
  return lost;
}

std::string describe_attempt_end(const nlohmann::json& entry) {
  std::string out = entry.value("cause", std::string("?"));
  if (out.empty()) out = "?";
  const nlohmann::json code = entry.value("exitCode", nlohmann::json(nullptr));
  if (code.is_number_integer()) out += ", code " + std::to_string(code.get<int>());
  return out;
}

std::string ended_attempts_summary(const nlohmann::json& attempts, int first) {
  std::string out;
  if (!attempts.is_array()) return out;
  for (const nlohmann::json& a : attempts) {
    if (!a.is_object()) continue;
    const int n = a.value("number", 0);
    if (n < first || !a.contains("ended") || a["ended"].is_null()) continue;
    out += (out.empty() ? "" : "; ") + std::string("attempt ") + std::to_string(n) + ": " + describe_attempt_end(a);
  }
  return out;
}

int heartbeat_seconds_for(int silence_seconds) {
  if (silence_seconds <= 0) return 0;
  return std::clamp(silence_seconds / kBeatsPerSilence, 1, kMaxHeartbeatSeconds);
}

SilenceAction watch_silence(double now, std::optional<double> heard_at, double trainerd_started_at,
                            std::optional<double> hung_at, int silence_seconds, double grace_seconds) {
  if (silence_seconds <= 0 || !heard_at) return SilenceAction::kNone;
  if (!hung_at) {
    const double heard = std::max(*heard_at, trainerd_started_at);
    return now - heard > silence_seconds ? SilenceAction::kStop : SilenceAction::kNone;
  }
  return now - *hung_at > grace_seconds ? SilenceAction::kKill : SilenceAction::kNone;
}

LostAttempt hung_attempt(const std::string& what, int silence_seconds, std::optional<int> exit_code,
                         const std::string& log_tail) {
  LostAttempt lost;
  lost.cause = "hung";
  lost.exit_code = exit_code;
  lost.reason = with_log(what + " sent nothing, not even its heartbeat, for more than limits.jobSilenceSeconds (" +
                             std::to_string(silence_seconds) + " s); trainerd stopped it",
                         log_tail);
  return lost;
}

double attempt_backoff_seconds(double base, int used) {
  double backoff = base;
  for (int i = 1; i < used && backoff < kMaxBackoffSeconds; ++i) backoff *= 2;
  return std::min(backoff, kMaxBackoffSeconds);
}

}  // namespace trainer::service

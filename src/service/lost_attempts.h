// How a job that ended without an outcome ended, the same for every job kind's attempts (a run's
// training job, an evaluation's job): killed (a signal: an out-of-memory kill, a preemption),
// crashed (exited without an outcome), lost (its cluster lost it, or it ended while trainerd was
// down), stopped (a SIGTERM trainerd did not send); a run's job may also be hung (attempts.cpp).
// A lost attempt is retried after a backoff; a job's own verdict (a `failed` event) never is.
// docs/durability.md, "Attempts".
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"

namespace trainer::service {

struct LostAttempt {
  std::string cause;             // killed | crashed | lost | stopped | hung
  std::optional<int> exit_code;  // its exit status (128 + signal for a signal), when known
  std::string reason;            // for a person, with the last lines of its log
};

// The lost attempt of a job that ended as `status` says. `what` names the job for a person ("the
// training job"), `where` is the backend's description of it ("pid 1234"), `log_tail` the last
// lines of its log ("" when none); `reported_cancelled`: the job said it stopped on a signal.
LostAttempt lost_attempt_of(const backend::JobStatus& status, bool reported_cancelled, const std::string& what,
                            const std::string& where, const std::string& log_tail);

// An attempts-list entry's end in a few words: "killed, code 137".
std::string describe_attempt_end(const nlohmann::json& entry);

// The ended attempts numbered `first` or later, for a failure: "attempt 1: killed, code 137; attempt 2: …".
std::string ended_attempts_summary(const nlohmann::json& attempts, int first);

// The wait before the next attempt after `used` attempts: `base` seconds doubled for each lost
// attempt after the first, at most 600 s.
double attempt_backoff_seconds(double base, int used);

}  // namespace trainer::service

// How a job that ended without an outcome ended, the same for every job kind's attempts (a run's
// training job, an evaluation's job): killed (a signal: an out-of-memory kill, a preemption),
// crashed (exited without an outcome), lost (its cluster lost it, or it ended while trainerd was
// down), stopped (a SIGTERM trainerd did not send), hung (silent past limits.jobSilenceSeconds:
// watch_silence() below, for every job kind that sends a heartbeat).
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

// The job's heartbeat interval (JobSpec::heartbeat_seconds) for a silence limit: four beats in
// each silence, 1 to 30 s; 0 (no beat) when the limit is 0 (never).
int heartbeat_seconds_for(int silence_seconds);

// A running job's silence, watched: trainerd last heard from it at `heard_at` (unset: not heard
// yet, a job queued on a cluster or starting, never hung), and never counts its own downtime
// (`trainerd_started_at`). A job silent past `silence_seconds` (0: never) is hung: asked to stop
// (SIGTERM) once, `hung_at` set; killed (SIGKILL) once `grace_seconds` have passed since. What to
// do now:
enum class SilenceAction { kNone, kStop, kKill };
SilenceAction watch_silence(double now, std::optional<double> heard_at, double trainerd_started_at,
                            std::optional<double> hung_at, int silence_seconds, double grace_seconds);

// The lost attempt of a job stopped as hung (`what`: "the evaluation job").
LostAttempt hung_attempt(const std::string& what, int silence_seconds, std::optional<int> exit_code,
                         const std::string& log_tail);

// The wait before the next attempt after `used` attempts: `base` seconds doubled for each lost
// attempt after the first, at most 600 s.
double attempt_backoff_seconds(double base, int used);

}  // namespace trainer::service

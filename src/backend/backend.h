// Compute backends: where training jobs run (local processes now; Slurm and Ray later).
//
// The service asks a backend to start one job per run attempt, to report whether it still
// runs, to stop it, and to say what devices the cluster holds. A job is identified by a
// JobHandle the service stores durably, so that a restarted service finds its jobs again.
// Progress is not read through the backend: the job writes its events file (docs/api.md,
// "The job protocol") into the run's folder, which the service follows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::backend {

// What one attempt of a run executes.
struct JobSpec {
  std::string run_id;
  int attempt = 1;
  std::string plan_path;    // resolved plan (JSON), already written
  std::string output_dir;   // the job's --output folder
  std::string events_path;  // the job's --events file
  std::string log_path;     // where the job's stdout and stderr go
};

// Durable identity of a started job: enough to find it again after a service restart.
struct JobHandle {
  int64_t pid = 0;         // process id (local backend)
  int64_t start_time = 0;  // process start time in clock ticks since boot (/proc/PID/stat field 22)
};

enum class JobState {
  kRunning,  // the job's process exists
  kExited,   // it ended; exit_code says how
  kGone,     // it ended and its exit status is unknown (not our child any more, e.g. after a restart)
};

struct JobStatus {
  JobState state = JobState::kRunning;
  std::optional<int> exit_code;  // kExited: exit code, or 128 + signal number
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "local", "slurm", "ray"

  // Starts the job; returns once it is started (not finished).
  virtual Result<JobHandle> start(const JobSpec& spec) = 0;
  // Whether the job identified by `handle` still runs.
  virtual JobStatus poll(const JobHandle& handle) = 0;
  // Asks the job to stop at its next step boundary (SIGTERM locally).
  virtual void request_stop(const JobHandle& handle) = 0;
  // Stops it now (SIGKILL locally).
  virtual void kill(const JobHandle& handle) = 0;

  // Finds a job started for `spec` whose handle was never recorded (the service stopped between
  // starting it and committing the handle). nullopt when there is none.
  virtual std::optional<JobHandle> find(const JobSpec& spec) = 0;

  // Runs a short trainer-job tool command (e.g. `analyze ...`) on the backend and returns its
  // standard output; fails with its standard error when it exits non-zero or runs past `timeout_s`.
  virtual Result<std::string> run_tool(const std::vector<std::string>& args, int timeout_s) = 0;

  // Devices the cluster reports, by accelerator profile ("cpu", "nvidia-h100-80gb", ...).
  // Absent entries were not reported.
  virtual std::map<std::string, int> observed_devices() = 0;
  // A one-line description of what observed_devices() read, for `info`.
  virtual std::string observed_source() const = 0;
};

struct LocalBackendOptions {
  std::string job_binary;  // path of trainer-job
};

// Runs each job as a child process of this service, in its own process group.
std::unique_ptr<Backend> make_local_backend(const LocalBackendOptions& options);

}  // namespace trainer::backend

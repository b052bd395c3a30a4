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

// Who a job trains for: handed to the job as TRAINER_* environment variables
// (docs/job-protocol.md, "Environment"). Empty fields are not passed.
struct JobIdentity {
  std::string workload;          // workload name (TRAINER_WORKLOAD)
  std::string method;            // "sft" | "grpo" | "gspo" (TRAINER_METHOD)
  std::string base_model;        // the user-facing base model name (TRAINER_BASE_MODEL)
  std::string base_model_sha;    // content hash of the cached model (TRAINER_BASE_MODEL_SHA)
  std::string profile;           // accelerator profile of the run's pool, e.g. "cpu" (TRAINER_PROFILE)
  std::string otlp_endpoint;     // base URL the job pushes OTLP/HTTP JSON metrics to; "" = none
  int otlp_interval_ms = 5000;   // export interval (TRAINER_OTLP_INTERVAL_MS)
  std::string catalog_url;       // trainerd's API base URL for the snapshot catalog's callbacks (TRAINER_CATALOG_URL)
  std::string artifact_root;     // the artifact storage folder snapshots are published to (TRAINER_ARTIFACT_ROOT)
};

// What one attempt of a run executes.
struct JobSpec {
  std::string run_id;       // TRAINER_RUN_ID
  int attempt = 1;          // 1-based (TRAINER_ATTEMPT)
  JobIdentity identity;
  std::string plan_path;    // resolved plan (JSON), already written
  std::string output_dir;   // the job's --output folder
  std::string events_path;  // the job's --events file
  std::string log_path;     // where the job's stdout and stderr go
  std::string resume_snapshot;  // the snapshot this attempt restores (TRAINER_RESUME_SNAPSHOT); "" = none
};

// The environment variables of the service/job contract for `spec` (name, value), in a fixed order.
std::vector<std::pair<std::string, std::string>> job_environment(const JobSpec& spec);

// Durable identity of a started job: enough to find it again after a service restart. Opaque to
// the service, which stores `value` as it is; each backend encodes and decodes its own (the local
// backend: {"pid": N, "startTime": T} as JSON text).
struct JobHandle {
  std::string value;
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

  // A short description of the job for messages ("pid 1234").
  virtual std::string describe(const JobHandle& handle) const = 0;

  // Starts the job; returns once it is started (not finished).
  virtual Result<JobHandle> start(const JobSpec& spec) = 0;
  // Whether the job identified by `handle` still runs.
  virtual JobStatus poll(const JobHandle& handle) = 0;
  // Asks the job to stop at its next step boundary (SIGTERM locally).
  virtual void request_stop(const JobHandle& handle) = 0;
  // Asks the job to save its full state at the next step boundary, publish it, then stop
  // (trainer-job: SIGUSR1). Backends that cannot deliver it say so with supports_pause().
  virtual bool supports_pause() const { return false; }
  virtual void request_pause(const JobHandle& handle) { (void)handle; }
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

// The compute backend section of trainerd's configuration ({"compute": {"backend": "local"}}).
struct ComputeConfig {
  std::string backend = "local";  // "local" (the only one so far)
  std::string job_binary;         // trainer-job; set by the wiring when the configuration names none
};

// The backend `config` names; invalid_field("compute.backend") for one this build does not have.
Result<std::unique_ptr<Backend>> make_backend(const ComputeConfig& config);

}  // namespace trainer::backend

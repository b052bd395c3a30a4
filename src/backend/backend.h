// Compute backends: where training jobs run: local processes, Slurm batch jobs or Ray jobs.
//
// The service asks a backend to start one job per run attempt, to report whether it still
// runs, to stop it, to run a short trainer-job tool (run_tool), and to say what devices the
// cluster holds. A job is identified by a
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
#include "protocol/job_request.h"

namespace trainer::backend {

// What one attempt of a run executes: the typed job request (protocol/job_request.h: the run,
// its identity, the paths of its plan, output, events and log, and what it restores), plus the
// resources of the run's claim, which only the backend reads. The local backend shows the job
// exactly `device_ids` (CUDA_VISIBLE_DEVICES); a cluster backend asks its scheduler for `gpus`
// GPUs, or for `cpus` CPUs when `gpus` is 0, and its scheduler picks the devices.
struct JobSpec : protocol::JobRequest {
  int gpus = 0;                  // GPUs the claim holds (0: a CPU run)
  int cpus = 1;                  // CPUs a CPU run asks for
  std::vector<int> device_ids = {};  // the pool's device indices the claim was granted
};

// The environment variables of the service/job contract for a spec (name, value), in a fixed
// order: the protocol's one writer of the job request.
using protocol::job_environment;

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

// One node's answer to Backend::scan_nodes().
struct NodeScan {
  std::string node;    // the node's name as the backend lists it (the local backend: this host's name)
  std::string output;  // what `trainer-job scan` printed on the node; "" when `error` is set
  std::string error;   // why the node gave no answer (its job failed, timed out, was refused); "" when it answered
};

struct JobStatus {
  JobState state = JobState::kRunning;
  std::optional<int> exit_code;  // kExited: exit code, or 128 + signal number
  // Ended: what the cluster says ended it when it was not the job itself ("Slurm ended job 12:
  // NODE_FAIL", "the Ray cluster lost job ..."); "" when the job ended on its own.
  std::string reason = {};
  // Running: the address of the node the job runs on, as the cluster reports it (Ray: the node's
  // IP; Slurm: its batch host's name), by which trainerd reaches a process the job serves on every
  // interface (an endpoint's). "" when the backend does not say (the local backend: this host).
  std::string node_address = {};
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "local", "slurm", "ray"

  // A short description of the job for messages ("pid 1234").
  virtual std::string describe(const JobHandle& handle) const = 0;

  // Whether the job's files (events file, log, output folder) are where the service reads them,
  // in its data folder. false: only what the job posts to the API and publishes to the artifact
  // store reaches the service (a Ray backend with jobFolder).
  virtual bool shares_files() const { return true; }
  // Whether every job runs on trainerd's own host (the local backend): a process a job serves
  // (an endpoint's) then listens on loopback only; else on every interface of its node.
  virtual bool on_this_host() const { return false; }

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
  // The TRAINER_LAUNCH_FENCE the job `handle` names was started with (a job find() found: the
  // service records it, so that job, and no other, may train). nullopt when the backend cannot
  // tell (then any fence is accepted for it) or the job carries none. The local backend reads the
  // process's environment; Slurm and Ray cannot tell (a Ray submission id is taken once per
  // attempt, so Ray never holds two jobs of one attempt).
  virtual std::optional<int64_t> launch_fence_of(const JobHandle& handle) {
    (void)handle;
    return std::nullopt;
  }

  // Runs a short trainer-job tool command (e.g. `analyze ...`) on the backend and returns its
  // standard output; fails with its standard error when it exits non-zero or runs past `timeout_s`.
  virtual Result<std::string> run_tool(const std::vector<std::string>& args, int timeout_s) = 0;

  // Runs the trainer-job tool command `args` (`scan --data DIR`) once on every live node, each within
  // `timeout_s`, all at once: the local backend on this host, Slurm one srun per node that sinfo
  // lists up, Ray one job per alive node pinned to it. A node whose job fails or times out is in the
  // answer with its error; fails (unavailable) only when the backend cannot list its nodes.
  virtual Result<std::vector<NodeScan>> scan_nodes(const std::vector<std::string>& args, int timeout_s) = 0;

  // Devices the cluster reports, by accelerator profile ("cpu", "nvidia-h100-80gb", ...).
  // Absent entries were not reported.
  virtual std::map<std::string, int> observed_devices() = 0;
  // A one-line description of what observed_devices() read, for `info`.
  virtual std::string observed_source() const = 0;
  // Of observed_devices(), those the cluster reports allocated to any work at all (this
  // service's jobs and everything else), by the same profiles: a node counts one "cpu" device in
  // use while anything holds part of it. nullopt when the backend cannot say (the local backend,
  // or a cluster that did not answer).
  virtual std::optional<std::map<std::string, int>> devices_in_use() { return std::nullopt; }
};

struct LocalBackendOptions {
  std::string job_binary;  // path of trainer-job
};

// Runs each job as a child process of this service, in its own process group.
std::unique_ptr<Backend> make_local_backend(const LocalBackendOptions& options);

// The Slurm backend ({"compute": {"backend": "slurm", "slurm": {...}}}): jobs are batch jobs of a
// Slurm cluster whose nodes share trainerd's data folder and see trainer-job at the same path.
struct SlurmOptions {
  std::string partition;                // --partition; "" = the cluster's default partition
  std::string slurm_conf;               // SLURM_CONF for every Slurm command; "" = Slurm's default
  std::string bin_dir;                  // folder of sbatch, squeue, ...; "" = found in PATH
  std::string gres_name = "gpu";        // a GPU run asks for --gres=NAME:N
  int cpus_per_task = 1;                // --cpus-per-task of a CPU run
  int cpus_per_gpu = 1;                 // --cpus-per-task of a GPU run, per GPU
  std::string job_name_prefix = "trainer";  // jobs are named PREFIX-RUN-ATTEMPT (found again by name)
  std::vector<std::string> extra_args;  // more sbatch arguments (e.g. "--account=ml")
};

// The Ray backend ({"compute": {"backend": "ray", "ray": {...}}}): jobs are Ray jobs submitted
// through the Jobs REST API of a cluster whose nodes share trainerd's data folder, or, with
// `jobFolder`, share nothing with trainerd (an S3 artifact store then carries inputs and outputs).
struct RayOptions {
  std::string address;                  // the dashboard's URL, e.g. "http://127.0.0.1:8265"
  double cpus_per_job = 1;              // entrypoint_num_cpus of every job
  std::string submission_prefix = "trainer";  // submission ids are PREFIX-RUN-ATTEMPT
  int request_timeout_s = 10;           // one REST call
  // "" (the default): the job's files (script, plan, events, log, output) are in trainerd's data
  // folder, which the nodes share. Else a folder on the job's node: the entrypoint carries the
  // plan, the job works in FOLDER/SUBMISSION-ID, reports its events and log over trainerd's API,
  // and its log stays in Ray's (fetched when the job ends), so no folder is shared.
  std::string job_folder;
};

// The compute backend section of trainerd's configuration ({"compute": {"backend": "local"}}).
struct ComputeConfig {
  std::string backend = "local";  // "local", "slurm" or "ray"
  std::string job_binary;         // trainer-job; set by the wiring when the configuration names none
  SlurmOptions slurm = {};        // backend "slurm"
  RayOptions ray = {};            // backend "ray"
};

// Submits each job to Slurm with sbatch; `job_binary` is trainer-job's path on the nodes.
std::unique_ptr<Backend> make_slurm_backend(const std::string& job_binary, const SlurmOptions& options);
// Submits each job to a Ray cluster's Jobs REST API.
std::unique_ptr<Backend> make_ray_backend(const std::string& job_binary, const RayOptions& options);

// The backend `config` names; invalid_field("compute.backend") for one this build does not have.
Result<std::unique_ptr<Backend>> make_backend(const ComputeConfig& config);

}  // namespace trainer::backend

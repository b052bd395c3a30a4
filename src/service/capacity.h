// Capacity: the deployment's pools, claims and quotas (admission.h's pure decision applied to the
// store), the cost a run's jobs spend, and the gauges of /metrics with the series jobs push to
// the relay.
//
// Thread safety: every method may be called from any thread. admit_locked(), settle_cost() and
// publish_gpu_time() run with the core's mu held, inside a store transaction.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "service/service_core.h"

namespace trainer::service {

class Capacity {
 public:
  explicit Capacity(ServiceCore& core) : core_(core) {}

  // Service::capacity (`workload`: a workload's name, whose claims and quota alone are listed;
  // "" = all), device_hours, metrics_text, ingest_job_metrics.
  Result<json> report(const std::string& workload);
  Result<json> device_hours(const std::string& from, const std::string& to, const std::string& by);
  // Service::scan_capacity: `trainer-job scan` on every live node of the backend (scan_nodes), each
  // node's job folders marked leftover where no open run's current attempt owns them; a node whose
  // scan failed is an entry {node, error}.
  Result<json> scan();
  std::string metrics_text();
  // `run_id`: the run (or evaluation) whose metrics alone the push may carry.
  Status ingest_job_metrics(std::string_view otlp_json, const std::string& run_id);

  // Reads the devices the backend observes (start(), then the driver every 30 s).
  void read();
  // read() again when the last read is older than `age` (report(): the cluster as it is now, not
  // as it was up to 30 s ago); one caller reads while the others use what it read.
  void read_if_older(std::chrono::seconds age);

  // For runs and evaluations (mu held, inside a store transaction):
  // Grants what admission grants of the queued claims, and places granted claims on devices, under
  // the store's admission lock (store.h, lock_admission()): no pool or quota is over-granted by
  // replicas admitting at once.
  Status admit_locked();
  // Releases `owner`'s claim (ok when it has none) and ends its hold in the claims' history.
  Status release_claim(const std::string& owner);
  // Moves the time of an ended job into the run's cost, and tells the relay the run ended.
  void settle_cost(RunRecord& run, double now);
  // Adds the GPU time of a GPU pool's claim up to `upto` to cost.gpu.time (not yet counted).
  void publish_gpu_time(const RunRecord& run, double upto);

  // The deployment's pool `name`; null when there is none.
  const PoolConfig* pool_named(const std::string& name) const;
  // The training pool a claim of `devices` devices goes to (execution.gpus `gpus`; 0 = a CPU
  // run): the largest that can ever hold it, now or in a capacity window still to come, else
  // failed_precondition naming the pools and their windows.
  Result<const PoolConfig*> choose_pool(int gpus, int devices);
  // Why a queued claim of `devices` devices in pool `pool` can never be granted: neither the
  // pool's permanent size nor a capacity window still to come holds that many (the windows that
  // would have have ended). "" while one can, and for a pool the configuration does not name.
  std::string never_granted(const std::string& pool, int devices);
  // Every claim, by its owner's id (a run, an evaluation, an endpoint).
  Result<std::map<std::string, store::ClaimRow>> claims_by_owner();

 private:
  // admit_locked()'s work, with the admission lock held.
  Status admit_under_lock();
  static int observed_for(const PoolConfig& p, const std::map<std::string, int>& observed);
  // The "cluster" of report(): what a Slurm or Ray backend last read; null for another backend.
  json cluster_json(const std::vector<store::ClaimRow>& claims, const std::map<std::string, int>& observed,
                    const std::optional<std::map<std::string, int>>& in_use, std::optional<double> read_at) const;
  // Adds hostMemoryGiB to a run's claim `entry`, and to `warnings` when it is over its pool's
  // hostRamGiB (report()).
  Status check_host_ram(const store::ClaimRow& c, const std::string& workload_name, json& entry, json& warnings);
  void refresh_gauges();
  // Whether this replica publishes the fleet's gauges (pools, workloads, active runs and
  // pipelines, all read from the shared store): the live replica that started first (then by
  // name) does, the others leave them out; one trainerd on SQLite always does. When it stops
  // beating, the next one takes over within ServiceCore::kLiveBeats heartbeats.
  bool reports_fleet_gauges();

  ServiceCore& core_;
  std::atomic<bool> fleet_reporter_{true};  // reports_fleet_gauges()'s last answer

  // GPU seconds of each open run's current job already added to cost.gpu.time; guarded by core_.mu.
  std::map<std::string, double> gpu_published_;

  std::mutex observed_mu_;
  std::map<std::string, int> observed_;  // guarded by observed_mu_
  // Of observed_, what the cluster reported in use by any work (Backend::devices_in_use).
  std::optional<std::map<std::string, int>> in_use_;  // guarded by observed_mu_
  bool observed_read_ = false;           // guarded by observed_mu_
  double observed_at_ = 0;               // guarded by observed_mu_: when read (service clock, seconds)
  std::mutex reading_mu_;                // held by the one read_if_older() that reads
  std::chrono::steady_clock::time_point read_steady_;  // guarded by reading_mu_: the last read
};

}  // namespace trainer::service

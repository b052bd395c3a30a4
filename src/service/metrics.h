// Service metrics: the run, pool, claim, quota and cost metrics of the specification, recorded
// through the telemetry SDK's typed instruments (telemetry/registry.yaml, docs/telemetry-usage.md).
//
// The service records through this small interface only, in its own words (a phase entered, a
// run ended). Counters and histograms accumulate as things happen; gauges are computed from
// durable state at each scrape and handed in whole. render() is the Prometheus exposition.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "service/phases.h"
#include "telemetry/instruments.h"

namespace trainer::service {

// One pool's figures at a scrape.
struct PoolGauge {
  std::string accelerator;
  bool serving = false;
  int declared = 0;
  std::optional<int> observed;  // absent until the cluster has been read
  int granted_claims = 0, queued_claims = 0;
  int granted_devices = 0, queued_devices = 0;
};

// One workload's figures at a scrape.
struct WorkloadGauge {
  std::string name;
  int quota = 0;
  int granted_devices = 0, queued_devices = 0;
};

class ServiceTelemetry {
 public:
  explicit ServiceTelemetry(std::string instance);
  ~ServiceTelemetry();

  void phase_entered(Phase phase);
  void phase_left(Phase phase, double seconds);
  void run_failed(Phase failed_in);
  void run_ended(Phase terminal, const std::string& method, double seconds);  // method "SFT", ...
  void gpu_time(const std::string& workload, const std::string& accelerator, double seconds);

  // Durable operations (service.operation.attempts and .duration), in the registry's words.
  struct OperationAttempt {
    telemetry::ServiceOperation operation;
    telemetry::ServiceStage stage;
    telemetry::ServiceOutcome outcome;
    std::optional<telemetry::ServiceFailureReason> reason = std::nullopt;
    std::optional<telemetry::PausePolicy> pause_policy = std::nullopt;
  };
  void operation_attempt(const OperationAttempt& a);
  // An operation's end: `seconds` from its durable acceptance.
  void operation_ended(telemetry::ServiceOperation operation, telemetry::ServiceOutcome outcome, double seconds,
                       std::optional<telemetry::ServiceFailureReason> reason = std::nullopt,
                       std::optional<telemetry::PausePolicy> pause_policy = std::nullopt);

  // Gauges: replace every series with these.
  void set_pools(const std::vector<PoolGauge>& pools);
  void set_workloads(const std::vector<WorkloadGauge>& workloads);
  void set_runs_active(const std::map<Phase, int>& by_phase);
  void set_pipelines_active(int n);
  // A pipeline stage's end: its type, whether it succeeded, `seconds` from its start.
  void pipeline_stage_ended(telemetry::PipelineStageType type, bool success, double seconds);

  std::string render() const;
  std::string content_type() const;

 private:
  struct Impl;
  const std::string instance_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainer::service

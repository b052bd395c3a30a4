// Service metrics: the run, pool, claim, quota and cost metrics of the specification.
//
// The service records through this small interface only. Counters and histograms accumulate
// here; gauges are computed from durable state at each scrape and handed in with set_gauge().
// render() writes the Prometheus text exposition; every series carries `instance`.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace trainer::service {

using Labels = std::map<std::string, std::string>;

enum class MetricKind { kCounter, kGauge, kHistogram };

struct MetricDef {
  const char* name;  // Prometheus name
  MetricKind kind;
  const char* unit;  // UCUM-ish unit, for the HELP line
  const char* help;  // the specification's description
};

// Attribute names, as the Prometheus exporter writes telemetry/registry.yaml's attributes.
namespace attr {
inline constexpr const char* kInstance = "akka_optimize_training_instance";
inline constexpr const char* kClaimState = "akka_optimize_training_claim_state";
inline constexpr const char* kPoolAccelerator = "akka_optimize_training_pool_accelerator";
inline constexpr const char* kPoolServing = "akka_optimize_training_pool_serving";
inline constexpr const char* kWorkload = "akka_optimize_training_workload";
inline constexpr const char* kRunPhase = "akka_optimize_training_run_phase";
inline constexpr const char* kRunOutcome = "akka_optimize_training_run_outcome";
inline constexpr const char* kRunMethod = "akka_optimize_training_run_method";
inline constexpr const char* kGpuDerived = "akka_optimize_training_gpu_derived";
}  // namespace attr

// The service metrics of telemetry/registry.yaml, by their Prometheus names.
namespace metric {
extern const MetricDef kPoolClaims;              // gauge {claim}: active claims by state
extern const MetricDef kPoolDevicesClaimed;      // gauge {device}: devices held or awaited by state
extern const MetricDef kPoolDevicesDeclared;     // gauge {device}
extern const MetricDef kPoolDevicesObserved;     // gauge {device}: absent until read
extern const MetricDef kWorkloadDevicesClaimed;  // gauge {device}: across pools, by state
extern const MetricDef kWorkloadDevicesQuota;    // gauge {device}
extern const MetricDef kGpuTime;                 // counter s: GPU compute time of training jobs
extern const MetricDef kRunsActive;              // gauge {run}: by phase
extern const MetricDef kRunDuration;             // histogram s: end to end
extern const MetricDef kRunFailures;             // counter {run}: by the phase failure occurred in
extern const MetricDef kRunPhaseDuration;        // histogram s: time spent in a phase
extern const MetricDef kRunPhaseEntries;         // counter {entry}: entries into each phase
}  // namespace metric

class MetricsRecorder {
 public:
  explicit MetricsRecorder(std::string instance);

  void add(const MetricDef& def, const Labels& labels, double value);
  void observe(const MetricDef& def, const Labels& labels, double value);
  // Replaces every series of a gauge.
  void set_gauge(const MetricDef& def, const std::vector<std::pair<Labels, double>>& series);

  std::string render() const;

 private:
  struct Histogram {
    std::vector<double> counts;  // per bucket in kBuckets, not cumulative
    double sum = 0;
    double count = 0;
  };
  struct Family {
    const MetricDef* def = nullptr;
    std::map<Labels, double> values;         // counters and gauges
    std::map<Labels, Histogram> histograms;  // histograms
  };
  Family& family(const MetricDef& def);  // requires mu_

  const std::string instance_;
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;  // by name; guarded by mu_
};

}  // namespace trainer::service

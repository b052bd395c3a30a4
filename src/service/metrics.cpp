#include "service/metrics.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace trainer::service {
namespace metric {
const MetricDef kPoolClaims{"akka_optimize_training_pool_claims", MetricKind::kGauge, "{claim}",
                            "Number of active claims on a GPU pool, partitioned by claim state."};
const MetricDef kPoolDevicesClaimed{
    "akka_optimize_training_pool_devices_claimed", MetricKind::kGauge, "{device}",
    "Number of devices the active claims on a GPU pool hold or are waiting for, partitioned by claim state."};
const MetricDef kPoolDevicesDeclared{
    "akka_optimize_training_pool_devices_declared", MetricKind::kGauge, "{device}",
    "Number of devices the deployment declares a GPU pool holds, which is what work is admitted against."};
const MetricDef kPoolDevicesObserved{"akka_optimize_training_pool_devices_observed", MetricKind::kGauge, "{device}",
                                     "Number of devices the pool's cluster reported holding at its last "
                                     "reading. Absent until the cluster has been read."};
const MetricDef kWorkloadDevicesClaimed{"akka_optimize_training_workload_devices_claimed", MetricKind::kGauge,
                                        "{device}",
                                        "Number of devices a workload's active claims hold or are waiting for "
                                        "across every pool, partitioned by claim state."};
const MetricDef kWorkloadDevicesQuota{"akka_optimize_training_workload_devices_quota", MetricKind::kGauge, "{device}",
                                      "Number of devices a workload may hold at once across every pool."};
const MetricDef kGpuTime{"akka_optimize_training_cost_gpu_time_seconds_total", MetricKind::kCounter, "s",
                         "Total GPU compute time consumed by training jobs."};
const MetricDef kRunsActive{"akka_optimize_training_run_active", MetricKind::kGauge, "{run}",
                            "Number of active training runs, partitioned by phase."};
const MetricDef kRunDuration{"akka_optimize_training_run_duration_seconds", MetricKind::kHistogram, "s",
                             "Total end-to-end execution duration of a training run."};
const MetricDef kRunFailures{"akka_optimize_training_run_failures_total", MetricKind::kCounter, "{run}",
                             "Total number of failed training runs, partitioned by the phase in which "
                             "failure occurred."};
const MetricDef kRunPhaseDuration{"akka_optimize_training_run_phase_duration_seconds", MetricKind::kHistogram, "s",
                                  "Duration spent in a specific training run phase before transitioning."};
const MetricDef kRunPhaseEntries{"akka_optimize_training_run_phase_entries_total", MetricKind::kCounter, "{entry}",
                                 "Total number of times training runs have entered each lifecycle phase."};
}  // namespace metric

namespace {

// The explicit buckets telemetry/registry.yaml gives the run histograms.
const double kBuckets[] = {1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800};
constexpr size_t kBucketCount = sizeof(kBuckets) / sizeof(kBuckets[0]);

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string label_text(const Labels& labels, const std::string& extra_key = "", const std::string& extra = "") {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ",";
    first = false;
    out += k + "=\"" + escape(v) + "\"";
  }
  if (!extra_key.empty()) {
    if (!first) out += ",";
    out += extra_key + "=\"" + extra + "\"";
  }
  return out + "}";
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

MetricsRecorder::MetricsRecorder(std::string instance) : instance_(std::move(instance)) {}

MetricsRecorder::Family& MetricsRecorder::family(const MetricDef& def) {
  Family& f = families_[def.name];
  f.def = &def;
  return f;
}

void MetricsRecorder::add(const MetricDef& def, const Labels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Labels l = labels;
  l[attr::kInstance] = instance_;
  family(def).values[l] += value;
}

void MetricsRecorder::observe(const MetricDef& def, const Labels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Labels l = labels;
  l[attr::kInstance] = instance_;
  Histogram& h = family(def).histograms[l];
  if (h.counts.empty()) h.counts.assign(kBucketCount, 0);
  for (size_t i = 0; i < kBucketCount; ++i) {
    if (value <= kBuckets[i]) {
      h.counts[i] += 1;
      break;
    }
  }
  h.sum += value;
  h.count += 1;
}

void MetricsRecorder::set_gauge(const MetricDef& def, const std::vector<std::pair<Labels, double>>& series) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(def);
  f.values.clear();
  for (const auto& [labels, v] : series) {
    Labels l = labels;
    l[attr::kInstance] = instance_;
    f.values[l] += v;  // pools sharing an accelerator and role add up
  }
}

std::string MetricsRecorder::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream out;
  for (const auto& [name, f] : families_) {
    const char* type = f.def->kind == MetricKind::kCounter ? "counter"
                       : f.def->kind == MetricKind::kGauge ? "gauge"
                                                           : "histogram";
    out << "# HELP " << name << " " << f.def->help << " Unit: " << f.def->unit << ".\n";
    out << "# TYPE " << name << " " << type << "\n";
    for (const auto& [labels, v] : f.values) out << name << label_text(labels) << " " << number(v) << "\n";
    for (const auto& [labels, h] : f.histograms) {
      double cumulative = 0;
      for (size_t i = 0; i < kBucketCount; ++i) {
        cumulative += h.counts[i];
        out << name << "_bucket" << label_text(labels, "le", number(kBuckets[i])) << " " << number(cumulative)
            << "\n";
      }
      out << name << "_bucket" << label_text(labels, "le", "+Inf") << " " << number(h.count) << "\n";
      out << name << "_sum" << label_text(labels) << " " << number(h.sum) << "\n";
      out << name << "_count" << label_text(labels) << " " << number(h.count) << "\n";
    }
  }
  return out.str();
}

}  // namespace trainer::service

// The telemetry relay: trainerd's receiver of the OTLP/HTTP JSON its jobs push, serving the
// jobs' latest values on its own /metrics (the embedded default of docs/telemetry-usage.md).
//
// ingest() takes an ExportMetricsServiceRequest body as otlp_json() writes it (gauges, sums,
// histograms, exponential histograms; cumulative temporality). A push is the pushing job's whole
// state: the relay keeps, for each job (its resource's run.id and run.attempt), the series of its
// latest push, keyed by metric and point attributes; a series missing from a job's newer push
// (a gauge the job withdrew) is gone. render_prometheus() writes them in the text exposition with the
// names prometheus_name() gives local metrics, each series labelled with its job's resource
// attributes (service.* left out), so `{akka_optimize_training_run_id="..."}` selects a run.
//
// A job's series are dropped `retention` after its last push, and `after_end` after
// run_ended() says its run ended, whichever comes first. Bounded: bodies over
// max_body_bytes or nested deeper than max_depth are refused, and so is a body whose new series
// would take the relay over max_series. Thread-safe: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "telemetry/telemetry.h"

namespace trainer::telemetry {

struct RelayOptions {
  double retention_seconds = 300;        // a job's series live this long after its last push
  double after_end_seconds = 300;        // ... and at most this long after its run ended
  size_t max_series = 100000;            // series held across every job
  size_t max_body_bytes = 16u << 20;     // largest request body ingested
  int max_depth = 32;                    // deepest JSON nesting of a body (otlp_json nests 9)
};

class TelemetryRelay {
 public:
  explicit TelemetryRelay(RelayOptions options = {});

  // One push at `now` (Unix seconds). InvalidArgument names the field of a malformed body (a
  // dotted path such as "resourceMetrics[0].scopeMetrics[0].metrics[3].gauge.dataPoints[0]");
  // ResourceExhausted when the relay would hold more than max_series after it. A refused body
  // changes nothing. The body's jobs' earlier series are replaced by the body's. With `only_run`
  // (a job's push, its attempt authenticated: the run it works for), a resource of any other run
  // is PermissionDenied naming the resource, and nothing of the body is kept.
  Status ingest(std::string_view body, double now, std::string_view only_run = {});

  // The service's word that a run's attempt ended: its series go `after_end_seconds` from `now`.
  void run_ended(std::string_view run_id, int64_t attempt, double now);

  // Whether the relay holds series of that run's attempt (it pushed, and they have not expired).
  bool holds(std::string_view run_id, int64_t attempt) const;

  // Drops the series whose time is up at `now`.
  void expire(double now);

  // Every held series, after expire(now), in the Prometheus text format (0.0.4); "" when none.
  std::string render_prometheus(double now);

  size_t series_count() const;

 private:
  struct Metric {
    InstrumentDescriptor descriptor;
    std::map<std::string, PointData> points;  // by the point's AttributeSet::key()
  };
  struct Job {
    AttributeSet labels;               // the resource's attributes but service.*
    double last_push = 0;
    double ended_at = -1;              // < 0: the run has not been said to end
    std::map<std::string, Metric> metrics;  // by name
    size_t series = 0;
  };
  static std::string job_key(std::string_view run_id, std::string_view attempt);
  void expire_locked(double now);

  const RelayOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Job> jobs_;  // guarded by mu_; by job_key
  size_t series_ = 0;                // guarded by mu_; sum of jobs_' series
};

}  // namespace trainer::telemetry

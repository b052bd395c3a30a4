// Telemetry: the metrics SDK (instruments, attribute sets, resource), its exporters
// (Prometheus text exposition, OTLP/HTTP JSON push), and — in "telemetry/instruments.h",
// generated from telemetry/registry.yaml — the typed instruments every part records through.
//
// Parts of the system do not name metrics themselves: they construct `ServiceMetrics` or
// `JobMetrics` (generated) on a MeterProvider and call typed methods, so an undeclared
// metric, attribute key or enumeration value does not compile. See docs/telemetry-usage.md.
//
// Data model: OpenTelemetry's. Counters (monotonic sums) and histograms are cumulative from
// the series' first use; gauges hold the last value set. Explicit-bucket histograms count
// values in (bound[i-1], bound[i]]; exponential histograms are base-2 with a scale that
// drops automatically when the value range outgrows `max_size` buckets.
//
// Thread safety: everything here may be called from any thread. The hot path (a bound
// handle's add/set/record) is a few relaxed atomics; exponential histograms take one
// uncontended mutex per record.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"
#include "telemetry/exponential_histogram.h"

namespace trainer::telemetry {

// Name of the instrumentation scope every instrument of this project records under.
inline constexpr const char* kScopeName = "trainer";

// ---- Attributes --------------------------------------------------------------------------

using AttributeValue = std::variant<std::string, bool, int64_t, double>;

struct Attribute {
  std::string key;
  AttributeValue value;
  bool operator==(const Attribute&) const = default;
};

// A set of attributes: keys unique and sorted. Immutable once built.
class AttributeSet {
 public:
  AttributeSet() = default;
  // Sorts by key; of a repeated key the last value wins.
  explicit AttributeSet(std::vector<Attribute> attributes);

  const std::vector<Attribute>& attributes() const { return attributes_; }
  bool empty() const { return attributes_.empty(); }
  // Canonical encoding of the set, equal for equal sets: the lookup key of a series.
  const std::string& key() const { return key_; }
  bool operator==(const AttributeSet& other) const { return key_ == other.key_; }

 private:
  std::vector<Attribute> attributes_;
  std::string key_;
};

// A borrowed attribute, for looking a series up without allocating. Same alternatives, in the
// same order, as AttributeValue.
using AttributeValueRef = std::variant<std::string_view, bool, int64_t, double>;
struct AttributeRef {
  std::string_view key;
  AttributeValueRef value;
};

// Renders a value the way OpenTelemetry's Prometheus mapping does: strings as is,
// booleans "true"/"false", integers in decimal, doubles in shortest round-trip form.
std::string attribute_value_text(const AttributeValue& value);

// Attributes describing what produces the telemetry (service.name, the run a job trains).
// Exported once per push (OTLP) and as `target_info` (Prometheus).
struct Resource {
  AttributeSet attributes;
};

// ---- Instruments ---------------------------------------------------------------------------

enum class InstrumentKind { kCounter, kGauge, kHistogram, kExponentialHistogram };
enum class ValueType { kInt, kDouble };  // how exporters encode values (OTLP asInt/asDouble)

struct InstrumentDescriptor {
  std::string name = {};         // OpenTelemetry name, e.g. "akka.optimize.training.sft.loss"
  std::string description = {};  // one or more sentences
  std::string unit = {};         // UCUM, e.g. "s", "By", "1", "{token}"
  InstrumentKind kind = InstrumentKind::kGauge;
  ValueType value_type = ValueType::kDouble;
  std::vector<double> buckets = {};  // kHistogram: ascending upper bounds (the last bucket is +Inf)
  int32_t max_scale = 20;       // kExponentialHistogram: the scale a series starts at
  int32_t max_size = 160;       // kExponentialHistogram: most buckets per sign
};

// One time series: an instrument's data for one attribute set. Created by Instrument on first
// use and owned by it until the provider is destroyed, so pointers to it stay valid.
class Series {
 public:
  Series(const InstrumentDescriptor& descriptor, AttributeSet attributes, uint64_t start_ns);
  Series(const Series&) = delete;
  Series& operator=(const Series&) = delete;

  // Counter: adds `value` (must be >= 0; a negative increment is dropped). An integer counter
  // adds the value truncated toward zero.
  void add(double value) {
    if (!(value >= 0)) return;
    if (integral_) {
      int_value_.fetch_add(static_cast<int64_t>(value), std::memory_order_relaxed);
    } else {
      value_.fetch_add(value, std::memory_order_relaxed);
    }
  }
  // Gauge: the value now; marks the series present.
  void set(double value) {
    value_.store(value, std::memory_order_relaxed);
    present_.store(true, std::memory_order_release);
  }
  // Gauge: withdraws the series until the next set() (e.g. a worker that exited).
  void clear() { present_.store(false, std::memory_order_release); }
  // Histogram (explicit or exponential): one measurement. NaN and infinities are dropped.
  void record(double value);

  const AttributeSet& attributes() const { return attributes_; }

  // Point-in-time copy for exporters. Returns false when the series is absent.
  bool snapshot(struct PointData* out) const;

 private:
  struct ExplicitBuckets {
    explicit ExplicitBuckets(size_t n) : counts(n) {}
    std::vector<std::atomic<uint64_t>> counts;  // size bounds + 1
    std::atomic<double> sum{0};
    std::atomic<double> min{std::numeric_limits<double>::infinity()};
    std::atomic<double> max{-std::numeric_limits<double>::infinity()};
  };
  struct alignas(64) Exponential {  // a cache line of its own: series do not share one
    explicit Exponential(int32_t max_scale, int32_t max_size) : data(max_scale, max_size) {}
    mutable std::mutex mu;
    ExponentialHistogram data;  // guarded by mu
  };

  // Constant after construction.
  const InstrumentDescriptor& descriptor_;
  const AttributeSet attributes_;
  const uint64_t start_ns_;
  const bool integral_;  // an integer counter: counts in int_value_
  // Atomic.
  std::atomic<int64_t> int_value_{0};
  std::atomic<double> value_{0};
  std::atomic<bool> present_{false};
  std::unique_ptr<ExplicitBuckets> explicit_;   // kHistogram only
  std::unique_ptr<Exponential> exponential_;     // kExponentialHistogram only
};

// Handles bound to one series: record without looking up the attribute set. Cheap to copy;
// valid as long as the provider. A default-constructed handle records nothing.
class CounterHandle {
 public:
  CounterHandle() = default;
  explicit CounterHandle(Series* series) : series_(series) {}
  void add(double value) const {
    if (series_) series_->add(value);
  }

 private:
  Series* series_ = nullptr;
};

class GaugeHandle {
 public:
  GaugeHandle() = default;
  explicit GaugeHandle(Series* series) : series_(series) {}
  void set(double value) const {
    if (series_) series_->set(value);
  }
  void clear() const {
    if (series_) series_->clear();
  }

 private:
  Series* series_ = nullptr;
};

class HistogramHandle {
 public:
  HistogramHandle() = default;
  explicit HistogramHandle(Series* series) : series_(series) {}
  void record(double value) const {
    if (series_) series_->record(value);
  }

 private:
  Series* series_ = nullptr;
};

// An instrument: its descriptor and its series, one per attribute set.
class Instrument {
 public:
  Instrument(InstrumentDescriptor descriptor, std::function<uint64_t()> clock);
  const InstrumentDescriptor& descriptor() const { return descriptor_; }

  // The series of `attributes`, created on first use (a counter starts at zero, present).
  Series* series(const AttributeSet& attributes);
  // The same for borrowed attributes, which must be sorted by key with no key repeated (the
  // generated instruments pass them so); allocates only when the series is new.
  Series* series(std::span<const AttributeRef> attributes);

  void add(double value, const AttributeSet& attributes) { series(attributes)->add(value); }
  void set(double value, const AttributeSet& attributes) { series(attributes)->set(value); }
  void clear(const AttributeSet& attributes) { series(attributes)->clear(); }
  void record(double value, const AttributeSet& attributes) { series(attributes)->record(value); }

  // Snapshots of every present series.
  std::vector<struct PointData> collect() const;

 private:
  const InstrumentDescriptor descriptor_;
  const std::function<uint64_t()> clock_;
  mutable std::shared_mutex mu_;
  Series* find(const std::string& key) const;
  Series* insert(const AttributeSet& attributes);

  std::unordered_map<std::string, std::unique_ptr<Series>> series_;  // guarded by mu_
  std::vector<Series*> order_;  // creation order, guarded by mu_
};

// ---- Collected data ------------------------------------------------------------------------

struct PointData {
  AttributeSet attributes;
  uint64_t start_time_ns = 0;  // the series' first use (cumulative temporality)
  uint64_t time_ns = 0;        // collection time
  double value = 0;            // counter, gauge
  // Histograms (explicit and exponential).
  uint64_t count = 0;
  double sum = 0;
  double min = 0;  // meaningful when count > 0
  double max = 0;
  std::vector<double> bounds;           // explicit: the descriptor's bounds
  std::vector<uint64_t> bucket_counts;  // explicit: bounds.size() + 1 counts
  ExponentialHistogramData exponential;  // exponential
};

struct MetricData {
  InstrumentDescriptor descriptor;
  std::vector<PointData> points;
};

struct MetricsSnapshot {
  Resource resource;
  std::string scope_name;
  std::string scope_version;
  std::vector<MetricData> metrics;  // instruments in creation order; those with no point omitted
};

// ---- Provider --------------------------------------------------------------------------------

struct MeterProviderOptions {
  std::string scope_version = {};          // version of the instrumentation scope; "" for none
  std::function<uint64_t()> clock = {};    // Unix time in ns; null: the system clock
};

// Owns every instrument and series. Thread-safe. Instruments live as long as the provider.
class MeterProvider {
 public:
  explicit MeterProvider(Resource resource, MeterProviderOptions options = {});
  MeterProvider(const MeterProvider&) = delete;
  MeterProvider& operator=(const MeterProvider&) = delete;

  // The instrument named `descriptor.name`, created on first call; later calls return it.
  Instrument& instrument(const InstrumentDescriptor& descriptor);

  const Resource& resource() const { return resource_; }
  MetricsSnapshot collect() const;

 private:
  const Resource resource_;
  const MeterProviderOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Instrument>> instruments_;  // guarded by mu_
  std::vector<Instrument*> order_;  // creation order, guarded by mu_
};

// ---- Prometheus ------------------------------------------------------------------------------

struct Exposition {
  std::string body;
  std::string content_type;
};

inline constexpr const char* kPrometheusTextContentType = "text/plain; version=0.0.4; charset=utf-8";
inline constexpr const char* kPrometheusProtobufContentType =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

// Everything the provider holds, for /metrics. Pass the request's Accept header: a scraper
// that asks for the protobuf format (Prometheus with --enable-feature=native-histograms) gets
// it, with exponential histograms as native histograms at full resolution (scale capped at
// 8); everyone else gets the text format (0.0.4).
//
// In the text format, exponential histograms are classic histograms whose `le` bounds are the
// exponential buckets' upper boundaries at scale 3 or coarser (buckets 9% wide; a stable set
// of `le` values), so histogram_quantile works on them with every Prometheus.
Exposition prometheus_exposition(const MeterProvider& provider, std::string_view accept = "");
std::string prometheus_text(const MetricsSnapshot& snapshot);
std::string prometheus_protobuf(const MetricsSnapshot& snapshot);  // delimited MetricFamily messages

// The Prometheus name OpenTelemetry's translation gives a metric: characters outside
// [a-zA-Z0-9_:] become '_', the unit's suffix is appended ("s" -> "_seconds", "By" ->
// "_bytes", "1" on a gauge -> "_ratio", "{x}/s" -> "_per_second"; annotations dropped), and
// counters end in "_total". E.g. akka.optimize.training.rl.step.count ({step}, counter) ->
// akka_optimize_training_rl_step_count_total.
std::string prometheus_name(const InstrumentDescriptor& descriptor);

// ---- OTLP/HTTP JSON push -------------------------------------------------------------------

// The OTLP JSON encoding (ExportMetricsServiceRequest) of a snapshot.
std::string otlp_json(const MetricsSnapshot& snapshot);

struct OtlpOptions {
  std::string endpoint = "http://127.0.0.1:4318/v1/metrics";  // collector's full metrics URL
  std::chrono::milliseconds interval{10000};  // time between pushes
  std::chrono::milliseconds timeout{5000};    // connect + read timeout of one push
  std::vector<std::pair<std::string, std::string>> headers = {};  // extra request headers
  std::string ca_file = {};  // PEM CAs trusted for an https:// endpoint; "" = the system's store
  // stop()'s last push is retried with backoff (0.25 s doubling to 2 s) for this long when it
  // fails: a job's last figures outlive a receiver restarting as the job ends. 0: one try.
  std::chrono::milliseconds final_push_deadline{0};
};

// OtlpOptions from OpenTelemetry's standard environment variables, or nullopt when neither
// endpoint variable is set (OTLP export off):
//   OTEL_EXPORTER_OTLP_METRICS_ENDPOINT   the full metrics URL, or else
//   OTEL_EXPORTER_OTLP_ENDPOINT           the collector's base URL; "/v1/metrics" is appended
//   OTEL_METRIC_EXPORT_INTERVAL           ms between pushes (default 60000)
//   OTEL_EXPORTER_OTLP_TIMEOUT            ms per push (default 10000)
//   OTEL_EXPORTER_OTLP_HEADERS            "name=value,name=value"
// `getenv` is the seam (tests pass their own). InvalidArgument names a malformed variable.
Result<std::optional<OtlpOptions>> otlp_options_from_environment(
    const std::function<const char*(const char*)>& getenv);

// One POST of `snapshot` to options.endpoint. Unavailable when the collector cannot be
// reached or answers other than 2xx; InvalidArgument for an endpoint that is not http://.
Status otlp_push(const MetricsSnapshot& snapshot, const OtlpOptions& options);

// Pushes the provider's metrics every `interval` on a thread of its own, and once more when
// destroyed or stopped (retried until `final_push_deadline`). Failed pushes are counted and
// retried at the next interval; a warning goes to stderr when pushes start failing and a line
// when they recover.
class OtlpPusher {
 public:
  OtlpPusher(const MeterProvider& provider, OtlpOptions options);
  ~OtlpPusher();
  OtlpPusher(const OtlpPusher&) = delete;
  OtlpPusher& operator=(const OtlpPusher&) = delete;

  // One push, now, on the caller's thread. Pushes never overlap: one that collected later posts
  // later, so a newer snapshot is never overwritten by an older one.
  Status push_now();
  // Asks the pusher's thread to push at once (a phase change, a termination signal) without
  // waiting for it; safe from any thread, never blocks on the network.
  void request_push();
  void stop();        // final push, then the thread ends; idempotent
  uint64_t pushes_ok() const { return ok_.load(); }
  uint64_t pushes_failed() const { return failed_.load(); }

 private:
  void loop();

  const MeterProvider& provider_;
  const OtlpOptions options_;
  std::atomic<uint64_t> ok_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<bool> failing_{false};  // the last push failed (a warning was written)
  std::mutex push_mu_;                // held from collect() to the answer of the post
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;        // guarded by mu_
  bool push_requested_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace trainer::telemetry

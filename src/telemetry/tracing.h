// Traces: W3C trace context, spans, and their OTLP/HTTP JSON export (docs/traces.md).
//
// A span here is a finished record (SpanData): the code that measured an operation builds it
// with its start and end and hands it to a SpanExporter, which batches spans and posts them
// (ExportTraceServiceRequest, JSON) on a thread of its own. Nothing waits on the collector: a
// full queue or a collector that cannot be reached drops spans, counted and warned about once
// per failing stretch; a run never fails for its traces.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "telemetry/telemetry.h"

namespace trainer::telemetry {

// ---- Trace context (W3C Trace Context, version 00) ------------------------------------------

// One span's identity in a trace: ids as lowercase hex (32 and 16 digits), never all zeros.
struct SpanContext {
  std::string trace_id;  // 32 lowercase hex digits
  std::string span_id;   // 16 lowercase hex digits
  bool operator==(const SpanContext&) const = default;
};

// The environment variable a job reads its parent span from (the W3C header's name, upper case).
inline constexpr const char* kTraceparentVariable = "TRACEPARENT";

// Parses a `traceparent` value, "00-<trace id>-<parent span id>-<flags>". InvalidArgument names
// what is wrong: not version 00, not four dash-separated fields, ids of the wrong length, not
// lowercase hex, or all zeros, flags not two hex digits.
Result<SpanContext> parse_traceparent(std::string_view text);

// "00-<trace id>-<span id>-01" (sampled: every span of a traced run is recorded).
std::string format_traceparent(const SpanContext& context);

// Random ids (never all zeros) from a generator seeded once per process from std::random_device.
// Thread-safe.
std::string random_trace_id();
std::string random_span_id();

// Whether `id` is `digits` lowercase hex digits, not all zeros.
bool valid_trace_hex(std::string_view id, size_t digits);

// ---- Spans ---------------------------------------------------------------------------------

enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };  // OTLP's Span.SpanKind values
enum class SpanStatus { kUnset = 0, kOk = 1, kError = 2 };       // OTLP's Status.StatusCode values

// Nanoseconds since the Unix epoch of a wall-clock time.
uint64_t unix_nanos(std::chrono::system_clock::time_point t);
// Of wall seconds (the service's clock: double seconds since the epoch).
uint64_t unix_nanos_of_seconds(double seconds);

// A finished span.
struct SpanData {
  std::string trace_id;              // 32 hex
  std::string span_id;               // 16 hex
  std::string parent_span_id;        // 16 hex; "" = a root span
  std::string name;                  // e.g. "step"
  SpanKind kind = SpanKind::kInternal;
  uint64_t start_ns = 0;             // Unix nanoseconds
  uint64_t end_ns = 0;               // Unix nanoseconds, >= start_ns
  std::vector<Attribute> attributes = {};
  SpanStatus status = SpanStatus::kUnset;
  std::string status_message = {};   // kError: why
  std::vector<SpanContext> links = {};  // spans of other traces this one relates to (a branch's parent run)
};

// The OTLP JSON encoding (ExportTraceServiceRequest) of `spans` under one resource and the
// instrumentation scope `kScopeName`: ids as hex, times as decimal strings, enums as integers.
std::string otlp_traces_json(const Resource& resource, const std::vector<SpanData>& spans);

// ---- Export --------------------------------------------------------------------------------

struct SpanExporterOptions {
  std::string endpoint;                       // the collector's full traces URL, http://HOST:PORT/v1/traces
  std::chrono::milliseconds interval{1000};   // longest a finished span waits before it is posted
  std::chrono::milliseconds timeout{5000};    // connect + read timeout of one post
  size_t max_queue = 4096;                    // spans held at most; more are dropped (counted)
  size_t max_batch = 512;                     // spans per post at most
};

// The traces URL from an operator's value: a full URL ending in /v1/traces is kept, a base URL
// (http://collector:4318) gets "/v1/traces" appended. InvalidArgument: not http://, no host.
Result<std::string> traces_endpoint_url(const std::string& value);

// Batches spans and posts them on a thread of its own. add() never blocks on the network. A
// post that fails drops its batch (counted in spans_dropped(); a warning on stderr when posts
// start failing, a line when they work again). Thread-safe.
class SpanExporter {
 public:
  SpanExporter(Resource resource, SpanExporterOptions options);
  ~SpanExporter();  // flush(), bounded by the options' timeout, then the thread ends
  SpanExporter(const SpanExporter&) = delete;
  SpanExporter& operator=(const SpanExporter&) = delete;

  void add(SpanData span);
  // Posts what is queued now and waits for it, at most `deadline`. Returns whether the queue
  // was emptied in time (the spans were posted or dropped).
  bool flush(std::chrono::milliseconds deadline);

  uint64_t spans_exported() const { return exported_.load(); }
  uint64_t spans_dropped() const { return dropped_.load(); }
  const std::string& endpoint() const { return options_.endpoint; }

 private:
  void loop();
  Status post(const std::vector<SpanData>& batch);

  // Constant after construction.
  const Resource resource_;
  const SpanExporterOptions options_;
  std::atomic<uint64_t> exported_{0};
  std::atomic<uint64_t> dropped_{0};
  bool failing_ = false;  // exporter thread only: the last post failed (a warning was written)

  std::mutex mu_;
  std::condition_variable wake_;     // the thread: work or stop
  std::condition_variable drained_;  // flush(): the queue is empty and nothing is in flight
  std::deque<SpanData> queue_;       // guarded by mu_
  bool in_flight_ = false;           // guarded by mu_: a batch is being posted
  bool flush_requested_ = false;     // guarded by mu_
  bool stopping_ = false;            // guarded by mu_
  std::thread thread_;
};

}  // namespace trainer::telemetry

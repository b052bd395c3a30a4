// Trace context, spans and their OTLP/HTTP JSON export (declared in telemetry/tracing.h).
#include "telemetry/tracing.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <random>

#include "telemetry/otlp_json.h"

namespace trainer::telemetry {
namespace {

using nlohmann::json;

constexpr size_t kTraceIdDigits = 32;
constexpr size_t kSpanIdDigits = 16;
constexpr const char* kTracesPath = "/v1/traces";

bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

std::string random_hex(size_t digits) {
  static std::mutex mu;
  static std::mt19937_64 generator{[] {
    std::random_device device;
    std::seed_seq seed{device(), device(), device(), device(), device(), device(), device(), device()};
    return std::mt19937_64(seed);
  }()};
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(digits, '0');
  std::lock_guard lock(mu);
  do {
    for (size_t i = 0; i < digits; i += 16) {
      uint64_t bits = generator();
      for (size_t j = i; j < std::min(digits, i + 16); ++j, bits >>= 4) out[j] = kDigits[bits & 0xf];
    }
  } while (out.find_first_not_of('0') == std::string::npos);
  return out;
}

using otlp_encoding::key_values;

json span_json(const SpanData& s) {
  json out = {{"traceId", s.trace_id},
              {"spanId", s.span_id},
              {"name", s.name},
              {"kind", static_cast<int>(s.kind)},
              {"startTimeUnixNano", std::to_string(s.start_ns)},
              {"endTimeUnixNano", std::to_string(std::max(s.end_ns, s.start_ns))},
              {"attributes", key_values(s.attributes)}};
  if (!s.parent_span_id.empty()) out["parentSpanId"] = s.parent_span_id;
  json status = {{"code", static_cast<int>(s.status)}};
  if (!s.status_message.empty()) status["message"] = s.status_message;
  out["status"] = std::move(status);
  if (!s.links.empty()) {
    json links = json::array();
    for (const auto& l : s.links) links.push_back({{"traceId", l.trace_id}, {"spanId", l.span_id}});
    out["links"] = std::move(links);
  }
  return out;
}

struct Endpoint {
  std::string scheme_host_port;  // http://host:port
  std::string path;              // /v1/traces
};

Endpoint split(const std::string& url) {
  const size_t slash = url.find('/', std::string_view("http://").size());
  return {url.substr(0, slash), slash == std::string::npos ? kTracesPath : url.substr(slash)};
}

}  // namespace

bool valid_trace_hex(std::string_view id, size_t digits) {
  if (id.size() != digits) return false;
  bool nonzero = false;
  for (char c : id) {
    if (!is_lower_hex(c)) return false;
    nonzero = nonzero || c != '0';
  }
  return nonzero;
}

Result<SpanContext> parse_traceparent(std::string_view text) {
  const std::string shown = "traceparent '" + std::string(text.substr(0, 80)) + "'";
  // version(2) - trace id(32) - parent id(16) - flags(2)
  constexpr size_t kLength = 2 + 1 + kTraceIdDigits + 1 + kSpanIdDigits + 1 + 2;
  if (text.size() != kLength || text[2] != '-' || text[35] != '-' || text[52] != '-') {
    return invalid_argument(shown + " is not 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>");
  }
  if (text.substr(0, 2) != "00") return invalid_argument(shown + ": only version 00 is understood");
  const std::string_view trace_id = text.substr(3, kTraceIdDigits);
  const std::string_view span_id = text.substr(36, kSpanIdDigits);
  const std::string_view flags = text.substr(53, 2);
  if (!valid_trace_hex(trace_id, kTraceIdDigits)) {
    return invalid_argument(shown + ": the trace id must be 32 lowercase hex digits, not all zeros");
  }
  if (!valid_trace_hex(span_id, kSpanIdDigits)) {
    return invalid_argument(shown + ": the parent span id must be 16 lowercase hex digits, not all zeros");
  }
  if (!is_lower_hex(flags[0]) || !is_lower_hex(flags[1])) {
    return invalid_argument(shown + ": the flags must be 2 lowercase hex digits");
  }
  return SpanContext{std::string(trace_id), std::string(span_id)};
}

std::string format_traceparent(const SpanContext& context) {
  return "00-" + context.trace_id + "-" + context.span_id + "-01";
}

std::string random_trace_id() { return random_hex(kTraceIdDigits); }
std::string random_span_id() { return random_hex(kSpanIdDigits); }

uint64_t unix_nanos(std::chrono::system_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  return ns < 0 ? 0 : static_cast<uint64_t>(ns);
}

uint64_t unix_nanos_of_seconds(double seconds) {
  return seconds <= 0 ? 0 : static_cast<uint64_t>(seconds * 1e9);
}

std::string otlp_traces_json(const Resource& resource, const std::vector<SpanData>& spans) {
  json list = json::array();
  for (const auto& s : spans) list.push_back(span_json(s));
  json request = {
      {"resourceSpans",
       json::array({{{"resource", {{"attributes", key_values(resource.attributes.attributes())}}},
                     {"scopeSpans", json::array({{{"scope", {{"name", kScopeName}}}, {"spans", list}}})}}})}};
  return request.dump();
}

Result<std::string> traces_endpoint_url(const std::string& value) {
  const std::string scheme = "http://";
  if (value.rfind(scheme, 0) != 0) {
    return invalid_argument("OTLP traces endpoint '" + value +
                            "' must start with http:// (e.g. http://collector:4318/v1/traces)");
  }
  std::string url = value;
  while (url.size() > scheme.size() && url.back() == '/') url.pop_back();
  const size_t slash = url.find('/', scheme.size());
  if (url.size() == scheme.size() || slash == scheme.size()) {
    return invalid_argument("OTLP traces endpoint '" + value + "' names no host");
  }
  if (slash == std::string::npos) url += kTracesPath;
  return url;
}

SpanExporter::SpanExporter(Resource resource, SpanExporterOptions options)
    : resource_(std::move(resource)), options_(std::move(options)) {
  thread_ = std::thread([this] { loop(); });
}

SpanExporter::~SpanExporter() {
  (void)flush(options_.timeout);
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  std::lock_guard lock(mu_);
  if (!queue_.empty()) dropped_.fetch_add(queue_.size());
  if (dropped_.load() > 0) {
    std::fprintf(stderr, "warning: traces: %llu span(s) were not delivered to %s\n",
                 static_cast<unsigned long long>(dropped_.load()), options_.endpoint.c_str());
  }
}

void SpanExporter::add(SpanData span) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= options_.max_queue) {
      dropped_.fetch_add(1);
      return;
    }
    queue_.push_back(std::move(span));
    if (queue_.size() < options_.max_batch) return;
  }
  wake_.notify_all();
}

bool SpanExporter::flush(std::chrono::milliseconds deadline) {
  std::unique_lock lock(mu_);
  flush_requested_ = true;
  wake_.notify_all();
  return drained_.wait_for(lock, deadline, [this] { return queue_.empty() && !in_flight_; });
}

Status SpanExporter::post(const std::vector<SpanData>& batch) {
  const Endpoint endpoint = split(options_.endpoint);
  httplib::Client client(endpoint.scheme_host_port);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(options_.timeout);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(options_.timeout - seconds);
  client.set_connection_timeout(seconds.count(), micros.count());
  client.set_read_timeout(seconds.count(), micros.count());
  client.set_write_timeout(seconds.count(), micros.count());
  auto response = client.Post(endpoint.path, otlp_traces_json(resource_, batch), "application/json");
  if (!response) {
    return unavailable("posting spans to " + options_.endpoint + " failed: " + httplib::to_string(response.error()));
  }
  if (response->status < 200 || response->status >= 300) {
    return unavailable("posting spans to " + options_.endpoint + " answered HTTP " + std::to_string(response->status) +
                       ": " + response->body.substr(0, 200));
  }
  return Status::ok();
}

void SpanExporter::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait_for(lock, options_.interval, [this] {
      return stopping_ || flush_requested_ || queue_.size() >= options_.max_batch;
    });
    if (stopping_) return;  // what is left is counted as dropped by the destructor
    if (queue_.empty()) {
      flush_requested_ = false;
      drained_.notify_all();
      continue;
    }
    std::vector<SpanData> batch;
    while (!queue_.empty() && batch.size() < options_.max_batch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    in_flight_ = true;
    lock.unlock();
    const Status st = post(batch);
    (st.is_ok() ? exported_ : dropped_).fetch_add(batch.size());
    if (!st.is_ok() && !failing_) {
      std::fprintf(stderr, "warning: traces: %s; %zu span(s) dropped (spans are not retried)\n", st.message().c_str(),
                   batch.size());
    } else if (st.is_ok() && failing_) {
      std::fprintf(stderr, "traces: posting spans to %s works again\n", options_.endpoint.c_str());
    }
    failing_ = !st.is_ok();
    lock.lock();
    in_flight_ = false;
    if (queue_.empty()) {
      flush_requested_ = false;
      drained_.notify_all();
    }
  }
}

}  // namespace trainer::telemetry

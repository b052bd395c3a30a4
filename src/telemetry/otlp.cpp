// OTLP/HTTP JSON export: the ExportMetricsServiceRequest encoding and its push loop.
//
// JSON as the OTLP specification encodes protobuf: 64-bit integers as decimal strings, enums
// as integers, field names in lowerCamelCase.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "telemetry/otlp_json.h"
#include "telemetry/telemetry.h"

namespace trainer::telemetry {
namespace {

using nlohmann::json;

constexpr int kAggregationTemporalityCumulative = 2;

using otlp_encoding::number;

json key_values(const AttributeSet& attributes) { return otlp_encoding::key_values(attributes.attributes()); }

json counts(const std::vector<uint64_t>& values) {
  json out = json::array();
  for (uint64_t v : values) out.push_back(std::to_string(v));
  return out;
}

json point_base(const PointData& point) {
  return {{"attributes", key_values(point.attributes)},
          {"startTimeUnixNano", std::to_string(point.start_time_ns)},
          {"timeUnixNano", std::to_string(point.time_ns)}};
}

json number_point(const PointData& point, ValueType type) {
  json out = point_base(point);
  if (type == ValueType::kInt) {
    out["asInt"] = std::to_string(static_cast<int64_t>(point.value));
  } else {
    out["asDouble"] = number(point.value);
  }
  return out;
}

void add_min_max(json& out, const PointData& point) {
  if (point.count == 0) return;
  out["min"] = number(point.min);
  out["max"] = number(point.max);
}

json metric_json(const MetricData& metric) {
  const auto& d = metric.descriptor;
  json out = {{"name", d.name}, {"description", d.description}, {"unit", d.unit}};
  json points = json::array();
  switch (d.kind) {
    case InstrumentKind::kCounter:
      for (const auto& p : metric.points) points.push_back(number_point(p, d.value_type));
      out["sum"] = {{"dataPoints", points},
                    {"aggregationTemporality", kAggregationTemporalityCumulative},
                    {"isMonotonic", true}};
      break;
    case InstrumentKind::kGauge:
      for (const auto& p : metric.points) points.push_back(number_point(p, d.value_type));
      out["gauge"] = {{"dataPoints", points}};
      break;
    case InstrumentKind::kHistogram:
      for (const auto& p : metric.points) {
        json point = point_base(p);
        point["count"] = std::to_string(p.count);
        point["sum"] = number(p.sum);
        point["bucketCounts"] = counts(p.bucket_counts);
        point["explicitBounds"] = p.bounds;
        add_min_max(point, p);
        points.push_back(std::move(point));
      }
      out["histogram"] = {{"dataPoints", points}, {"aggregationTemporality", kAggregationTemporalityCumulative}};
      break;
    case InstrumentKind::kExponentialHistogram:
      for (const auto& p : metric.points) {
        const auto& e = p.exponential;
        json point = point_base(p);
        point["count"] = std::to_string(p.count);
        point["sum"] = number(p.sum);
        point["scale"] = e.scale;
        point["zeroCount"] = std::to_string(e.zero_count);
        point["positive"] = {{"offset", e.positive.offset}, {"bucketCounts", counts(e.positive.counts)}};
        point["negative"] = {{"offset", e.negative.offset}, {"bucketCounts", counts(e.negative.counts)}};
        add_min_max(point, p);
        points.push_back(std::move(point));
      }
      out["exponentialHistogram"] = {{"dataPoints", points},
                                     {"aggregationTemporality", kAggregationTemporalityCumulative}};
      break;
  }
  return out;
}

struct Endpoint {
  std::string scheme_host_port;  // http://host:port
  std::string path;
};

Result<Endpoint> parse_endpoint(const std::string& url) {
  const std::string scheme = url.rfind("https://", 0) == 0 ? "https://" : "http://";
  if (url.rfind(scheme, 0) != 0) {
    return invalid_argument("OTLP endpoint '" + url +
                            "' must start with http:// or https:// (e.g. http://collector:4318/v1/metrics)");
  }
  const auto slash = url.find('/', scheme.size());
  Endpoint endpoint;
  endpoint.scheme_host_port = url.substr(0, slash);
  endpoint.path = slash == std::string::npos ? "/v1/metrics" : url.substr(slash);
  if (endpoint.scheme_host_port.size() == scheme.size()) {
    return invalid_argument("OTLP endpoint '" + url + "' names no host");
  }
  return endpoint;
}

}  // namespace

std::string otlp_json(const MetricsSnapshot& snapshot) {
  json scope = {{"name", snapshot.scope_name}};
  if (!snapshot.scope_version.empty()) scope["version"] = snapshot.scope_version;
  json metrics = json::array();
  for (const auto& metric : snapshot.metrics) metrics.push_back(metric_json(metric));
  json request = {
      {"resourceMetrics",
       json::array({{{"resource", {{"attributes", key_values(snapshot.resource.attributes)}}},
                     {"scopeMetrics", json::array({{{"scope", scope}, {"metrics", metrics}}})}}})}};
  return request.dump();
}

namespace {

Result<std::chrono::milliseconds> milliseconds_variable(const char* name, const char* text,
                                                       std::chrono::milliseconds fallback) {
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value <= 0) {
    return invalid_argument(std::string(name) + "='" + text + "' is not a positive number of milliseconds");
  }
  return std::chrono::milliseconds(value);
}

}  // namespace

Result<std::optional<OtlpOptions>> otlp_options_from_environment(
    const std::function<const char*(const char*)>& getenv) {
  auto value = [&](const char* name) -> std::string {
    const char* text = getenv(name);
    return text == nullptr ? "" : text;
  };
  OtlpOptions options;
  const std::string metrics_endpoint = value("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
  std::string base = value("OTEL_EXPORTER_OTLP_ENDPOINT");
  if (!metrics_endpoint.empty()) {
    options.endpoint = metrics_endpoint;
  } else if (!base.empty()) {
    while (!base.empty() && base.back() == '/') base.pop_back();
    options.endpoint = base + "/v1/metrics";
  } else {
    return std::optional<OtlpOptions>();
  }
  auto endpoint = parse_endpoint(options.endpoint);
  if (!endpoint.is_ok()) return endpoint.status();
  auto interval = milliseconds_variable("OTEL_METRIC_EXPORT_INTERVAL", getenv("OTEL_METRIC_EXPORT_INTERVAL"),
                                        std::chrono::milliseconds(60000));
  if (!interval.is_ok()) return interval.status();
  options.interval = interval.value();
  auto timeout = milliseconds_variable("OTEL_EXPORTER_OTLP_TIMEOUT", getenv("OTEL_EXPORTER_OTLP_TIMEOUT"),
                                       std::chrono::milliseconds(10000));
  if (!timeout.is_ok()) return timeout.status();
  options.timeout = timeout.value();
  const std::string headers = value("OTEL_EXPORTER_OTLP_HEADERS");
  size_t start = 0;
  while (start < headers.size()) {
    size_t end = headers.find(',', start);
    if (end == std::string::npos) end = headers.size();
    const std::string pair = headers.substr(start, end - start);
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return invalid_argument("OTEL_EXPORTER_OTLP_HEADERS: '" + pair + "' is not name=value");
    }
    options.headers.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
    start = end + 1;
  }
  return std::optional<OtlpOptions>(std::move(options));
}

Status otlp_push(const MetricsSnapshot& snapshot, const OtlpOptions& options) {
  auto endpoint = parse_endpoint(options.endpoint);
  if (!endpoint.is_ok()) return endpoint.status();
  httplib::Client client(endpoint.value().scheme_host_port);
  if (!options.ca_file.empty()) client.set_ca_cert_path(options.ca_file.c_str());
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(options.timeout);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(options.timeout - seconds);
  client.set_connection_timeout(seconds.count(), micros.count());
  client.set_read_timeout(seconds.count(), micros.count());
  client.set_write_timeout(seconds.count(), micros.count());
  httplib::Headers headers;
  for (const auto& [name, value] : options.headers) headers.emplace(name, value);
  auto response = client.Post(endpoint.value().path, headers, otlp_json(snapshot), "application/json");
  if (!response) {
    return unavailable("OTLP push to " + options.endpoint + " failed: " + httplib::to_string(response.error()));
  }
  if (response->status < 200 || response->status >= 300) {
    return unavailable("OTLP push to " + options.endpoint + " answered HTTP " + std::to_string(response->status) +
                       ": " + response->body.substr(0, 200));
  }
  return Status::ok();
}

OtlpPusher::OtlpPusher(const MeterProvider& provider, OtlpOptions options)
    : provider_(provider), options_(std::move(options)) {
  thread_ = std::thread([this] { loop(); });
}

OtlpPusher::~OtlpPusher() { stop(); }

Status OtlpPusher::push_now() {
  std::lock_guard push_lock(push_mu_);
  Status status = otlp_push(provider_.collect(), options_);
  (status.is_ok() ? ok_ : failed_).fetch_add(1);
  // Degraded mode: warn when pushes start failing and when they recover, not at every push.
  const bool failing = !status.is_ok();
  if (failing_.exchange(failing) != failing) {
    if (failing) {
      std::fprintf(stderr, "warning: telemetry: %s; retrying every %lld ms\n", status.message().c_str(),
                   static_cast<long long>(options_.interval.count()));
    } else {
      std::fprintf(stderr, "telemetry: OTLP push to %s works again\n", options_.endpoint.c_str());
    }
  }
  return status;
}

void OtlpPusher::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  Status last = push_now();
  const auto deadline = std::chrono::steady_clock::now() + options_.final_push_deadline;
  std::chrono::milliseconds backoff{250};
  while (!last.is_ok() && std::chrono::steady_clock::now() + backoff <= deadline) {
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    last = push_now();
  }
  if (!last.is_ok() && options_.final_push_deadline.count() > 0) {
    std::fprintf(stderr, "warning: telemetry: the last metrics were not delivered to %s within %lld s: %s\n",
                 options_.endpoint.c_str(), static_cast<long long>(options_.final_push_deadline.count() / 1000),
                 last.message().c_str());
  }
}

void OtlpPusher::request_push() {
  {
    std::lock_guard lock(mu_);
    push_requested_ = true;
  }
  wake_.notify_all();
}

void OtlpPusher::loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, options_.interval, [this] { return stopping_ || push_requested_; });
    if (stopping_) break;
    push_requested_ = false;
    lock.unlock();
    (void)push_now();
    lock.lock();
  }
}

}  // namespace trainer::telemetry

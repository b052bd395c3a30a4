#include "telemetry/relay.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/json_parse.h"

namespace trainer::telemetry {
namespace {

using nlohmann::json;

constexpr const char* kRunId = "akka.optimize.training.run.id";
constexpr const char* kRunAttempt = "akka.optimize.training.run.attempt";
constexpr int kCumulative = 2;

std::string at(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }
std::string at(const std::string& path, size_t index) { return path + "[" + std::to_string(index) + "]"; }

// The array at `key` of `parent`; an absent key is an empty array.
Result<const json*> array_at(const json& parent, const char* key, const std::string& path) {
  static const json kEmpty = json::array();
  auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return &kEmpty;
  if (!it->is_array()) return invalid_field(at(path, key), "must be an array");
  return &*it;
}

Result<const json*> object_at(const json& parent, const char* key, const std::string& path) {
  auto it = parent.find(key);
  if (it == parent.end() || !it->is_object()) return invalid_field(at(path, key), "must be an object");
  return &*it;
}

// Protobuf's JSON mapping: 64-bit integers as decimal strings (numbers accepted too).
Result<uint64_t> unsigned_value(const json& v, const std::string& path) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(s.c_str(), &end, 10);
    if (!s.empty() && s[0] != '-' && *end == '\0' && errno == 0) return static_cast<uint64_t>(n);
  }
  return invalid_field(path, "must be a non-negative integer (a decimal string or a number)");
}

Result<int64_t> signed_value(const json& v, const std::string& path) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0' && errno == 0) return static_cast<int64_t>(n);
  }
  return invalid_field(path, "must be an integer (a decimal string or a number)");
}

// Protobuf's JSON mapping writes non-finite doubles as "NaN", "Infinity", "-Infinity".
Result<double> double_value(const json& v, const std::string& path) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  return invalid_field(path, "must be a number");
}

Result<std::vector<uint64_t>> counts_at(const json& parent, const char* key, const std::string& path) {
  TRAINER_ASSIGN_OR_RETURN(const json* list, array_at(parent, key, path));
  std::vector<uint64_t> out;
  out.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    TRAINER_ASSIGN_OR_RETURN(uint64_t n, unsigned_value((*list)[i], at(at(path, key), i)));
    out.push_back(n);
  }
  return out;
}

Result<AttributeSet> attributes_at(const json& parent, const std::string& path) {
  TRAINER_ASSIGN_OR_RETURN(const json* list, array_at(parent, "attributes", path));
  std::vector<Attribute> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string here = at(at(path, "attributes"), i);
    const json& kv = (*list)[i];
    if (!kv.is_object() || !kv.contains("key") || !kv["key"].is_string()) {
      return invalid_field(here, "must be an object with a string key");
    }
    TRAINER_ASSIGN_OR_RETURN(const json* value, object_at(kv, "value", here));
    const std::string vpath = at(here, "value");
    if (auto s = value->find("stringValue"); s != value->end() && s->is_string()) {
      out.push_back({kv["key"], s->get<std::string>()});
    } else if (auto b = value->find("boolValue"); b != value->end() && b->is_boolean()) {
      out.push_back({kv["key"], b->get<bool>()});
    } else if (auto n = value->find("intValue"); n != value->end()) {
      TRAINER_ASSIGN_OR_RETURN(int64_t v, signed_value(*n, at(vpath, "intValue")));
      out.push_back({kv["key"], v});
    } else if (auto d = value->find("doubleValue"); d != value->end()) {
      TRAINER_ASSIGN_OR_RETURN(double v, double_value(*d, at(vpath, "doubleValue")));
      out.push_back({kv["key"], v});
    } else {
      return invalid_field(vpath, "must hold a stringValue, boolValue, intValue or doubleValue");
    }
  }
  return AttributeSet(std::move(out));
}

Status common_point(const json& p, const std::string& path, PointData* out) {
  TRAINER_ASSIGN_OR_RETURN(out->attributes, attributes_at(p, path));
  if (auto t = p.find("startTimeUnixNano"); t != p.end()) {
    TRAINER_ASSIGN_OR_RETURN(out->start_time_ns, unsigned_value(*t, at(path, "startTimeUnixNano")));
  }
  if (auto t = p.find("timeUnixNano"); t != p.end()) {
    TRAINER_ASSIGN_OR_RETURN(out->time_ns, unsigned_value(*t, at(path, "timeUnixNano")));
  }
  return Status::ok();
}

Status histogram_summary(const json& p, const std::string& path, PointData* out) {
  if (auto c = p.find("count"); c != p.end()) {
    TRAINER_ASSIGN_OR_RETURN(out->count, unsigned_value(*c, at(path, "count")));
  }
  if (auto s = p.find("sum"); s != p.end()) {
    TRAINER_ASSIGN_OR_RETURN(out->sum, double_value(*s, at(path, "sum")));
  }
  if (auto m = p.find("min"); m != p.end()) {
    TRAINER_ASSIGN_OR_RETURN(out->min, double_value(*m, at(path, "min")));
  }
  if (auto m = p.find("max"); m != p.end()) {
    TRAINER_ASSIGN_OR_RETURN(out->max, double_value(*m, at(path, "max")));
  }
  return Status::ok();
}

Status cumulative(const json& data, const std::string& path) {
  auto t = data.find("aggregationTemporality");
  if (t != data.end() && !(t->is_number_integer() && t->get<int>() == kCumulative)) {
    return invalid_field(at(path, "aggregationTemporality"), "must be 2 (cumulative): the relay keeps the latest value");
  }
  return Status::ok();
}

struct ParsedMetric {
  InstrumentDescriptor descriptor;
  std::vector<PointData> points;
};

struct ParsedJob {
  std::string run_id, attempt;
  AttributeSet labels;
  std::vector<ParsedMetric> metrics;
};

Result<ParsedMetric> parse_metric(const json& m, const std::string& path) {
  if (!m.is_object() || !m.contains("name") || !m["name"].is_string() || m["name"].get_ref<const std::string&>().empty()) {
    return invalid_field(at(path, "name"), "required: the metric's name");
  }
  ParsedMetric out;
  InstrumentDescriptor& d = out.descriptor;
  d.name = m["name"];
  if (auto v = m.find("description"); v != m.end() && v->is_string()) d.description = *v;
  if (auto v = m.find("unit"); v != m.end() && v->is_string()) d.unit = *v;
  const char* kind = nullptr;
  for (const char* k : {"gauge", "sum", "histogram", "exponentialHistogram"}) {
    if (m.contains(k)) kind = k;
  }
  if (kind == nullptr) return invalid_field(path, "holds no gauge, sum, histogram or exponentialHistogram");
  TRAINER_ASSIGN_OR_RETURN(const json* data, object_at(m, kind, path));
  const std::string dpath = at(path, kind);
  TRAINER_ASSIGN_OR_RETURN(const json* points, array_at(*data, "dataPoints", dpath));
  const std::string kind_name = kind;
  if (kind_name == "gauge") d.kind = InstrumentKind::kGauge;
  if (kind_name == "sum") {
    TRAINER_RETURN_IF_ERROR(cumulative(*data, dpath));
    const auto mono = data->find("isMonotonic");
    d.kind = mono != data->end() && mono->is_boolean() && mono->get<bool>() ? InstrumentKind::kCounter : InstrumentKind::kGauge;
  }
  if (kind_name == "histogram") {
    TRAINER_RETURN_IF_ERROR(cumulative(*data, dpath));
    d.kind = InstrumentKind::kHistogram;
  }
  if (kind_name == "exponentialHistogram") {
    TRAINER_RETURN_IF_ERROR(cumulative(*data, dpath));
    d.kind = InstrumentKind::kExponentialHistogram;
  }
  for (size_t i = 0; i < points->size(); ++i) {
    const std::string ppath = at(at(dpath, "dataPoints"), i);
    const json& p = (*points)[i];
    if (!p.is_object()) return invalid_field(ppath, "must be an object");
    PointData point;
    TRAINER_RETURN_IF_ERROR(common_point(p, ppath, &point));
    if (d.kind == InstrumentKind::kGauge || d.kind == InstrumentKind::kCounter) {
      if (auto v = p.find("asInt"); v != p.end()) {
        TRAINER_ASSIGN_OR_RETURN(int64_t n, signed_value(*v, at(ppath, "asInt")));
        point.value = static_cast<double>(n);
        d.value_type = ValueType::kInt;
      } else if (auto v = p.find("asDouble"); v != p.end()) {
        TRAINER_ASSIGN_OR_RETURN(point.value, double_value(*v, at(ppath, "asDouble")));
        d.value_type = ValueType::kDouble;
      } else {
        return invalid_field(ppath, "holds neither asInt nor asDouble");
      }
    } else if (d.kind == InstrumentKind::kHistogram) {
      TRAINER_RETURN_IF_ERROR(histogram_summary(p, ppath, &point));
      TRAINER_ASSIGN_OR_RETURN(point.bucket_counts, counts_at(p, "bucketCounts", ppath));
      TRAINER_ASSIGN_OR_RETURN(const json* bounds, array_at(p, "explicitBounds", ppath));
      for (size_t b = 0; b < bounds->size(); ++b) {
        TRAINER_ASSIGN_OR_RETURN(double bound, double_value((*bounds)[b], at(at(ppath, "explicitBounds"), b)));
        point.bounds.push_back(bound);
      }
      if (point.bucket_counts.size() != point.bounds.size() + 1) {
        return invalid_field(at(ppath, "bucketCounts"), "must hold one count more than explicitBounds has bounds");
      }
      d.buckets = point.bounds;
    } else {
      TRAINER_RETURN_IF_ERROR(histogram_summary(p, ppath, &point));
      ExponentialHistogramData& e = point.exponential;
      if (auto s = p.find("scale"); s != p.end()) {
        TRAINER_ASSIGN_OR_RETURN(int64_t scale, signed_value(*s, at(ppath, "scale")));
        if (scale < ExponentialHistogram::kMinScale || scale > ExponentialHistogram::kMaxScale) {
          return invalid_field(at(ppath, "scale"), "must be between -10 and 20");
        }
        e.scale = static_cast<int32_t>(scale);
      }
      if (auto z = p.find("zeroCount"); z != p.end()) {
        TRAINER_ASSIGN_OR_RETURN(e.zero_count, unsigned_value(*z, at(ppath, "zeroCount")));
      }
      for (auto [key, side] : {std::pair<const char*, ExponentialBuckets*>{"positive", &e.positive},
                               std::pair<const char*, ExponentialBuckets*>{"negative", &e.negative}}) {
        auto it = p.find(key);
        if (it == p.end() || it->is_null()) continue;
        if (!it->is_object()) return invalid_field(at(ppath, key), "must be an object");
        const std::string bpath = at(ppath, key);
        if (auto o = it->find("offset"); o != it->end()) {
          TRAINER_ASSIGN_OR_RETURN(int64_t offset, signed_value(*o, at(bpath, "offset")));
          if (offset < std::numeric_limits<int32_t>::min() / 2 || offset > std::numeric_limits<int32_t>::max() / 2) {
            return invalid_field(at(bpath, "offset"), "out of range");
          }
          side->offset = static_cast<int32_t>(offset);
        }
        TRAINER_ASSIGN_OR_RETURN(side->counts, counts_at(*it, "bucketCounts", bpath));
      }
      e.count = point.count;
      e.sum = point.sum;
      e.min = point.min;
      e.max = point.max;
    }
    out.points.push_back(std::move(point));
  }
  return out;
}

Result<std::vector<ParsedJob>> parse_request(const json& body) {
  if (!body.is_object()) return invalid_argument("body: must be an ExportMetricsServiceRequest object");
  TRAINER_ASSIGN_OR_RETURN(const json* resources, array_at(body, "resourceMetrics", ""));
  std::vector<ParsedJob> jobs;
  for (size_t r = 0; r < resources->size(); ++r) {
    const std::string rpath = at(std::string("resourceMetrics"), r);
    const json& rm = (*resources)[r];
    if (!rm.is_object()) return invalid_field(rpath, "must be an object");
    ParsedJob job;
    AttributeSet resource;
    if (auto res = rm.find("resource"); res != rm.end() && res->is_object()) {
      TRAINER_ASSIGN_OR_RETURN(resource, attributes_at(*res, at(rpath, "resource")));
    }
    std::vector<Attribute> labels;
    for (const auto& a : resource.attributes()) {
      if (a.key == kRunId) job.run_id = attribute_value_text(a.value);
      if (a.key == kRunAttempt) job.attempt = attribute_value_text(a.value);
      if (a.key.rfind("service.", 0) != 0) labels.push_back(a);
    }
    if (job.run_id.empty()) {
      return invalid_field(at(rpath, "resource"), std::string("names no ") + kRunId + ": the relay keeps a job's series by its run");
    }
    job.labels = AttributeSet(std::move(labels));
    TRAINER_ASSIGN_OR_RETURN(const json* scopes, array_at(rm, "scopeMetrics", rpath));
    for (size_t s = 0; s < scopes->size(); ++s) {
      const std::string spath = at(at(rpath, "scopeMetrics"), s);
      if (!(*scopes)[s].is_object()) return invalid_field(spath, "must be an object");
      TRAINER_ASSIGN_OR_RETURN(const json* metrics, array_at((*scopes)[s], "metrics", spath));
      for (size_t m = 0; m < metrics->size(); ++m) {
        TRAINER_ASSIGN_OR_RETURN(ParsedMetric metric, parse_metric((*metrics)[m], at(at(spath, "metrics"), m)));
        job.metrics.push_back(std::move(metric));
      }
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

// The point's attributes over the job's labels (the point's win where a key is in both).
AttributeSet merged(const AttributeSet& job, const AttributeSet& point) {
  std::vector<Attribute> all = job.attributes();
  all.insert(all.end(), point.attributes().begin(), point.attributes().end());
  return AttributeSet(std::move(all));  // of a repeated key the last wins
}

}  // namespace

TelemetryRelay::TelemetryRelay(RelayOptions options) : options_(options) {}

std::string TelemetryRelay::job_key(std::string_view run_id, std::string_view attempt) {
  std::string key(run_id);
  key += '\x1f';
  key += attempt;
  return key;
}

Status TelemetryRelay::ingest(std::string_view body, double now, std::string_view only_run) {
  if (body.size() > options_.max_body_bytes) {
    return resource_exhausted("OTLP body of " + std::to_string(body.size()) + " bytes: more than the relay's " +
                              std::to_string(options_.max_body_bytes));
  }
  TRAINER_ASSIGN_OR_RETURN(json parsed, parse_json(body, "OTLP body", options_.max_depth));
  TRAINER_ASSIGN_OR_RETURN(std::vector<ParsedJob> jobs, parse_request(parsed));
  if (!only_run.empty()) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].run_id == only_run) continue;
      return Status(StatusCode::kPermissionDenied, "resourceMetrics[" + std::to_string(i) + "].resource",
                    std::string("names ") + kRunId + " " + jobs[i].run_id + ": this job pushes the metrics of " +
                        std::string(only_run) + " only");
    }
  }

  // A push is its job's whole state (cumulative temporality: every series the job holds now),
  // so it replaces what the relay held of that job: a series the job withdrew (the worker series
  // of a job that ended) leaves /metrics with the job's next push instead of staying at its last
  // value. Several resources of one job in one body add up.
  std::map<std::string, Job> incoming;
  for (auto& job : jobs) {
    Job& held = incoming[job_key(job.run_id, job.attempt)];
    held.labels = job.labels;
    for (auto& metric : job.metrics) {
      Metric& m = held.metrics[metric.descriptor.name];
      if (m.descriptor.kind != metric.descriptor.kind && !m.points.empty()) m.points.clear();  // another kind wins
      m.descriptor = metric.descriptor;
      for (auto& point : metric.points) m.points.insert_or_assign(point.attributes.key(), std::move(point));
    }
  }
  std::lock_guard lock(mu_);
  // Count the series after this body before changing anything.
  size_t after = series_;
  for (auto& [key, job] : incoming) {
    for (const auto& [name, metric] : job.metrics) job.series += metric.points.size();
    auto existing = jobs_.find(key);
    after = after - (existing == jobs_.end() ? 0 : existing->second.series) + job.series;
  }
  if (after > options_.max_series) {
    return resource_exhausted("OTLP body brings the relay to " + std::to_string(after) + " series; it holds at most " +
                              std::to_string(options_.max_series));
  }
  for (auto& [key, job] : incoming) {
    Job& held = jobs_[key];
    job.ended_at = held.ended_at;  // the run's end, as the service said it, outlives the push
    job.last_push = now;
    held = std::move(job);
  }
  series_ = after;
  return Status::ok();
}

void TelemetryRelay::run_ended(std::string_view run_id, int64_t attempt, double now) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job_key(run_id, std::to_string(attempt)));
  if (it != jobs_.end() && it->second.ended_at < 0) it->second.ended_at = now;
}

bool TelemetryRelay::holds(std::string_view run_id, int64_t attempt) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job_key(run_id, std::to_string(attempt)));
  return it != jobs_.end() && it->second.series > 0;
}

void TelemetryRelay::expire_locked(double now) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const Job& job = it->second;
    const bool stale = now - job.last_push >= options_.retention_seconds;
    const bool over = job.ended_at >= 0 && now - job.ended_at >= options_.after_end_seconds;
    if (stale || over) {
      series_ -= job.series;
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

void TelemetryRelay::expire(double now) {
  std::lock_guard lock(mu_);
  expire_locked(now);
}

std::string TelemetryRelay::render_prometheus(double now) {
  MetricsSnapshot snapshot;  // no resource: each series carries its job's labels instead
  {
    std::lock_guard lock(mu_);
    expire_locked(now);
    std::map<std::string, size_t> index;  // metric name -> position in snapshot.metrics
    for (const auto& [key, job] : jobs_) {
      for (const auto& [name, metric] : job.metrics) {
        auto [it, inserted] = index.try_emplace(name, snapshot.metrics.size());
        if (inserted) snapshot.metrics.push_back(MetricData{metric.descriptor, {}});
        MetricData& out = snapshot.metrics[it->second];
        if (out.descriptor.kind != metric.descriptor.kind) continue;  // two jobs disagree: the first kind shows
        for (const auto& [attributes, point] : metric.points) {
          PointData labelled = point;
          labelled.attributes = merged(job.labels, point.attributes);
          out.points.push_back(std::move(labelled));
        }
      }
    }
  }
  return prometheus_text(snapshot);
}

size_t TelemetryRelay::series_count() const {
  std::lock_guard lock(mu_);
  return series_;
}

}  // namespace trainer::telemetry

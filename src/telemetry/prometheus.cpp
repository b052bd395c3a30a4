// Prometheus text exposition (format 0.0.4) and OpenTelemetry -> Prometheus name translation.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <cmath>
#include <map>
#include <regex>

#include "telemetry/telemetry.h"

namespace trainer::telemetry {
namespace {

std::string sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':';
    const char mapped = ok ? c : '_';
    if (mapped == '_' && !out.empty() && out.back() == '_') continue;  // collapse runs of '_'
    out += mapped;
  }
  if (!out.empty() && out[0] >= '0' && out[0] <= '9') out.insert(out.begin(), '_');
  return out;
}

std::string unit_word(const std::string& unit) {
  static const std::map<std::string, std::string> kWords = {
      {"s", "seconds"},      {"ms", "milliseconds"}, {"us", "microseconds"}, {"ns", "nanoseconds"},
      {"min", "minutes"},    {"h", "hours"},         {"d", "days"},          {"By", "bytes"},
      {"KiBy", "kibibytes"}, {"MiBy", "mebibytes"},  {"GiBy", "gibibytes"},  {"Hz", "hertz"},
      {"W", "watts"},        {"J", "joules"},        {"Cel", "celsius"},     {"%", "percent"},
      {"m", "meters"},       {"V", "volts"}};
  auto it = kWords.find(unit);
  return it == kWords.end() ? unit : it->second;
}

std::string per_word(const std::string& unit) {
  static const std::map<std::string, std::string> kWords = {
      {"s", "second"}, {"min", "minute"}, {"h", "hour"}, {"d", "day"}, {"ms", "millisecond"}};
  auto it = kWords.find(unit);
  return it == kWords.end() ? unit : it->second;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

std::string escape_label(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_help(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// Prometheus labels of an attribute set. Two OpenTelemetry keys may map to one Prometheus
// label: their values are joined with ';'.
std::map<std::string, std::string> label_map(const AttributeSet& attributes) {
  std::map<std::string, std::string> merged;
  for (const auto& attribute : attributes.attributes()) {
    std::string name = sanitize(attribute.key);
    std::string value = attribute_value_text(attribute.value);
    auto [it, inserted] = merged.try_emplace(name, value);
    if (!inserted) it->second += ";" + value;
  }
  return merged;
}

// {a="x",b="y"} with an optional extra label (le); "" when there are no labels.
std::string labels(const AttributeSet& attributes, const std::string& extra_name = "",
                   const std::string& extra_value = "") {
  std::map<std::string, std::string> merged = label_map(attributes);
  if (!extra_name.empty()) merged[extra_name] = extra_value;
  if (merged.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [name, value] : merged) {
    if (!first) out += ',';
    first = false;
    out += name + "=\"" + escape_label(value) + "\"";
  }
  out += '}';
  return out;
}

struct Bucket {
  double upper;
  uint64_t count;
};

// Exponential histograms are exposed at this scale or coarser: buckets 2^(1/8), 9% wide, as
// Prometheus's own native histograms default to (schema 3). A fixed scale keeps the set of
// `le` values stable while the series' own scale moves, so rate() over buckets stays sound.
constexpr int32_t kPrometheusMaxScale = 3;

ExponentialBuckets coarsen(const ExponentialBuckets& buckets, int32_t shift) {
  if (shift <= 0 || buckets.counts.empty()) return buckets;
  ExponentialBuckets out;
  out.offset = buckets.offset >> shift;
  const int32_t last = (buckets.offset + static_cast<int32_t>(buckets.counts.size()) - 1) >> shift;
  out.counts.assign(static_cast<size_t>(last - out.offset + 1), 0);
  for (size_t i = 0; i < buckets.counts.size(); ++i) {
    out.counts[static_cast<size_t>(((buckets.offset + static_cast<int32_t>(i)) >> shift) - out.offset)] +=
        buckets.counts[i];
  }
  return out;
}

// Classic buckets of an exponential histogram: negative buckets (most negative first), zero,
// positive buckets; each `le` is the bucket's upper boundary.
std::vector<Bucket> classic_buckets(const ExponentialHistogramData& exact) {
  ExponentialHistogramData data;
  const int32_t shift = exact.scale - kPrometheusMaxScale;
  data.scale = shift > 0 ? kPrometheusMaxScale : exact.scale;
  data.zero_count = exact.zero_count;
  data.positive = coarsen(exact.positive, shift);
  data.negative = coarsen(exact.negative, shift);
  std::vector<Bucket> buckets;
  const auto& negative = data.negative;
  for (size_t i = negative.counts.size(); i-- > 0;) {
    const int32_t index = negative.offset + static_cast<int32_t>(i);
    // |v| in (base^index, base^(index+1)]: v in [-base^(index+1), -base^index).
    buckets.push_back({-exponential_lower_boundary(index, data.scale), negative.counts[i]});
  }
  if (data.zero_count > 0 || !negative.counts.empty()) buckets.push_back({0.0, data.zero_count});
  const auto& positive = data.positive;
  for (size_t i = 0; i < positive.counts.size(); ++i) {
    const int32_t index = positive.offset + static_cast<int32_t>(i);
    buckets.push_back({exponential_lower_boundary(index + 1, data.scale), positive.counts[i]});
  }
  return buckets;
}

void write_histogram(std::string& out, const std::string& name, const PointData& point,
                     const std::vector<Bucket>& buckets) {
  uint64_t cumulative = 0;
  for (const auto& bucket : buckets) {
    cumulative += bucket.count;
    out += name + "_bucket" + labels(point.attributes, "le", number(bucket.upper)) + " " +
           std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket" + labels(point.attributes, "le", "+Inf") + " " + std::to_string(point.count) + "\n";
  out += name + "_sum" + labels(point.attributes) + " " + number(point.sum) + "\n";
  out += name + "_count" + labels(point.attributes) + " " + std::to_string(point.count) + "\n";
}

// ---- protobuf (io.prometheus.client.MetricFamily, length-delimited) ----------------------

// A minimal protobuf writer: the few wire types metrics.proto needs.
class ProtoWriter {
 public:
  void varint(uint64_t value) {
    while (value >= 0x80) {
      out_ += static_cast<char>((value & 0x7f) | 0x80);
      value >>= 7;
    }
    out_ += static_cast<char>(value);
  }
  void tag(int field, int wire_type) { varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type)); }
  void uint64_field(int field, uint64_t value) {
    tag(field, 0);
    varint(value);
  }
  void sint_field(int field, int64_t value) {
    tag(field, 0);
    varint(zigzag(value));
  }
  void double_field(int field, double value) {
    tag(field, 1);
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    for (int i = 0; i < 8; ++i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  void bytes_field(int field, std::string_view bytes) {
    tag(field, 2);
    varint(bytes.size());
    out_ += bytes;
  }
  static uint64_t zigzag(int64_t value) {
    return (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

// metrics.proto field numbers.
enum MetricType { kProtoCounter = 0, kProtoGauge = 1, kProtoHistogram = 4 };
constexpr int32_t kNativeMaxSchema = 8;
constexpr int32_t kNativeMinSchema = -4;

void write_labels(ProtoWriter& metric, const AttributeSet& attributes) {
  for (const auto& [name, value] : label_map(attributes)) {
    ProtoWriter pair;
    pair.bytes_field(1, name);
    pair.bytes_field(2, value);
    metric.bytes_field(1, pair.str());
  }
}

// One span covering every bucket, zeros included; counts as deltas. Prometheus's bucket i at
// schema s covers (base^(i-1), base^i]: OpenTelemetry's index + 1.
void write_native_buckets(ProtoWriter& histogram, const ExponentialBuckets& buckets, int span_field,
                          int delta_field) {
  if (buckets.counts.empty()) return;
  ProtoWriter span;
  span.sint_field(1, buckets.offset + 1);
  span.uint64_field(2, buckets.counts.size());
  histogram.bytes_field(span_field, span.str());
  ProtoWriter deltas;
  int64_t previous = 0;
  for (uint64_t count : buckets.counts) {
    deltas.varint(ProtoWriter::zigzag(static_cast<int64_t>(count) - previous));
    previous = static_cast<int64_t>(count);
  }
  histogram.bytes_field(delta_field, deltas.str());
}

std::string classic_histogram_proto(const PointData& point, const std::vector<Bucket>& buckets) {
  ProtoWriter histogram;
  histogram.uint64_field(1, point.count);
  histogram.double_field(2, point.sum);
  uint64_t cumulative = 0;
  for (const auto& bucket : buckets) {
    cumulative += bucket.count;
    ProtoWriter b;
    b.uint64_field(1, cumulative);
    b.double_field(2, bucket.upper);
    histogram.bytes_field(3, b.str());
  }
  return histogram.str();
}

std::string native_histogram_proto(const PointData& point) {
  const ExponentialHistogramData& exact = point.exponential;
  const int32_t shift = std::max(0, exact.scale - kNativeMaxSchema);
  ProtoWriter histogram;
  histogram.uint64_field(1, point.count);
  histogram.double_field(2, point.sum);
  histogram.sint_field(5, exact.scale - shift);
  histogram.double_field(6, 0.0);  // zero_threshold: OpenTelemetry's zero bucket holds exact zeros
  histogram.uint64_field(7, exact.zero_count);
  write_native_buckets(histogram, coarsen(exact.negative, shift), 9, 10);
  write_native_buckets(histogram, coarsen(exact.positive, shift), 12, 13);
  return histogram.str();
}

void write_family(std::string& out, const std::string& name, const std::string& help, MetricType type,
                  const std::vector<std::string>& metrics) {
  ProtoWriter family;
  family.bytes_field(1, name);
  family.bytes_field(2, help);
  family.uint64_field(3, type);
  for (const auto& metric : metrics) family.bytes_field(4, metric);
  ProtoWriter delimited;
  delimited.varint(family.str().size());
  out += delimited.str();
  out += family.str();
}

bool accepts_protobuf(std::string_view accept) {
  return accept.find("application/vnd.google.protobuf") != std::string_view::npos &&
         accept.find("io.prometheus.client.MetricFamily") != std::string_view::npos;
}

}  // namespace

std::string prometheus_protobuf(const MetricsSnapshot& snapshot) {
  std::string out;
  if (!snapshot.resource.attributes.empty()) {
    ProtoWriter metric;
    write_labels(metric, snapshot.resource.attributes);
    ProtoWriter gauge;
    gauge.double_field(1, 1.0);
    metric.bytes_field(2, gauge.str());
    write_family(out, "target_info", "Target metadata", kProtoGauge, {metric.str()});
  }
  for (const auto& data : snapshot.metrics) {
    const auto& d = data.descriptor;
    MetricType type = kProtoGauge;
    if (d.kind == InstrumentKind::kCounter) type = kProtoCounter;
    if (d.kind == InstrumentKind::kHistogram || d.kind == InstrumentKind::kExponentialHistogram) type = kProtoHistogram;
    std::vector<std::string> metrics;
    for (const auto& point : data.points) {
      ProtoWriter metric;
      write_labels(metric, point.attributes);
      switch (d.kind) {
        case InstrumentKind::kCounter:
        case InstrumentKind::kGauge: {
          ProtoWriter value;
          value.double_field(1, point.value);
          metric.bytes_field(d.kind == InstrumentKind::kCounter ? 3 : 2, value.str());
          break;
        }
        case InstrumentKind::kHistogram: {
          std::vector<Bucket> buckets;
          for (size_t i = 0; i < point.bounds.size(); ++i) buckets.push_back({point.bounds[i], point.bucket_counts[i]});
          metric.bytes_field(7, classic_histogram_proto(point, buckets));
          break;
        }
        case InstrumentKind::kExponentialHistogram:
          // Below schema -4 Prometheus has no native form: classic buckets instead.
          metric.bytes_field(7, point.exponential.scale < kNativeMinSchema
                                    ? classic_histogram_proto(point, classic_buckets(point.exponential))
                                    : native_histogram_proto(point));
          break;
      }
      metrics.push_back(metric.str());
    }
    write_family(out, prometheus_name(d), d.description, type, metrics);
  }
  return out;
}

std::string prometheus_name(const InstrumentDescriptor& descriptor) {
  std::string name = sanitize(descriptor.name);
  const std::string unit = std::regex_replace(descriptor.unit, std::regex("\\{[^}]*\\}"), "");
  const auto slash = unit.find('/');
  const std::string main = unit.substr(0, slash);
  const std::string per = slash == std::string::npos ? "" : unit.substr(slash + 1);
  std::vector<std::string> suffixes;
  if (main == "1" && descriptor.kind == InstrumentKind::kGauge && per.empty()) {
    suffixes.push_back("ratio");
  } else if (!main.empty() && main != "1") {
    suffixes.push_back(unit_word(main));
  }
  if (!per.empty()) suffixes.push_back("per_" + per_word(per));
  for (const auto& raw : suffixes) {
    const std::string suffix = sanitize(raw);
    if (!ends_with(name, "_" + suffix)) name += "_" + suffix;
  }
  if (descriptor.kind == InstrumentKind::kCounter && !ends_with(name, "_total")) name += "_total";
  return sanitize(name);
}

std::string prometheus_text(const MetricsSnapshot& snapshot) {
  std::string out;
  if (!snapshot.resource.attributes.empty()) {
    out += "# HELP target_info Target metadata\n# TYPE target_info gauge\n";
    out += "target_info" + labels(snapshot.resource.attributes) + " 1\n";
  }
  for (const auto& metric : snapshot.metrics) {
    const auto& d = metric.descriptor;
    const std::string name = prometheus_name(d);
    const char* type = "gauge";
    if (d.kind == InstrumentKind::kCounter) type = "counter";
    if (d.kind == InstrumentKind::kHistogram || d.kind == InstrumentKind::kExponentialHistogram) type = "histogram";
    out += "# HELP " + name + " " + escape_help(d.description) + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const auto& point : metric.points) {
      switch (d.kind) {
        case InstrumentKind::kCounter:
        case InstrumentKind::kGauge:
          out += name + labels(point.attributes) + " " + number(point.value) + "\n";
          break;
        case InstrumentKind::kHistogram: {
          std::vector<Bucket> buckets;
          for (size_t i = 0; i < point.bounds.size(); ++i) buckets.push_back({point.bounds[i], point.bucket_counts[i]});
          write_histogram(out, name, point, buckets);
          break;
        }
        case InstrumentKind::kExponentialHistogram:
          write_histogram(out, name, point, classic_buckets(point.exponential));
          break;
      }
    }
  }
  return out;
}

Exposition prometheus_exposition(const MeterProvider& provider, std::string_view accept) {
  if (accepts_protobuf(accept)) return {prometheus_protobuf(provider.collect()), kPrometheusProtobufContentType};
  return {prometheus_text(provider.collect()), kPrometheusTextContentType};
}

}  // namespace trainer::telemetry

// Prometheus text exposition (format 0.0.4) and OpenTelemetry -> Prometheus name translation.
#include <charconv>
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

// {a="x",b="y"} with an optional extra label (le) last; "" when there are no labels.
std::string labels(const AttributeSet& attributes, const std::string& extra_name = "",
                   const std::string& extra_value = "") {
  // Two OpenTelemetry keys may map to one Prometheus label: their values are joined with ';'.
  std::map<std::string, std::string> merged;
  for (const auto& attribute : attributes.attributes()) {
    std::string name = sanitize(attribute.key);
    std::string value = attribute_value_text(attribute.value);
    auto [it, inserted] = merged.try_emplace(name, value);
    if (!inserted) it->second += ";" + value;
  }
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

}  // namespace

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

Exposition prometheus_exposition(const MeterProvider& provider) {
  return {prometheus_text(provider.collect()), kPrometheusTextContentType};
}

}  // namespace trainer::telemetry

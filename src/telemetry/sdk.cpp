// The metrics SDK: attribute sets, series, instruments and the provider.
#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>

#include "telemetry/telemetry.h"

namespace trainer::telemetry {
namespace {

uint64_t system_now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

void atomic_min(std::atomic<double>& target, double value) {
  double current = target.load(std::memory_order_relaxed);
  while (value < current && !target.compare_exchange_weak(current, value, std::memory_order_relaxed)) {
  }
}

void atomic_max(std::atomic<double>& target, double value) {
  double current = target.load(std::memory_order_relaxed);
  while (value > current && !target.compare_exchange_weak(current, value, std::memory_order_relaxed)) {
  }
}

// Appends one attribute to a series key: the encoding AttributeSet::key() is made of.
void append_key(std::string& out, std::string_view key, size_t index, std::string_view text) {
  out += key;
  out += '\x1f';
  out += static_cast<char>('0' + index);
  out += text;
  out += '\x1e';
}

void append_key(std::string& out, const AttributeRef& attribute) {
  char buffer[64];
  std::string_view text;
  switch (attribute.value.index()) {
    case 0:
      text = std::get<std::string_view>(attribute.value);
      break;
    case 1:
      text = std::get<bool>(attribute.value) ? "true" : "false";
      break;
    case 2: {
      auto result = std::to_chars(buffer, buffer + sizeof buffer, std::get<int64_t>(attribute.value));
      text = std::string_view(buffer, static_cast<size_t>(result.ptr - buffer));
      break;
    }
    default: {
      auto result = std::to_chars(buffer, buffer + sizeof buffer, std::get<double>(attribute.value));
      text = std::string_view(buffer, static_cast<size_t>(result.ptr - buffer));
      break;
    }
  }
  append_key(out, attribute.key, attribute.value.index(), text);
}

}  // namespace

std::string attribute_value_text(const AttributeValue& value) {
  struct Visitor {
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const {
      char buffer[64];
      auto result = std::to_chars(buffer, buffer + sizeof buffer, d);
      return std::string(buffer, result.ptr);
    }
  };
  return std::visit(Visitor{}, value);
}

AttributeSet::AttributeSet(std::vector<Attribute> attributes) {
  std::stable_sort(attributes.begin(), attributes.end(),
                   [](const Attribute& a, const Attribute& b) { return a.key < b.key; });
  for (auto& attribute : attributes) {
    if (!attributes_.empty() && attributes_.back().key == attribute.key) {
      attributes_.back() = std::move(attribute);
    } else {
      attributes_.push_back(std::move(attribute));
    }
  }
  for (const auto& attribute : attributes_) {
    append_key(key_, attribute.key, attribute.value.index(), attribute_value_text(attribute.value));
  }
}

Series::Series(const InstrumentDescriptor& descriptor, AttributeSet attributes, uint64_t start_ns)
    : descriptor_(descriptor),
      attributes_(std::move(attributes)),
      start_ns_(start_ns),
      integral_(descriptor.kind == InstrumentKind::kCounter && descriptor.value_type == ValueType::kInt) {
  switch (descriptor.kind) {
    case InstrumentKind::kCounter:
      present_.store(true);  // published from zero
      break;
    case InstrumentKind::kGauge:
      break;
    case InstrumentKind::kHistogram:
      explicit_ = std::make_unique<ExplicitBuckets>(descriptor.buckets.size() + 1);
      present_.store(true);
      break;
    case InstrumentKind::kExponentialHistogram:
      exponential_ = std::make_unique<Exponential>(descriptor.max_scale, descriptor.max_size);
      present_.store(true);
      break;
  }
}

void Series::record(double value) {
  if (!std::isfinite(value)) return;
  if (explicit_) {
    const auto& bounds = descriptor_.buckets;
    const auto bucket = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
    explicit_->counts[bucket].fetch_add(1, std::memory_order_relaxed);
    atomic_min(explicit_->min, value);
    atomic_max(explicit_->max, value);
    explicit_->sum.fetch_add(value, std::memory_order_relaxed);
  } else if (exponential_) {
    std::lock_guard lock(exponential_->mu);
    exponential_->data.record(value);
  }
}

bool Series::snapshot(PointData* out) const {
  if (!present_.load(std::memory_order_acquire)) return false;
  out->attributes = attributes_;
  out->start_time_ns = start_ns_;
  switch (descriptor_.kind) {
    case InstrumentKind::kCounter:
    case InstrumentKind::kGauge:
      out->value = integral_ ? static_cast<double>(int_value_.load(std::memory_order_relaxed))
                             : value_.load(std::memory_order_relaxed);
      break;
    case InstrumentKind::kHistogram: {
      out->bounds = descriptor_.buckets;
      out->bucket_counts.resize(explicit_->counts.size());
      out->count = 0;
      for (size_t i = 0; i < explicit_->counts.size(); ++i) {
        out->bucket_counts[i] = explicit_->counts[i].load(std::memory_order_relaxed);
        out->count += out->bucket_counts[i];
      }
      out->sum = explicit_->sum.load(std::memory_order_relaxed);
      out->min = explicit_->min.load(std::memory_order_relaxed);
      out->max = explicit_->max.load(std::memory_order_relaxed);
      break;
    }
    case InstrumentKind::kExponentialHistogram: {
      std::lock_guard lock(exponential_->mu);
      out->exponential = exponential_->data.data();
      out->count = out->exponential.count;
      out->sum = out->exponential.sum;
      out->min = out->exponential.min;
      out->max = out->exponential.max;
      break;
    }
  }
  return true;
}

Instrument::Instrument(InstrumentDescriptor descriptor, std::function<uint64_t()> clock)
    : descriptor_(std::move(descriptor)), clock_(std::move(clock)) {}

Series* Instrument::find(const std::string& key) const {
  std::shared_lock lock(mu_);
  auto it = series_.find(key);
  return it == series_.end() ? nullptr : it->second.get();
}

Series* Instrument::insert(const AttributeSet& attributes) {
  std::unique_lock lock(mu_);
  auto [it, inserted] = series_.try_emplace(attributes.key());
  if (inserted) {
    it->second = std::make_unique<Series>(descriptor_, attributes, clock_());
    order_.push_back(it->second.get());
  }
  return it->second.get();
}

Series* Instrument::series(const AttributeSet& attributes) {
  if (Series* found = find(attributes.key())) return found;
  return insert(attributes);
}

Series* Instrument::series(std::span<const AttributeRef> attributes) {
  thread_local std::string key;  // reused: no allocation once it has grown
  key.clear();
  for (const auto& attribute : attributes) append_key(key, attribute);
  if (Series* found = find(key)) return found;
  std::vector<Attribute> owned;
  owned.reserve(attributes.size());
  for (const auto& attribute : attributes) {
    AttributeValue value;
    switch (attribute.value.index()) {
      case 0: value = std::string(std::get<std::string_view>(attribute.value)); break;
      case 1: value = std::get<bool>(attribute.value); break;
      case 2: value = std::get<int64_t>(attribute.value); break;
      default: value = std::get<double>(attribute.value); break;
    }
    owned.push_back({std::string(attribute.key), std::move(value)});
  }
  return insert(AttributeSet(std::move(owned)));
}

std::vector<PointData> Instrument::collect() const {
  std::vector<PointData> points;
  const uint64_t now = clock_();
  std::shared_lock lock(mu_);
  points.reserve(order_.size());
  for (const Series* series : order_) {
    PointData point;
    if (series->snapshot(&point)) {
      point.time_ns = now;
      points.push_back(std::move(point));
    }
  }
  return points;
}

MeterProvider::MeterProvider(Resource resource, MeterProviderOptions options)
    : resource_(std::move(resource)), options_(std::move(options)) {}

Instrument& MeterProvider::instrument(const InstrumentDescriptor& descriptor) {
  std::lock_guard lock(mu_);
  auto [it, inserted] = instruments_.try_emplace(descriptor.name);
  if (inserted) {
    auto clock = options_.clock ? options_.clock : std::function<uint64_t()>(system_now_ns);
    it->second = std::make_unique<Instrument>(descriptor, std::move(clock));
    order_.push_back(it->second.get());
  }
  assert(it->second->descriptor().kind == descriptor.kind && "one name, two instrument kinds");
  return *it->second;
}

MetricsSnapshot MeterProvider::collect() const {
  MetricsSnapshot snapshot;
  snapshot.resource = resource_;
  snapshot.scope_name = kScopeName;
  snapshot.scope_version = options_.scope_version;
  std::vector<Instrument*> instruments;
  {
    std::lock_guard lock(mu_);
    instruments = order_;
  }
  for (const Instrument* instrument : instruments) {
    auto points = instrument->collect();
    if (points.empty()) continue;
    snapshot.metrics.push_back(MetricData{instrument->descriptor(), std::move(points)});
  }
  return snapshot;
}

}  // namespace trainer::telemetry

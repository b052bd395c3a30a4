#include "telemetry/exponential_histogram.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

namespace trainer::telemetry {

int32_t exponential_bucket_index(double value, int32_t scale) {
  value = std::fabs(value);
  int exp = 0;
  const double frac = std::frexp(value, &exp);  // value = frac * 2^exp, frac in [0.5, 1)
  const bool power_of_two = frac == 0.5;
  if (scale <= 0) {
    // Bucket of the base-2 exponent; an exact power of two belongs to the bucket below
    // (upper boundaries are inclusive).
    int32_t e = exp - 1;
    if (power_of_two) e -= 1;
    return e >> -scale;  // arithmetic shift: rounds toward minus infinity
  }
  if (power_of_two) return ((exp - 1) << scale) - 1;
  const double scale_factor = std::ldexp(std::numbers::log2e, scale);
  const double position = std::log(value) * scale_factor;  // log_base(value)
  const double upper = std::ceil(position);
  auto index = static_cast<int32_t>(upper) - 1;
  // Near a boundary the logarithm's rounding may pick the neighbour: decide exactly there.
  constexpr double kNearBoundary = 1e-6;
  if (upper - position < kNearBoundary || position - (upper - 1) < kNearBoundary) {
    if (exponential_lower_boundary(index, scale) >= value) --index;
    else if (exponential_lower_boundary(index + 1, scale) < value) ++index;
  }
  return index;
}

double exponential_lower_boundary(int32_t index, int32_t scale) {
  if (scale <= 0) return std::ldexp(1.0, index * (1 << -scale));
  // base^index = 2^(index / 2^scale), split into integer and fractional exponents for accuracy.
  const int32_t whole = index >> scale;
  const int32_t part = index - (whole << scale);
  return std::ldexp(std::exp2(std::ldexp(static_cast<double>(part), -scale)), whole);
}

ExponentialHistogram::ExponentialHistogram(int32_t max_scale, int32_t max_size)
    : max_size_(std::max(max_size, 2)) {
  data_.scale = std::clamp(max_scale, kMinScale, kMaxScale);
}

void ExponentialHistogram::record(double value) {
  if (!std::isfinite(value)) return;
  if (data_.count == 0) {
    data_.min = data_.max = value;
  } else {
    data_.min = std::min(data_.min, value);
    data_.max = std::max(data_.max, value);
  }
  ++data_.count;
  data_.sum += value;
  if (value == 0) {
    ++data_.zero_count;
    return;
  }
  ExponentialBuckets& buckets = value > 0 ? data_.positive : data_.negative;
  int32_t index = exponential_bucket_index(value, data_.scale);
  if (!buckets.counts.empty()) {
    int64_t low = std::min<int64_t>(buckets.offset, index);
    int64_t high = std::max<int64_t>(buckets.offset + static_cast<int64_t>(buckets.counts.size()) - 1, index);
    int32_t change = 0;
    while (high - low + 1 > max_size_ && data_.scale - change > kMinScale) {
      low >>= 1;
      high >>= 1;
      ++change;
    }
    if (change > 0) {
      downscale(change);
      index = exponential_bucket_index(value, data_.scale);
    }
  }
  increment(buckets, index);
}

void ExponentialHistogram::downscale(int32_t change) {
  downscale_buckets(data_.positive, change);
  downscale_buckets(data_.negative, change);
  data_.scale -= change;
}

void ExponentialHistogram::downscale_buckets(ExponentialBuckets& buckets, int32_t change) {
  if (buckets.counts.empty()) return;
  const int32_t offset = buckets.offset >> change;
  const int32_t last = (buckets.offset + static_cast<int32_t>(buckets.counts.size()) - 1) >> change;
  std::vector<uint64_t> merged(static_cast<size_t>(last - offset + 1), 0);
  for (size_t i = 0; i < buckets.counts.size(); ++i) {
    const int32_t index = (buckets.offset + static_cast<int32_t>(i)) >> change;
    merged[static_cast<size_t>(index - offset)] += buckets.counts[i];
  }
  buckets.offset = offset;
  buckets.counts = std::move(merged);
}

void ExponentialHistogram::increment(ExponentialBuckets& buckets, int32_t index) {
  if (buckets.counts.empty()) {
    buckets.offset = index;
    buckets.counts.assign(1, 1);
    return;
  }
  if (index < buckets.offset) {
    buckets.counts.insert(buckets.counts.begin(), static_cast<size_t>(buckets.offset - index), 0);
    buckets.offset = index;
  }
  const auto position = static_cast<size_t>(index - buckets.offset);
  if (position >= buckets.counts.size()) buckets.counts.resize(position + 1, 0);
  ++buckets.counts[position];
}

}  // namespace trainer::telemetry

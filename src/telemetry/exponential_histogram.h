// Base-2 exponential histogram, as OpenTelemetry's data model defines it.
//
// At scale s the base is 2^(2^-s); bucket i counts values v with base^i < |v| <= base^(i+1)
// (positive and negative values in separate bucket ranges), zero in `zero_count`. A record
// that would need more than `max_size` buckets of one sign lowers the scale (merging pairs of
// buckets) until the range fits: automatic downscaling.
//
// Not thread-safe: Series guards it with a mutex.
#pragma once

#include <cstdint>
#include <vector>

namespace trainer::telemetry {

struct ExponentialBuckets {
  int32_t offset = 0;             // bucket index of counts[0]
  std::vector<uint64_t> counts;   // consecutive buckets from `offset`
};

struct ExponentialHistogramData {
  int32_t scale = 0;
  uint64_t zero_count = 0;
  ExponentialBuckets positive;
  ExponentialBuckets negative;
  uint64_t count = 0;
  double sum = 0;
  double min = 0;  // meaningful when count > 0
  double max = 0;
};

// The bucket index of |value| > 0 at `scale` (-10 <= scale <= 20).
int32_t exponential_bucket_index(double value, int32_t scale);
// The lower boundary base^index of bucket `index` at `scale`; its upper one is index + 1's.
double exponential_lower_boundary(int32_t index, int32_t scale);

class ExponentialHistogram {
 public:
  static constexpr int32_t kMinScale = -10;
  static constexpr int32_t kMaxScale = 20;

  ExponentialHistogram(int32_t max_scale, int32_t max_size);

  void record(double value);  // finite values only; NaN and infinities are ignored
  const ExponentialHistogramData& data() const { return data_; }

 private:
  void downscale(int32_t change);
  static void downscale_buckets(ExponentialBuckets& buckets, int32_t change);
  static void increment(ExponentialBuckets& buckets, int32_t index);

  const int32_t max_size_;
  ExponentialHistogramData data_;
};

}  // namespace trainer::telemetry

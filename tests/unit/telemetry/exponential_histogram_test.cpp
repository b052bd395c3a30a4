#include "telemetry/exponential_histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

namespace trainer::telemetry {
namespace {

uint64_t total(const ExponentialBuckets& buckets) {
  return std::accumulate(buckets.counts.begin(), buckets.counts.end(), uint64_t{0});
}

TEST(ExponentialBucketIndex, ScaleZeroBucketsArePowersOfTwoWithInclusiveUpperBoundary) {
  EXPECT_EQ(exponential_bucket_index(1.0, 0), -1);  // (0.5, 1]
  EXPECT_EQ(exponential_bucket_index(1.5, 0), 0);   // (1, 2]
  EXPECT_EQ(exponential_bucket_index(2.0, 0), 0);
  EXPECT_EQ(exponential_bucket_index(3.0, 0), 1);   // (2, 4]
  EXPECT_EQ(exponential_bucket_index(4.0, 0), 1);
  EXPECT_EQ(exponential_bucket_index(0.3, 0), -2);  // (0.25, 0.5]
}

TEST(ExponentialBucketIndex, NegativeScaleMergesPowersOfTwo) {
  // scale -1: base 4; bucket i is (4^i, 4^(i+1)].
  EXPECT_EQ(exponential_bucket_index(4.0, -1), 0);
  EXPECT_EQ(exponential_bucket_index(5.0, -1), 1);
  EXPECT_EQ(exponential_bucket_index(16.0, -1), 1);
  EXPECT_EQ(exponential_bucket_index(17.0, -1), 2);
  EXPECT_EQ(exponential_bucket_index(0.2, -1), -2);  // (1/16, 1/4]
}

TEST(ExponentialBucketIndex, EveryValueLiesInsideItsBucketAtEveryScale) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-30, 30);
  for (int32_t scale = -10; scale <= 20; ++scale) {
    for (int i = 0; i < 2000; ++i) {
      const double value = std::exp2(exponent(rng));
      const int32_t index = exponential_bucket_index(value, scale);
      ASSERT_LT(exponential_lower_boundary(index, scale), value) << value << " scale " << scale;
      ASSERT_GE(exponential_lower_boundary(index + 1, scale), value) << value << " scale " << scale;
    }
    // Boundaries that are exact powers of two belong to the bucket below them.
    const int step = scale < 0 ? 1 << -scale : 1;
    for (int k = -step * (1000 / step); k <= 1000; k += step) {  // within double range
      const double value = std::ldexp(1.0, k);
      const int32_t index = exponential_bucket_index(value, scale);
      ASSERT_EQ(exponential_lower_boundary(index + 1, scale), value) << value << " scale " << scale;
    }
  }
}

TEST(ExponentialHistogram, CountsZeroPositiveAndNegativeSeparately) {
  ExponentialHistogram histogram(20, 160);
  for (double v : {-2.0, 0.0, 0.0, 3.0, 3.0}) histogram.record(v);
  const auto& data = histogram.data();
  EXPECT_EQ(data.count, 5u);
  EXPECT_EQ(data.zero_count, 2u);
  EXPECT_EQ(total(data.positive), 2u);
  EXPECT_EQ(total(data.negative), 1u);
  EXPECT_DOUBLE_EQ(data.sum, 4.0);
  EXPECT_DOUBLE_EQ(data.min, -2.0);
  EXPECT_DOUBLE_EQ(data.max, 3.0);
  EXPECT_EQ(data.scale, 20);  // one bucket per sign: no reason to downscale
}

TEST(ExponentialHistogram, DownscalesUntilTheRangeFitsMaxSize) {
  ExponentialHistogram histogram(20, 4);
  for (double v : {1.0, 2.0, 4.0, 8.0, 16.0}) histogram.record(v);
  const auto& data = histogram.data();
  // At scale 0 the five values need buckets -1..3 (five); at scale -1 they need -1..1.
  EXPECT_EQ(data.scale, -1);
  EXPECT_LE(data.positive.counts.size(), 4u);
  EXPECT_EQ(total(data.positive), 5u);
  for (double v : {1.0, 2.0, 4.0, 8.0, 16.0}) {
    const int32_t index = exponential_bucket_index(v, data.scale);
    ASSERT_GE(index, data.positive.offset);
    ASSERT_LT(index, data.positive.offset + static_cast<int32_t>(data.positive.counts.size()));
  }
}

TEST(ExponentialHistogram, MergedBucketsKeepEveryCountAfterDownscaling) {
  ExponentialHistogram histogram(20, 160);
  for (int i = 1; i <= 1000; ++i) histogram.record(i);
  const auto& data = histogram.data();
  EXPECT_EQ(total(data.positive), 1000u);
  EXPECT_LE(data.positive.counts.size(), 160u);
  // Scale 4 would need buckets -1..159 (1 is the upper boundary of bucket -1): 161 > 160.
  EXPECT_EQ(data.scale, 3);
  // Recount independently at the final scale.
  std::vector<uint64_t> expected(data.positive.counts.size(), 0);
  for (int i = 1; i <= 1000; ++i) ++expected[exponential_bucket_index(i, data.scale) - data.positive.offset];
  EXPECT_EQ(data.positive.counts, expected);
}

TEST(ExponentialHistogram, IgnoresNanAndInfinity) {
  ExponentialHistogram histogram(20, 160);
  histogram.record(std::nan(""));
  histogram.record(INFINITY);
  EXPECT_EQ(histogram.data().count, 0u);
}

}  // namespace
}  // namespace trainer::telemetry

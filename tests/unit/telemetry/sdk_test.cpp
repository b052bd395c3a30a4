#include <gtest/gtest.h>

#include <thread>

#include "telemetry/telemetry.h"

namespace trainer::telemetry {
namespace {

InstrumentDescriptor counter_descriptor() {
  return {.name = "test.requests", .description = "Requests.", .unit = "{request}", .kind = InstrumentKind::kCounter,
          .value_type = ValueType::kInt};
}

uint64_t fixed_clock() { return 1'700'000'000'000'000'000ULL; }

TEST(AttributeSet, IsCanonicalWhateverTheOrderAndKeepsTheLastOfARepeatedKey) {
  AttributeSet a({{"b", int64_t{1}}, {"a", std::string("x")}});
  AttributeSet b({{"a", std::string("x")}, {"b", int64_t{2}}, {"b", int64_t{1}}});
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.attributes().size(), 2u);
  EXPECT_EQ(a.attributes()[0].key, "a");
  AttributeSet c({{"a", std::string("1")}});
  AttributeSet d({{"a", int64_t{1}}});
  EXPECT_FALSE(c == d) << "a string and an integer with the same text are different values";
}

TEST(MeterProvider, CounterAccumulatesPerAttributeSetFromZero) {
  MeterProvider provider(Resource{}, {.clock = fixed_clock});
  auto& counter = provider.instrument(counter_descriptor());
  const AttributeSet get({{"method", std::string("GET")}});
  const AttributeSet put({{"method", std::string("PUT")}});
  counter.add(2, get);
  counter.add(3, get);
  counter.add(0, put);
  counter.add(-1, put);  // dropped: counters are monotonic
  auto snapshot = provider.collect();
  ASSERT_EQ(snapshot.metrics.size(), 1u);
  ASSERT_EQ(snapshot.metrics[0].points.size(), 2u);
  EXPECT_EQ(snapshot.metrics[0].points[0].value, 5);
  EXPECT_EQ(snapshot.metrics[0].points[1].value, 0);
  EXPECT_EQ(snapshot.metrics[0].points[0].start_time_ns, fixed_clock());
}

TEST(MeterProvider, SameNameReturnsTheSameInstrument) {
  MeterProvider provider(Resource{});
  EXPECT_EQ(&provider.instrument(counter_descriptor()), &provider.instrument(counter_descriptor()));
}

TEST(MeterProvider, GaugeIsAbsentUntilSetAndAfterClear) {
  MeterProvider provider(Resource{});
  auto& gauge = provider.instrument({.name = "test.level", .description = "Level.", .unit = "1"});
  GaugeHandle handle(gauge.series(AttributeSet{}));
  EXPECT_TRUE(provider.collect().metrics.empty());
  handle.set(0.5);
  handle.set(0.75);
  auto snapshot = provider.collect();
  ASSERT_EQ(snapshot.metrics.size(), 1u);
  EXPECT_EQ(snapshot.metrics[0].points[0].value, 0.75);
  handle.clear();
  EXPECT_TRUE(provider.collect().metrics.empty());
}

TEST(MeterProvider, ExplicitHistogramCountsUpperInclusiveBuckets) {
  MeterProvider provider(Resource{});
  auto& histogram = provider.instrument(
      {.name = "test.latency", .description = "Latency.", .unit = "s", .kind = InstrumentKind::kHistogram,
       .buckets = {1, 2, 5}});
  HistogramHandle handle(histogram.series(AttributeSet{}));
  for (double v : {0.5, 1.0, 1.5, 5.0, 7.0}) handle.record(v);
  auto point = provider.collect().metrics.at(0).points.at(0);
  EXPECT_EQ(point.bucket_counts, (std::vector<uint64_t>{2, 1, 1, 1}));
  EXPECT_EQ(point.count, 5u);
  EXPECT_DOUBLE_EQ(point.sum, 15.0);
  EXPECT_EQ(point.min, 0.5);
  EXPECT_EQ(point.max, 7.0);
}

TEST(MeterProvider, ConcurrentRecordsAreAllCounted) {
  MeterProvider provider(Resource{});
  auto& counter = provider.instrument(counter_descriptor());
  auto& histogram = provider.instrument({.name = "test.size", .description = "Size.", .unit = "By",
                                         .kind = InstrumentKind::kExponentialHistogram});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const AttributeSet attributes({{"thread", int64_t{t % 2}}});
      CounterHandle bound(counter.series(attributes));
      for (int i = 0; i < kPerThread; ++i) {
        bound.add(1);
        histogram.record(i + 1, attributes);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  auto snapshot = provider.collect();
  double counted = 0;
  uint64_t recorded = 0;
  for (const auto& metric : snapshot.metrics) {
    for (const auto& point : metric.points) {
      if (metric.descriptor.kind == InstrumentKind::kCounter) counted += point.value;
      else recorded += point.count;
    }
  }
  EXPECT_EQ(counted, kThreads * kPerThread);
  EXPECT_EQ(recorded, static_cast<uint64_t>(kThreads * kPerThread));
}

}  // namespace
}  // namespace trainer::telemetry

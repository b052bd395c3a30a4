// Memory accounting of a step (src/engine/memory.h) on the CPU: the counting allocator sees
// every tensor's bytes, and a step's peak splits into the engine's parts.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "engine/memory.h"

namespace trainer::engine::memory {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(CpuMemoryMeter, CountsTheBytesOfLiveTensors) {
  install_cpu_meter();
  const int64_t before = cpu_current_bytes();
  {
    at::Tensor t = at::empty({kMiB / 4}, at::kFloat);
    EXPECT_TRUE(counted_by_cpu_meter(t));
    EXPECT_EQ(cpu_current_bytes() - before, kMiB);
  }
  EXPECT_EQ(cpu_current_bytes(), before);
}

TEST(CpuMemoryMeter, ThePeakHoldsUntilReset) {
  install_cpu_meter();
  reset_cpu_peak();
  const int64_t base = cpu_current_bytes();
  { at::Tensor t = at::zeros({2 * kMiB}, at::kByte); }
  EXPECT_EQ(cpu_peak_bytes(), base + 2 * kMiB);
  reset_cpu_peak();
  EXPECT_EQ(cpu_peak_bytes(), base);
}

TEST(CpuMemoryMeter, TensorsFromForeignMemoryAreNotCounted) {
  install_cpu_meter();
  float data[4] = {1, 2, 3, 4};
  at::Tensor view = at::from_blob(data, {4}, at::kFloat);
  EXPECT_FALSE(counted_by_cpu_meter(view));
}

TEST(StepMeter, SplitsTheStepPeakIntoTheEnginesParts) {
  install_cpu_meter();
  StaticParts parts{.weights = 10 * kMiB, .adapter = kMiB, .optimizer_state = 2 * kMiB, .uncounted = 10 * kMiB};
  StepMeter meter(at::Device(at::kCPU), parts);
  meter.begin_step();
  const int64_t start = cpu_current_bytes() + parts.uncounted;
  at::Tensor grads = at::zeros({kMiB}, at::kByte);             // held to the end of the step
  { at::Tensor activations = at::zeros({3 * kMiB}, at::kByte); }  // freed before the end
  protocol::StepMemory m = meter.end_step(kMiB);
  EXPECT_EQ(m.usage.weights, 10 * kMiB);
  EXPECT_EQ(m.usage.adapter, kMiB);
  EXPECT_EQ(m.usage.optimizer_state, 2 * kMiB);
  EXPECT_EQ(m.usage.gradients, kMiB);
  EXPECT_EQ(m.usage.activations, 3 * kMiB);
  EXPECT_EQ(*m.usage.other_tensors, std::max<int64_t>(0, start - 13 * kMiB));
  EXPECT_GE(*m.allocated_peak_bytes, start + 4 * kMiB);
  // The CPU has no caching allocator and no driver figures: those parts are not reported.
  EXPECT_FALSE(m.reserved_peak_bytes.has_value());
  EXPECT_FALSE(m.usage.allocator_cache.has_value());
  EXPECT_FALSE(m.usage.outside_allocator.has_value());
  EXPECT_FALSE(m.usage.free.has_value());
}

}  // namespace
}  // namespace trainer::engine::memory

// Device health (src/job/nvml.h, src/job/device_watch.h) without a GPU: NVML absent, the clock
// event reason bits, and the window the gauges publish.
#include <gtest/gtest.h>

#include "job/device_watch.h"
#include "job/nvml.h"

namespace trainer::job {
namespace {

TEST(Nvml, AnAbsentLibraryIsNotAvailableAndSaysWhy) {
  auto nvml = Nvml::load("/nonexistent/trainer-test/libnvidia-ml.so.1");
  ASSERT_FALSE(nvml.is_ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(nvml.status().message().rfind("NVML not available: ", 0), 0u) << nvml.status().message();
  EXPECT_NE(nvml.status().message().find("/nonexistent/trainer-test/libnvidia-ml.so.1"), std::string::npos)
      << nvml.status().message();
}

TEST(Nvml, ALibraryWithoutNvmlIsNotAvailable) {
  auto nvml = Nvml::load("libc.so.6");
  ASSERT_FALSE(nvml.is_ok());
  EXPECT_EQ(nvml.status().message(), "NVML not available: libc.so.6 lacks nvmlInit_v2 or the device calls");
}

TEST(ClockEventReasons, TheSpecificationsBitsAreNamed) {
  EXPECT_EQ(clock_event_reason_names(0), "none");
  EXPECT_EQ(clock_event_reason_names(0x1), "idle");
  EXPECT_EQ(clock_event_reason_names(0x2), "applications_clocks");
  EXPECT_EQ(clock_event_reason_names(0x4), "sw_power_cap");
  EXPECT_EQ(clock_event_reason_names(0x8), "hw_slowdown");
  EXPECT_EQ(clock_event_reason_names(0x20), "sw_thermal");
  EXPECT_EQ(clock_event_reason_names(0x40), "hw_thermal");
  EXPECT_EQ(clock_event_reason_names(0x80), "hw_power_brake");
  EXPECT_EQ(clock_event_reason_names(0x4 | 0x40), "sw_power_cap,hw_thermal");
  EXPECT_EQ(clock_event_reason_names(0x1 | 0x400), "idle,0x400");
}

TEST(GpuWindow, AveragesClocksAndOrsTheReasonsOfItsReadings) {
  GpuWindow w;
  GpuReading a;
  a.sm_clock_hz = 1.0e9;
  a.memory_clock_hz = 2.0e9;
  a.memory_utilization = 0.25;
  a.clock_event_reasons = kClockEventSwPowerCap;
  a.remapped_rows_corrected = 1;
  a.remapped_rows_uncorrected = 0;
  a.repair_pending = false;
  GpuReading b = a;
  b.sm_clock_hz = 2.0e9;
  b.memory_utilization = 0.75;
  b.clock_event_reasons = kClockEventHwThermal;
  b.remapped_rows_corrected = 2;
  b.repair_pending = true;
  w.add(a);
  w.add(b);
  GpuReading s = w.summary();
  EXPECT_DOUBLE_EQ(*s.sm_clock_hz, 1.5e9);
  EXPECT_DOUBLE_EQ(*s.memory_clock_hz, 2.0e9);
  EXPECT_DOUBLE_EQ(*s.memory_utilization, 0.5);
  EXPECT_EQ(*s.clock_event_reasons, kClockEventSwPowerCap | kClockEventHwThermal);
  // Lifetime counts: the latest reading's.
  EXPECT_EQ(*s.remapped_rows_corrected, 2);
  EXPECT_EQ(*s.remapped_rows_uncorrected, 0);
  EXPECT_TRUE(*s.repair_pending);
  EXPECT_FALSE(s.retired_pages_corrected.has_value());  // not reported: not published

  // A new window forgets the averages and reasons, not the counts.
  w.restart();
  GpuReading idle;
  idle.clock_event_reasons = kClockEventGpuIdle;
  w.add(idle);
  s = w.summary();
  EXPECT_FALSE(s.sm_clock_hz.has_value());
  EXPECT_EQ(*s.clock_event_reasons, kClockEventGpuIdle);
}

TEST(GpuWindow, AWindowWithoutReasonsPublishesNone) {
  GpuWindow w;
  w.add(GpuReading{});
  EXPECT_FALSE(w.summary().clock_event_reasons.has_value());
}

}  // namespace
}  // namespace trainer::job

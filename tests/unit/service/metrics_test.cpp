// The service's metrics through the telemetry SDK: names, attributes and the instance.
#include <gtest/gtest.h>

#include "service/metrics.h"

namespace trainer::service {
namespace {

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(ServiceTelemetry, CountsPhaseEntriesByPhase) {
  ServiceTelemetry t("pod-1");
  t.phase_entered(Phase::kQueued);
  t.phase_entered(Phase::kQueued);
  std::string text = t.render();
  EXPECT_TRUE(has(text, "akka_optimize_training_run_phase_entries_total{akka_optimize_training_run_phase=\"QUEUED\"} 2"))
      << text;
}

TEST(ServiceTelemetry, RunDurationsAreHistogramsByOutcomeAndMethod) {
  ServiceTelemetry t("i");
  t.run_ended(Phase::kCompleted, "SFT", 3);
  t.run_failed(Phase::kTraining);
  std::string text = t.render();
  EXPECT_TRUE(has(text, "akka_optimize_training_run_duration_seconds_count{akka_optimize_training_run_method=\"SFT\","
                        "akka_optimize_training_run_outcome=\"COMPLETED\"} 1"))
      << text;
  EXPECT_TRUE(has(text, "akka_optimize_training_run_failures_total{akka_optimize_training_run_phase=\"TRAINING\"} 1"));
}

TEST(ServiceTelemetry, PoolGaugesCarryTheInstanceAndObservedIsAbsentUntilRead) {
  ServiceTelemetry t("pod-1");
  PoolGauge p;
  p.accelerator = "cpu";
  p.declared = 2;
  p.granted_claims = 1;
  p.granted_devices = 1;
  t.set_pools({p});
  std::string text = t.render();
  EXPECT_TRUE(has(text, "akka_optimize_training_pool_devices_declared{akka_optimize_training_instance=\"pod-1\","
                        "akka_optimize_training_pool_accelerator=\"cpu\",akka_optimize_training_pool_serving=\"false\"} 2"))
      << text;
  EXPECT_FALSE(has(text, "akka_optimize_training_pool_devices_observed{"));
  p.observed = 0;
  t.set_pools({p});
  EXPECT_TRUE(has(t.render(), "akka_optimize_training_pool_devices_observed{akka_optimize_training_instance=\"pod-1\""));
}

TEST(ServiceTelemetry, ARenamedWorkloadsOldSeriesIsWithdrawn) {
  ServiceTelemetry t("i");
  t.set_workloads({{"old-name", 4, 1, 0}});
  EXPECT_TRUE(has(t.render(), "akka_optimize_training_workload=\"old-name\""));
  t.set_workloads({{"new-name", 4, 1, 0}});
  std::string text = t.render();
  EXPECT_FALSE(has(text, "akka_optimize_training_workload=\"old-name\"")) << text;
  EXPECT_TRUE(has(text, "akka_optimize_training_workload_devices_quota{akka_optimize_training_instance=\"i\","
                        "akka_optimize_training_workload=\"new-name\"} 4"));
}

}  // namespace
}  // namespace trainer::service

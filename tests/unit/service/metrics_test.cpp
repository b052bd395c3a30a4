// The service metrics recorder and its Prometheus text.
#include <gtest/gtest.h>

#include "service/metrics.h"

namespace trainer::service {
namespace {

TEST(MetricsRecorder, EverySeriesCarriesTheInstance) {
  MetricsRecorder m("pod-1");
  m.add(metric::kRunPhaseEntries, {{attr::kRunPhase, "QUEUED"}}, 1);
  m.add(metric::kRunPhaseEntries, {{attr::kRunPhase, "QUEUED"}}, 1);
  std::string text = m.render();
  EXPECT_NE(text.find("# TYPE akka_optimize_training_run_phase_entries_total counter"), std::string::npos);
  EXPECT_NE(text.find("akka_optimize_training_run_phase_entries_total{akka_optimize_training_instance=\"pod-1\","
                      "akka_optimize_training_run_phase=\"QUEUED\"} 2"),
            std::string::npos)
      << text;
}

TEST(MetricsRecorder, HistogramsUseTheRegistryBuckets) {
  MetricsRecorder m("i");
  m.observe(metric::kRunDuration, {{attr::kRunOutcome, "COMPLETED"}}, 3);
  m.observe(metric::kRunDuration, {{attr::kRunOutcome, "COMPLETED"}}, 100);
  std::string text = m.render();
  const std::string series = "akka_optimize_training_run_duration_seconds_bucket{akka_optimize_training_instance=\"i\","
                             "akka_optimize_training_run_outcome=\"COMPLETED\",le=\"";
  EXPECT_NE(text.find(series + "1\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find(series + "5\"} 1"), std::string::npos);
  EXPECT_NE(text.find(series + "120\"} 2"), std::string::npos);
  EXPECT_NE(text.find(series + "+Inf\"} 2"), std::string::npos);
  EXPECT_NE(text.find("akka_optimize_training_run_duration_seconds_sum{akka_optimize_training_instance=\"i\","
                      "akka_optimize_training_run_outcome=\"COMPLETED\"} 103"),
            std::string::npos);
}

TEST(MetricsRecorder, GaugesAreReplacedAndPoolsOfOneKindAddUp) {
  MetricsRecorder m("i");
  m.set_gauge(metric::kPoolDevicesDeclared, {{{{attr::kPoolAccelerator, "cpu"}}, 1}, {{{attr::kPoolAccelerator, "cpu"}}, 2}});
  EXPECT_NE(m.render().find("pool_accelerator=\"cpu\"} 3"), std::string::npos) << m.render();
  m.set_gauge(metric::kPoolDevicesDeclared, {{{{attr::kPoolAccelerator, "gpu"}}, 4}});
  std::string text = m.render();
  EXPECT_EQ(text.find("pool_accelerator=\"cpu\""), std::string::npos);
  EXPECT_NE(text.find("pool_accelerator=\"gpu\"} 4"), std::string::npos);
}

TEST(MetricsRecorder, AnObservedGaugeIsAbsentUntilSet) {
  MetricsRecorder m("i");
  EXPECT_EQ(m.render().find("akka_optimize_training_pool_devices_observed"), std::string::npos);
}

}  // namespace
}  // namespace trainer::service

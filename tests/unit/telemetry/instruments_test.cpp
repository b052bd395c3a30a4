#include "telemetry/instruments.h"

#include <gtest/gtest.h>

#include <set>

namespace trainer::telemetry {
namespace {

const PointData* find_point(const MetricsSnapshot& snapshot, std::string_view name, size_t index = 0) {
  for (const auto& metric : snapshot.metrics) {
    if (metric.descriptor.name == name && index < metric.points.size()) return &metric.points[index];
  }
  return nullptr;
}

TEST(Instruments, DeclareEveryMetricOfTheRegistryOnce) {
  const auto& all = all_metric_descriptors();
  EXPECT_EQ(all.size(), 81u);
  std::set<std::string> names;
  for (const auto* descriptor : all) names.insert(descriptor->name);
  EXPECT_EQ(names.size(), all.size());
  EXPECT_TRUE(names.count("akka.optimize.training.pool.claims"));
  EXPECT_TRUE(names.count("akka.optimize.training.rl.step.count"));
  EXPECT_EQ(metrics::RlCompletionLength::descriptor().kind, InstrumentKind::kExponentialHistogram);
}

TEST(Instruments, NameEnumValuesAsTheRegistrySpellsThem) {
  EXPECT_EQ(to_string(ClaimState::kGranted), "GRANTED");
  EXPECT_EQ(to_string(RunPhase::kWaitingForDevices), "WAITING_FOR_DEVICES");
  EXPECT_EQ(to_string(CheckpointArtifactKind::kTrainingState), "trainingState");
  EXPECT_EQ(to_string(RlGraderTokenType::kInput), "input");
}

TEST(Instruments, RecordWithTypedAttributes) {
  MeterProvider provider(Resource{});
  ServiceMetrics service(provider);
  service.pool_claims.set(3, {.claim_state = ClaimState::kQueued, .instance = "trainer-0",
                              .pool_accelerator = "nvidia-l4", .pool_serving = true});
  service.service_operation_attempts.add(1, {.service_operation = ServiceOperation::kPause,
                                             .service_stage = ServiceStage::kAccept,
                                             .service_outcome = ServiceOutcome::kSuccess,
                                             .pause_policy = PausePolicy::kSave});
  const auto snapshot = provider.collect();
  const PointData* claims = find_point(snapshot, "akka.optimize.training.pool.claims");
  ASSERT_NE(claims, nullptr);
  EXPECT_EQ(claims->value, 3);
  EXPECT_EQ(claims->attributes,
            AttributeSet({{"akka.optimize.training.claim.state", std::string("QUEUED")},
                          {"akka.optimize.training.instance", std::string("trainer-0")},
                          {"akka.optimize.training.pool.accelerator", std::string("nvidia-l4")},
                          {"akka.optimize.training.pool.serving", true}}));
  const PointData* attempts = find_point(snapshot, "akka.optimize.training.service.operation.attempts");
  ASSERT_NE(attempts, nullptr);
  EXPECT_EQ(attempts->attributes.attributes().size(), 4u) << "the optional failure reason is left out";
}

TEST(Instruments, UnusedMetricsArePublishedOnlyOnceUsed) {
  MeterProvider provider(Resource{});
  JobMetrics job(provider);
  EXPECT_TRUE(provider.collect().metrics.empty()) << "an SFT job must not publish RL step counters";
  auto steps = job.sft_step_count.bind();  // published from zero from now on
  const auto snapshot = provider.collect();
  const PointData* point = find_point(snapshot, "akka.optimize.training.sft.step.count");
  ASSERT_NE(point, nullptr);
  EXPECT_EQ(point->value, 0);
  steps.add(1);
  job.sft_step_count.add(1);
  EXPECT_EQ(find_point(provider.collect(), "akka.optimize.training.sft.step.count")->value, 2);
}

TEST(Instruments, TrainingJobResourceCarriesTheRunIdentity) {
  TrainingJobResource identity{.run_id = "r1", .run_attempt = 1, .workload = "w", .run_method = "SFT",
                               .run_engine = "native", .run_base_model = "m", .run_settings_sha = "abc",
                               .run_lora_rank = 8, .run_learning_rate = 1e-4, .job_submission_id = "r1-1",
                               .profile = "local"};
  const Resource resource = identity.to_resource("trainer-job");
  const auto& attributes = resource.attributes.attributes();
  EXPECT_EQ(attributes.size(), 12u) << "service.name and 11 run attributes; no pipeline, no group size";
  EXPECT_EQ(AttributeSet(attributes).key(), resource.attributes.key());
}

}  // namespace
}  // namespace trainer::telemetry

namespace trainer::telemetry {
namespace {

TEST(Instruments, PrometheusNamesOfTheReferenceAreWhatTheExporterWrites) {
  const auto& descriptors = all_metric_descriptors();
  const auto& names = all_metric_prometheus_names();
  ASSERT_EQ(descriptors.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(prometheus_name(*descriptors[i]), names[i]) << descriptors[i]->name;
  }
  EXPECT_EQ(metrics::RlStepCount::kPrometheusName, "akka_optimize_training_rl_step_count_total");
}

}  // namespace
}  // namespace trainer::telemetry

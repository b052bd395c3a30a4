// The telemetry relay (src/telemetry/relay.h): what jobs push as OTLP JSON comes out of
// trainerd's /metrics with the job's identity as labels, for a while.
#include <gtest/gtest.h>

#include <thread>

#include "telemetry/instruments.h"
#include "telemetry/relay.h"

namespace trainer::telemetry {
namespace {

// A job's provider and its push body, as trainer-job builds them.
struct FakeJob {
  explicit FakeJob(const std::string& run_id, int64_t attempt = 1)
      : provider(TrainingJobResource{.run_id = run_id,
                                     .run_attempt = attempt,
                                     .workload = "support-triage",
                                     .run_method = "SFT",
                                     .run_engine = "native",
                                     .run_base_model = "Qwen/Qwen3-0.6B",
                                     .run_settings_sha = "abc",
                                     .run_lora_rank = 8,
                                     .run_learning_rate = 1e-4,
                                     .job_submission_id = run_id + "-1",
                                     .profile = "cpu"}
                     .to_resource("trainer-job")),
        metrics(provider) {}
  std::string body() const { return otlp_json(provider.collect()); }
  MeterProvider provider;
  JobMetrics metrics;
};

// The sample line of `metric` whose labels contain `label` ("" when none).
std::string line_of(const std::string& text, const std::string& metric, const std::string& label) {
  size_t pos = 0;
  while ((pos = text.find(metric + "{", pos)) != std::string::npos) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    if (pos == 0 || text[pos - 1] == '\n') {
      if (line.find(label) != std::string::npos) return line;
    }
    pos = end;
  }
  return "";
}

TEST(TelemetryRelay, AJobsPushOfAnotherRunIsRefusedAndKeepsNothing) {
  FakeJob job("run-b");
  job.metrics.sft_loss.set(2.5);
  TelemetryRelay relay;
  const Status st = relay.ingest(job.body(), 100, "run-a");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(st.field(), "resourceMetrics[0].resource");
  EXPECT_EQ(st.message(), "names akka.optimize.training.run.id run-b: this job pushes the metrics of run-a only");
  EXPECT_FALSE(relay.holds("run-b", 1));
  EXPECT_EQ(relay.render_prometheus(101), "");
  // Its own run's push is taken.
  ASSERT_TRUE(relay.ingest(job.body(), 100, "run-b").is_ok());
  EXPECT_TRUE(relay.holds("run-b", 1));
}

TEST(TelemetryRelay, AJobsGaugesCountersAndHistogramsComeOutWithItsIdentity) {
  FakeJob job("run-a");
  job.metrics.sft_loss.set(1.5);
  job.metrics.sft_step_count.add(3);
  job.metrics.sft_step_duration.record(0.2);
  job.metrics.sft_data_rows.set(58, {.sft_data_fit = SftDataFit::kAll});
  job.metrics.checkpoint_transfer_size.record(1000, {.checkpoint_operation = CheckpointOperation::kUpload,
                                                     .checkpoint_outcome = CheckpointOutcome::kSuccess,
                                                     .checkpoint_artifact_kind = CheckpointArtifactKind::kWeights,
                                                     .checkpoint_storage_mode = CheckpointStorageMode::kObjectStorage});
  TelemetryRelay relay;
  ASSERT_TRUE(relay.ingest(job.body(), 100).is_ok());
  const std::string text = relay.render_prometheus(101);
  const std::string id = "akka_optimize_training_run_id=\"run-a\"";
  EXPECT_NE(line_of(text, "akka_optimize_training_sft_loss", id).find("} 1.5"), std::string::npos) << text;
  EXPECT_NE(line_of(text, "akka_optimize_training_sft_step_count_total", id).find("} 3"), std::string::npos) << text;
  EXPECT_NE(line_of(text, "akka_optimize_training_sft_step_duration_seconds_count", id).find("} 1"), std::string::npos);
  EXPECT_NE(line_of(text, "akka_optimize_training_sft_step_duration_seconds_bucket", "le=\"0.25\"").find("} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(line_of(text, "akka_optimize_training_sft_data_rows", "sft_data_fit=\"all\"").find("} 58"), std::string::npos);
  EXPECT_NE(line_of(text, "akka_optimize_training_checkpoint_transfer_size_bytes_count", id).find("} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE akka_optimize_training_sft_step_count_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE akka_optimize_training_sft_step_duration_seconds histogram"), std::string::npos);
  // The resource's attributes are labels; service.name is the relay's own business.
  const std::string loss = line_of(text, "akka_optimize_training_sft_loss", id);
  EXPECT_NE(loss.find("akka_optimize_training_run_attempt=\"1\""), std::string::npos) << loss;
  EXPECT_NE(loss.find("akka_optimize_training_workload=\"support-triage\""), std::string::npos) << loss;
  EXPECT_EQ(loss.find("service_name"), std::string::npos) << loss;
  EXPECT_EQ(text.find("target_info"), std::string::npos);
}

TEST(TelemetryRelay, TwoRunsAreToldApartAndShareOneFamily) {
  FakeJob a("run-a"), b("run-b");
  a.metrics.sft_loss.set(1.0);
  b.metrics.sft_loss.set(2.0);
  TelemetryRelay relay;
  ASSERT_TRUE(relay.ingest(a.body(), 10).is_ok());
  ASSERT_TRUE(relay.ingest(b.body(), 10).is_ok());
  const std::string text = relay.render_prometheus(11);
  EXPECT_NE(line_of(text, "akka_optimize_training_sft_loss", "run_id=\"run-a\"").find("} 1"), std::string::npos);
  EXPECT_NE(line_of(text, "akka_optimize_training_sft_loss", "run_id=\"run-b\"").find("} 2"), std::string::npos);
  size_t types = 0;
  for (size_t p = 0; (p = text.find("# TYPE akka_optimize_training_sft_loss ", p)) != std::string::npos; ++p) ++types;
  EXPECT_EQ(types, 1u) << text;
  EXPECT_EQ(relay.series_count(), 2u);
}

TEST(TelemetryRelay, TheLatestPushWins) {
  FakeJob job("run-a");
  TelemetryRelay relay;
  job.metrics.sft_loss.set(3.0);
  ASSERT_TRUE(relay.ingest(job.body(), 10).is_ok());
  job.metrics.sft_loss.set(0.5);
  ASSERT_TRUE(relay.ingest(job.body(), 12).is_ok());
  EXPECT_NE(line_of(relay.render_prometheus(13), "akka_optimize_training_sft_loss", "run-a").find("} 0.5"),
            std::string::npos);
  EXPECT_EQ(relay.series_count(), 1u);
}

// A push is the job's whole state: a gauge the job withdrew (its worker series when it ends)
// leaves with the next push instead of staying at its last value; the run's end, said before,
// still counts.
TEST(TelemetryRelay, ASeriesMissingFromTheNextPushIsGone) {
  FakeJob job("run-a");
  TelemetryRelay relay;
  const metrics::JobWorkerInfoAttributes worker{.job_rank = 0, .job_role = JobRole::kTrainer};
  job.metrics.job_worker_info.set(1, worker);
  job.metrics.sft_loss.set(3.0);
  ASSERT_TRUE(relay.ingest(job.body(), 10).is_ok());
  EXPECT_EQ(relay.series_count(), 2u);
  EXPECT_NE(line_of(relay.render_prometheus(10), "akka_optimize_training_job_worker_info", "run-a"), "");
  relay.run_ended("run-a", 1, 11);
  job.metrics.job_worker_info.clear(worker);
  ASSERT_TRUE(relay.ingest(job.body(), 12).is_ok());
  const std::string text = relay.render_prometheus(12);
  EXPECT_EQ(line_of(text, "akka_optimize_training_job_worker_info", "run-a"), "") << text;
  EXPECT_NE(line_of(text, "akka_optimize_training_sft_loss", "run-a"), "") << text;
  EXPECT_EQ(relay.series_count(), 1u);
  relay.expire(11 + 300);  // the end said at 11 still ends the series, though it pushed at 12
  EXPECT_EQ(relay.series_count(), 0u);
}

TEST(TelemetryRelay, AnotherAttemptIsAnotherJob) {
  FakeJob first("run-a", 1), second("run-a", 2);
  first.metrics.sft_loss.set(1);
  second.metrics.sft_loss.set(2);
  TelemetryRelay relay;
  ASSERT_TRUE(relay.ingest(first.body(), 1).is_ok());
  ASSERT_TRUE(relay.ingest(second.body(), 1).is_ok());
  EXPECT_EQ(relay.series_count(), 2u);
  relay.run_ended("run-a", 1, 2);
  relay.expire(2 + 300);
  const std::string text = relay.render_prometheus(2 + 300);
  EXPECT_EQ(line_of(text, "akka_optimize_training_sft_loss", "run_attempt=\"1\""), "");
  // The second attempt's last push was at 1: 301 s ago, past the retention as well.
  EXPECT_EQ(relay.series_count(), 0u);
}

TEST(TelemetryRelay, AJobsSeriesGoARetentionAfterItsLastPush) {
  FakeJob job("run-a");
  job.metrics.sft_loss.set(1);
  TelemetryRelay relay(RelayOptions{.retention_seconds = 60, .after_end_seconds = 10});
  ASSERT_TRUE(relay.ingest(job.body(), 100).is_ok());
  EXPECT_NE(relay.render_prometheus(159).find("run-a"), std::string::npos);
  EXPECT_EQ(relay.render_prometheus(160), "");
  EXPECT_EQ(relay.series_count(), 0u);
}

TEST(TelemetryRelay, AnEndedRunsSeriesGoAfterEndEvenIfItKeepsPushing) {
  FakeJob job("run-a");
  job.metrics.sft_loss.set(1);
  TelemetryRelay relay(RelayOptions{.retention_seconds = 60, .after_end_seconds = 10});
  ASSERT_TRUE(relay.ingest(job.body(), 100).is_ok());
  relay.run_ended("run-a", 1, 100);
  ASSERT_TRUE(relay.ingest(job.body(), 105).is_ok());  // the job's final push
  EXPECT_NE(relay.render_prometheus(109).find("run-a"), std::string::npos);
  EXPECT_EQ(relay.render_prometheus(110), "");
}

TEST(TelemetryRelay, ABodyNestedTooDeepIsRefused) {
  std::string deep = "{\"resourceMetrics\":";
  for (int i = 0; i < 50000; ++i) deep += "[";
  for (int i = 0; i < 50000; ++i) deep += "]";
  deep += "}";
  TelemetryRelay relay;
  Status st = relay.ingest(deep, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("nested more than 32 levels"), std::string::npos) << st.message();
}

TEST(TelemetryRelay, ABodyWithTooManySeriesIsRefusedWhole) {
  FakeJob job("run-a");
  job.metrics.sft_loss.set(1);
  job.metrics.sft_grad_norm.set(1);
  job.metrics.sft_learning_rate.set(1);
  TelemetryRelay relay(RelayOptions{.max_series = 2});
  Status st = relay.ingest(job.body(), 1);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("at most 2"), std::string::npos) << st.message();
  EXPECT_EQ(relay.series_count(), 0u);
  EXPECT_EQ(relay.render_prometheus(2), "");
}

TEST(TelemetryRelay, AnOversizedBodyIsRefused) {
  TelemetryRelay relay(RelayOptions{.max_body_bytes = 10});
  EXPECT_EQ(relay.ingest(std::string(11, ' '), 1).code(), StatusCode::kResourceExhausted);
}

TEST(TelemetryRelay, AMalformedBodyNamesTheFieldAndChangesNothing) {
  TelemetryRelay relay;
  const std::string bad = R"({"resourceMetrics":[{"resource":{"attributes":[
      {"key":"akka.optimize.training.run.id","value":{"stringValue":"run-a"}}]},
      "scopeMetrics":[{"metrics":[{"name":"x","gauge":{"dataPoints":[{"asDouble":1}]}},
                                  {"name":"y","gauge":{"dataPoints":[{"asDouble":"lots"}]}}]}]}]})";
  Status st = relay.ingest(bad, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.field(), "resourceMetrics[0].scopeMetrics[0].metrics[1].gauge.dataPoints[0].asDouble");
  EXPECT_EQ(relay.series_count(), 0u);
  EXPECT_EQ(relay.ingest("not json", 1).code(), StatusCode::kInvalidArgument);
}

TEST(TelemetryRelay, APushThatNamesNoRunIsRefused) {
  MeterProvider anonymous(Resource{AttributeSet({{"service.name", std::string("someone")}})});
  anonymous.instrument(InstrumentDescriptor{.name = "x"}).set(1, AttributeSet());
  TelemetryRelay relay;
  Status st = relay.ingest(otlp_json(anonymous.collect()), 1);
  EXPECT_EQ(st.field(), "resourceMetrics[0].resource");
}

TEST(TelemetryRelay, DeltaSumsAreRefused) {
  const std::string delta = R"({"resourceMetrics":[{"resource":{"attributes":[
      {"key":"akka.optimize.training.run.id","value":{"stringValue":"run-a"}}]},
      "scopeMetrics":[{"metrics":[{"name":"x","sum":{"aggregationTemporality":1,"isMonotonic":true,
      "dataPoints":[{"asInt":"3"}]}}]}]}]})";
  TelemetryRelay relay;
  EXPECT_EQ(relay.ingest(delta, 1).field(), "resourceMetrics[0].scopeMetrics[0].metrics[0].sum.aggregationTemporality");
}

TEST(TelemetryRelay, ConcurrentPushesAndScrapesAgree) {
  TelemetryRelay relay;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&relay, t] {
      FakeJob job("run-" + std::to_string(t));
      for (int i = 0; i < 50; ++i) {
        job.metrics.sft_loss.set(i);
        job.metrics.sft_step_count.add(1);
        ASSERT_TRUE(relay.ingest(job.body(), 1).is_ok());
        (void)relay.render_prometheus(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(relay.series_count(), 8u);
  const std::string text = relay.render_prometheus(2);
  for (int t = 0; t < 4; ++t) {
    EXPECT_NE(line_of(text, "akka_optimize_training_sft_step_count_total", "run-" + std::to_string(t)).find("} 50"),
              std::string::npos)
        << text;
  }
}

}  // namespace
}  // namespace trainer::telemetry

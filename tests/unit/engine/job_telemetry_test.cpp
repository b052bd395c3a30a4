// trainer-job records the engine's SFT measurements through the generated telemetry API.
#include <gtest/gtest.h>

#include "job/job_telemetry.h"

namespace trainer::job {
namespace {

plan::Plan local_plan() {
  plan::Plan p;
  p.workload = "support-triage";
  p.baseModel = "/models/qwen3";
  p.config.dataset = "train.jsonl";
  p.config.lora.rank = 16;
  return p;
}

std::string scrape(JobTelemetry& t) { return telemetry::prometheus_exposition(*t.provider()).body; }

TEST(JobTelemetry, RecordsStepMetricsFromEventsAfterTheResolvedConfiguration) {
  JobTelemetry t(local_plan(), RunIdentity{});
  t.on_event({{"type", "data_fit"}, {"rows", 10}, {"truncated", 2}, {"exact", 1}, {"dropped", 1}});
  EXPECT_EQ(t.provider(), nullptr);
  t.on_event({{"type", "resolved"}, {"settingsSha", "abc123"}, {"config", nlohmann::json::object()}});
  ASSERT_NE(t.provider(), nullptr);
  nlohmann::json step = {{"type", "step"}, {"step", 1}, {"loss", 1.5}, {"learningRate", 0.0001}, {"gradNorm", 0.75},
                         {"tokenAccuracy", 0.25}, {"tokensPerSecond", 1234.0}, {"batchTokens", 96}, {"stepSeconds", 0.5},
                         {"inputSeconds", 0.01}, {"forwardBackwardSeconds", 0.4}, {"optimizerSeconds", 0.1},
                         {"paddingShare", 0.125}, {"memory", {{"rssPeakBytes", 1048576}}}};
  t.on_event(step);
  t.on_event(step);  // reported twice: counts once
  t.on_event({{"type", "validation"}, {"step", 1}, {"validationLoss", 1.25}, {"evaluationSeconds", 0.2}});
  const std::string text = scrape(t);
  EXPECT_NE(text.find("akka_optimize_training_sft_loss"), std::string::npos) << text;
  EXPECT_NE(text.find("akka_optimize_training_sft_step_count_total"), std::string::npos);
  EXPECT_NE(text.find("run_settings_sha=\"abc123\""), std::string::npos) << text;
  auto line_of = [&](const std::string& prefix) {
    auto pos = text.find("\n" + prefix);
    if (pos == std::string::npos) return std::string();
    auto end = text.find('\n', pos + 1);
    return text.substr(pos + 1, end - pos - 1);
  };
  EXPECT_EQ(line_of("akka_optimize_training_sft_step_count_total").substr(line_of("akka_optimize_training_sft_step_count_total").rfind(' ') + 1), "1");
  EXPECT_NE(line_of("akka_optimize_training_sft_loss").find(" 1.5"), std::string::npos);
  EXPECT_NE(line_of("akka_optimize_training_sft_validation_loss").find(" 1.25"), std::string::npos);
  EXPECT_NE(text.find("sft_data_fit=\"truncated\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("sft_step_phase=\"forward_backward\"} 0.4"), std::string::npos) << text;
  EXPECT_EQ(text.find("akka_optimize_training_sft_mfu"), std::string::npos);  // absent on a CPU
}

}  // namespace
}  // namespace trainer::job

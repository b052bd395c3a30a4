// The native engine's reports of itself (engine/engine_reports.h): the resolved configuration
// under engine names, the rollout engine of RL runs, and what setup changed.
#include "engine/engine_reports.h"

#include <gtest/gtest.h>

namespace trainer::engine {
namespace {

plan::Plan sft_plan() {
  plan::Plan p;
  p.config.optimizer.beta1 = 0.85;
  p.config.optimizer.schedule = plan::Schedule::kConstant;
  p.config.training.batchSize = 6;
  p.config.training.gradientAccumulation = 2;
  p.config.precision = plan::Precision::kFp32;
  p.execution.gpus = 0;
  return p;
}

TEST(NativeEngineConfig, CarriesThePlansOptimizerLoraAndBatchesUnderEngineNames) {
  const nlohmann::json c =
      native_engine_config(sft_plan(), {.device = "cpu", .ranks = 2, .total_steps = 30, .warmup_steps = 3});
  EXPECT_EQ(c["adam_beta1"], 0.85);
  EXPECT_EQ(c["adam_beta2"], 0.999);
  EXPECT_EQ(c["adam_epsilon"], 1e-8);
  EXPECT_EQ(c["lr_scheduler_type"], "constant_with_warmup");
  EXPECT_EQ(c["warmup_steps"], 3);
  EXPECT_EQ(c["max_steps"], 30);
  EXPECT_EQ(c["per_device_train_batch_size"], 3);  // the micro-batch is shared by the 2 ranks
  EXPECT_EQ(c["gradient_accumulation_steps"], 2);
  EXPECT_EQ(c["dtype"], "float32");
  EXPECT_EQ(c["lora_r"], 8);
  EXPECT_FALSE(c.contains("num_generations"));
  EXPECT_TRUE(native_rollout_engine(sft_plan(), {.device = "cpu"}).is_null());
}

TEST(NativeEngineConfig, RlRunsTakeTheRlOptimizerAndAddTheirGenerationKnobs) {
  plan::Plan p;
  p.config.method = plan::Method::kGspo;
  p.config.rl.optimizer.beta2 = 0.95;
  p.config.rl.groupSize = 4;
  p.config.rl.promptsPerStep = 3;
  const nlohmann::json c = native_engine_config(p, {.device = "cpu", .total_steps = 5});
  EXPECT_EQ(c["adam_beta2"], 0.95);
  EXPECT_EQ(c["learning_rate"], 1e-5);
  EXPECT_EQ(c["generation_batch_size"], 12);
  EXPECT_EQ(c["importance_sampling_level"], "sequence");
  EXPECT_EQ(c["reward_funcs"], nlohmann::json::array({"json-label-match"}));
  const nlohmann::json rollout = native_rollout_engine(p, {.device = "cpu"});
  EXPECT_EQ(rollout["kind"], "native");
  EXPECT_EQ(rollout["batch"]["completionsPerStep"], 12);
}

TEST(NativeSetupChanges, NameTheDevicesTheRunDidNotGet) {
  plan::Plan p = sft_plan();
  EXPECT_EQ(native_setup_changes(p, {.device = "cpu"}), nlohmann::json::array());
  p.execution.gpus = 2;
  const nlohmann::json cpu = native_setup_changes(p, {.device = "cpu", .cuda = false, .ranks = 1});
  ASSERT_EQ(cpu.size(), 1u);
  EXPECT_EQ(cpu[0]["field"], "execution.gpus");
  EXPECT_EQ(cpu[0]["from"], 2);
  EXPECT_EQ(cpu[0]["to"], 0);
  p.config.method = plan::Method::kGrpo;
  const nlohmann::json one = native_setup_changes(p, {.device = "cuda:0", .cuda = true, .ranks = 1});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0]["to"], 1);
  EXPECT_NE(one[0]["why"].get<std::string>().find("grpo trains on one device"), std::string::npos);
}

}  // namespace
}  // namespace trainer::engine

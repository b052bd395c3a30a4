// Plans of reinforcement runs (config.method grpo/gspo): their fields, defaults, and the
// refusal by name of unknown fields, SFT fields on an RL plan and RL fields on an SFT plan.
#include <gtest/gtest.h>

#include "plan/plan.h"

namespace trainer::plan {
namespace {

Result<Plan> parse(const std::string& config) {
  return parse_plan(R"({"kind": "run", "workload": "w", "baseModel": "m", "config": )" + config + "}", "plan.json");
}

TEST(RlPlan, ParsesGrpoFieldsAndFillsDefaults) {
  Result<Plan> p = parse(R"({"dataset": "d", "method": "gspo", "klBeta": 0.04,
      "reward": {"terms": [{"kind": "json-label-match", "weight": 0.5, "name": "labels"}]},
      "rlHyperparams": {"groupSize": 4, "lossAggregation": "dr_grpo", "clipHigh": 0.28,
                        "optimizer": {"learningRate": 0.0002}},
      "hyperparams": {"training": {"maxSteps": 3}}})");
  ASSERT_TRUE(p.is_ok()) << p.status().describe();
  const RunConfig& c = p->config;
  EXPECT_EQ(c.method, Method::kGspo);
  EXPECT_DOUBLE_EQ(c.klBeta, 0.04);
  ASSERT_EQ(c.rewardTerms.size(), 1u);
  EXPECT_EQ(c.rewardTerms[0].name, "labels");
  EXPECT_DOUBLE_EQ(c.rewardTerms[0].weight, 0.5);
  EXPECT_EQ(c.rl.groupSize, 4);
  EXPECT_EQ(c.rl.promptsPerStep, 4);  // default
  EXPECT_EQ(c.rl.lossAggregation, LossAggregation::kDrGrpo);
  EXPECT_DOUBLE_EQ(c.rl.clipLow, 0.2);
  EXPECT_DOUBLE_EQ(c.rl.clipHigh, 0.28);
  EXPECT_DOUBLE_EQ(c.rl.optimizer.learningRate, 2e-4);
  EXPECT_DOUBLE_EQ(c.active_optimizer().learningRate, 2e-4);
  // The resolved config shows every RL default and no SFT-only field.
  nlohmann::json j = config_to_json(c);
  EXPECT_EQ(j["rlHyperparams"]["scaleRewards"], "group");
  EXPECT_EQ(j["rlHyperparams"]["maxCompletionLength"], 256);
  EXPECT_EQ(j["rlHyperparams"]["optimizer"]["schedule"], "linear");
  EXPECT_EQ(j["reward"]["terms"][0]["kind"], "json-label-match");
  EXPECT_FALSE(j["hyperparams"].contains("optimizer"));
  EXPECT_FALSE(j["hyperparams"]["training"].contains("batchSize"));
}

TEST(RlPlan, AGrpoPlanWithoutRlFieldsGetsTheDefaultRewardTerm) {
  Result<Plan> p = parse(R"({"dataset": "d", "method": "grpo"})");
  ASSERT_TRUE(p.is_ok()) << p.status().describe();
  ASSERT_EQ(p->config.rewardTerms.size(), 1u);
  EXPECT_EQ(p->config.rewardTerms[0].kind, "json-label-match");
  EXPECT_DOUBLE_EQ(p->config.klBeta, 0.0);
}

TEST(RlPlan, AnRlFieldOnAnSftPlanIsRefusedAsSuch) {
  for (const char* field : {"reward", "klBeta", "rlHyperparams"}) {
    Result<Plan> p = parse(std::string(R"({"dataset": "d", ")") + field + R"(": {}})");
    ASSERT_FALSE(p.is_ok()) << field;
    EXPECT_EQ(p.status().field(), std::string("config.") + field);
    EXPECT_NE(p.status().message().find("reinforcement-learning field"), std::string::npos) << p.status().message();
  }
}

TEST(RlPlan, SftFieldsOnAnRlPlanAreRefusedAsSuch) {
  Result<Plan> p = parse(R"({"dataset": "d", "method": "grpo", "hyperparams": {"optimizer": {"learningRate": 0.1}}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.hyperparams.optimizer");
  EXPECT_NE(p.status().message().find("config.rlHyperparams.optimizer"), std::string::npos);
  p = parse(R"({"dataset": "d", "method": "grpo", "hyperparams": {"training": {"batchSize": 2}}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.hyperparams.training.batchSize");
  p = parse(R"({"dataset": "d", "method": "gspo", "validationDataset": "v"})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.validationDataset");
}

TEST(RlPlan, UnknownAndBadRlFieldsAreRefusedByName) {
  Result<Plan> p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"groupSise": 4}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.groupSise");
  EXPECT_NE(p.status().message().find("groupSize"), std::string::npos);
  p = parse(R"({"dataset": "d", "method": "grpo", "reward": {"terms": [{"kind": "json-label-match", "wieght": 1}]}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.reward.terms[0].wieght");
  p = parse(R"({"dataset": "d", "method": "grpo", "reward": {"terms": [{"kind": "exact"}]}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.reward.terms[0].kind");
  p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"groupSize": 1}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.groupSize");
  p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"lossAggregation": "mean"}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.lossAggregation");
  p = parse(R"({"dataset": "d", "method": "grpo", "maxSeqLength": 64, "rlHyperparams": {"maxCompletionLength": 64}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.maxCompletionLength");
}

TEST(RlPlan, StopStringsAreAListOfNonEmptyStringsRefusedByIndex) {
  Result<Plan> p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"stopStrings": ["</answer>", "\n\n"]}})");
  ASSERT_TRUE(p.is_ok()) << p.status().describe();
  EXPECT_EQ(p->config.rl.stopStrings, (std::vector<std::string>{"</answer>", "\n\n"}));
  EXPECT_EQ(config_to_json(p->config)["rlHyperparams"]["stopStrings"][0], "</answer>");
  EXPECT_TRUE(parse(R"({"dataset": "d", "method": "grpo"})")->config.rl.stopStrings.empty());  // default: none
  p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"stopStrings": ["ok", ""]}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.stopStrings[1]");
  EXPECT_NE(p.status().message().find("non-empty string"), std::string::npos) << p.status().message();
  p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"stopStrings": [3]}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.stopStrings[0]");
  p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"stopStrings": "</answer>"}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.stopStrings");
  EXPECT_NE(p.status().message().find("list"), std::string::npos) << p.status().message();
  // On an SFT plan it is an RL field.
  p = parse(R"({"dataset": "d", "rlHyperparams": {"stopStrings": ["x"]}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().field().find("rlHyperparams"), std::string::npos) << p.status().field();
}

TEST(RlPlan, ToolsNameAnExecutableWithATimeoutAndACallBudget) {
  Result<Plan> p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"tools": {"command": "/opt/tool"}}})");
  ASSERT_TRUE(p.is_ok()) << p.status().describe();
  ASSERT_TRUE(p->config.rl.tools.has_value());
  EXPECT_EQ(p->config.rl.tools->command, "/opt/tool");
  EXPECT_DOUBLE_EQ(p->config.rl.tools->timeoutSeconds, 10);  // defaults
  EXPECT_EQ(p->config.rl.tools->maxCalls, 4);
  nlohmann::json j = config_to_json(p->config)["rlHyperparams"]["tools"];
  EXPECT_EQ(j, (nlohmann::json{{"command", "/opt/tool"}, {"timeoutSeconds", 10.0}, {"maxCalls", 4}}));
  EXPECT_TRUE(config_to_json(parse(R"({"dataset": "d", "method": "grpo"})")->config)["rlHyperparams"]["tools"].is_null());
  p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"tools": {"timeoutSeconds": 5}}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.tools.command");
  p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"tools": {"command": "t", "maxCalls": 0}}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.tools.maxCalls");
  p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"tools": {"command": "t", "timeoutSeconds": 0}}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.tools.timeoutSeconds");
  p = parse(R"({"dataset": "d", "method": "grpo", "rlHyperparams": {"tools": {"command": "t", "timeout": 3}}})");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.rlHyperparams.tools.timeout");
}

TEST(RlPlan, StepsCountGenerationBatchesTimesIterations) {
  Result<Plan> p = parse(R"({"dataset": "d", "method": "grpo", "hyperparams": {"training": {"epochs": 2}},
      "rlHyperparams": {"promptsPerStep": 3, "iterationsPerBatch": 2}})");
  ASSERT_TRUE(p.is_ok()) << p.status().describe();
  EXPECT_EQ(total_steps(p->config, 10), 4 * 2 * 2);
}

}  // namespace
}  // namespace trainer::plan

#include "plan/plan.h"

#include <gtest/gtest.h>

namespace trainer::plan {
namespace {

constexpr const char* kDocExample = R"({
  "kind": "run", "workload": "support-triage", "baseModel": "unsloth/Llama-3.2-1B-Instruct",
  "config": { "dataset": "support-triage-train", "method": "sft",
              "hyperparams": { "lora": {"rank": 8}, "optimizer": {"learningRate": 0.0001},
                               "training": {"epochs": 2} },
              "maxSeqLength": 2048, "model": {"precision": "BF16"} },
  "execution": { "gpus": 1, "saveEvery": 20, "keepAdapters": 4 },
  "description": "two epochs at rank 8", "configName": "r8-e2" })";

TEST(Plan, ParsesTheDocumentedExample) {
  Result<Plan> plan = parse_plan(kDocExample, "plan.json");
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->workload, "support-triage");
  EXPECT_EQ(plan->baseModel.value(), "unsloth/Llama-3.2-1B-Instruct");
  EXPECT_EQ(plan->config.lora.rank, 8);
  EXPECT_DOUBLE_EQ(plan->config.optimizer.learningRate, 1e-4);
  EXPECT_EQ(plan->config.training.epochs, 2);
  EXPECT_EQ(plan->execution.saveEvery.value(), 20);
  EXPECT_EQ(plan->configName.value(), "r8-e2");
}

TEST(Plan, YamlAndJsonGiveTheSamePlan) {
  const char* yaml = R"(
kind: run
workload: support-triage
baseModel: unsloth/Llama-3.2-1B-Instruct
config:
  dataset: support-triage-train
  method: sft
  hyperparams:
    lora: {rank: 8}
    optimizer: {learningRate: 1e-4}
    training: {epochs: 2}
  maxSeqLength: 2048
  model: {precision: BF16}
execution: {gpus: 1, saveEvery: 20, keepAdapters: 4}
description: two epochs at rank 8
configName: r8-e2
)";
  Result<Plan> a = parse_plan(kDocExample, "a.json");
  Result<Plan> b = parse_plan(yaml, "b.yaml");
  ASSERT_TRUE(a.is_ok() && b.is_ok()) << b.status().to_string();
  EXPECT_EQ(to_json(*a), to_json(*b));
}

TEST(Plan, UnknownFieldsAreRefusedByTheirPath) {
  Result<Plan> p = parse_plan(
      R"({"kind":"run","workload":"w","config":{"dataset":"d","hyperparams":{"lora":{"rnak":8}}}})", "plan.json");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(), "plan.json: config.hyperparams.lora.rnak: unknown field");

  Result<Plan> top = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d}\nretries: 3\n", "p.yaml");
  ASSERT_FALSE(top.is_ok());
  EXPECT_EQ(top.status().message(), "p.yaml: retries: unknown field");
}

TEST(Plan, BadValuesNameTheFieldAndTheValue) {
  Result<Plan> p = parse_plan(
      R"({"kind":"run","workload":"w","config":{"dataset":"d","hyperparams":{"lora":{"rank":-1}}}})", "plan.json");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message(), "plan.json: config.hyperparams.lora.rank: must be between 1 and 4096, got -1");

  Result<Plan> prec = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d, model: {precision: fp16}}\n", "p");
  ASSERT_FALSE(prec.is_ok());
  EXPECT_EQ(prec.status().message(), "p: config.model.precision: must be one of \"BF16\", \"FP32\", got \"fp16\"");

  Result<Plan> no_ds = parse_plan("kind: run\nworkload: w\nconfig: {method: sft}\n", "p");
  ASSERT_FALSE(no_ds.is_ok());
  EXPECT_EQ(no_ds.status().message(), "p: config.dataset: required field is missing");

  Result<Plan> lr = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d, hyperparams: {optimizer: {learningRate: \"fast\"}}}\n", "p");
  ASSERT_FALSE(lr.is_ok());
  EXPECT_EQ(lr.status().message(), "p: config.hyperparams.optimizer.learningRate: must be a number, got \"fast\"");
}

TEST(Plan, MalformedTextIsRefusedWithItsSource) {
  Result<Plan> p = parse_plan("{\"kind\": ", "broken.json");
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("broken.json: not valid JSON"), std::string::npos);
  Result<Plan> k = parse_plan("kind: pipeline\nworkload: w\n", "p.yaml");
  ASSERT_FALSE(k.is_ok());
  EXPECT_EQ(k.status().message(), "p.yaml: kind: must be \"run\", got \"pipeline\"");
}

TEST(Plan, ResolvedPlanShowsEveryDefault) {
  Result<Plan> p = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d}\n", "p");
  ASSERT_TRUE(p.is_ok());
  nlohmann::json j = to_json(*p);
  EXPECT_EQ(j["config"]["method"], "sft");
  EXPECT_EQ(j["config"]["hyperparams"]["lora"]["rank"], 8);
  EXPECT_EQ(j["config"]["hyperparams"]["optimizer"]["schedule"], "linear");
  EXPECT_EQ(j["config"]["maxSeqLength"], 2048);
  EXPECT_EQ(j["config"]["model"]["precision"], "BF16");
  EXPECT_EQ(j["execution"]["gpus"], 1);
  EXPECT_TRUE(j["config"]["hyperparams"]["training"]["maxSteps"].is_null());
  // The resolved plan parses back to itself.
  Result<Plan> again = plan_from_json(j, "resolved");
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(to_json(*again), j);
}

TEST(Plan, SettingsShaDependsOnConfigAndDataOnly) {
  Result<Plan> a = parse_plan(kDocExample, "a");
  ASSERT_TRUE(a.is_ok());
  Plan b = *a;
  b.description = "another description";
  b.execution.gpus = 4;
  b.config.dataset = "other-alias-same-content";
  EXPECT_EQ(settings_sha(a->config, "abc"), settings_sha(b.config, "abc"));
  EXPECT_NE(settings_sha(a->config, "abc"), settings_sha(a->config, "abd"));
  b.config.lora.rank = 16;
  EXPECT_NE(settings_sha(a->config, "abc"), settings_sha(b.config, "abc"));
  EXPECT_EQ(settings_sha(a->config, "abc").size(), 64u);
  EXPECT_EQ(flatten_config(a->config, "abc")["config.hyperparams.lora.rank"], 8);
}

TEST(Plan, TotalStepsFromEpochsOrMaxSteps) {
  RunConfig c;
  c.training.batchSize = 4;
  c.training.gradientAccumulation = 2;
  c.training.epochs = 3;
  EXPECT_EQ(total_steps(c, 17), 3 * 3);  // 5 micro-batches -> 3 optimizer steps per epoch
  c.training.maxSteps = 7;
  EXPECT_EQ(total_steps(c, 17), 7);
}

}  // namespace
}  // namespace trainer::plan

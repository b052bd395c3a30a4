#include "plan/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <fstream>
#include <sstream>

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
  EXPECT_EQ(p.status().field(), "config.hyperparams.lora.rnak");
  EXPECT_EQ(p.status().message(), "unknown field; did you mean rank?");

  Result<Plan> top = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d}\nretries: 3\n", "p.yaml");
  ASSERT_FALSE(top.is_ok());
  EXPECT_EQ(top.status().describe(),
            "retries: unknown field; a plan takes kind, workload, baseModel, config, execution, grader, graderInstructions, description, "
            "configName, submissionId, pauseAtStep, warmStartModelId, modelName, smoke, source");
}

TEST(Plan, SmokeTakesItsSettingsOrTrueForTheDefaultsAndRefusesBadOnesByName) {
  const std::string head = "kind: run\nworkload: w\nconfig: {dataset: d}\n";
  Result<Plan> none = parse_plan(head, "p.yaml");
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->smoke.has_value());
  EXPECT_TRUE(to_json(*none)["smoke"].is_null());
  Result<Plan> set = parse_plan(head + "smoke: {steps: 3, rows: 8}\n", "p.yaml");
  ASSERT_TRUE(set.is_ok()) << set.status().to_string();
  EXPECT_EQ(to_json(*set)["smoke"], (nlohmann::json{{"steps", 3}, {"rows", 8}}));
  Result<Plan> defaults = parse_plan(head + "smoke: true\n", "p.yaml");
  ASSERT_TRUE(defaults.is_ok());
  EXPECT_EQ(defaults->smoke->steps, 4);
  EXPECT_EQ(defaults->smoke->rows, 16);
  EXPECT_FALSE(parse_plan(head + "smoke: false\n", "p.yaml")->smoke.has_value());
  const std::pair<std::string, std::string> bad[] = {
      {"smoke: {steps: 1}", "smoke.steps: must be between 2 and 100, got 1"},
      {"smoke: {rows: 0}", "smoke.rows: must be between 1 and 10000, got 0"},
      {"smoke: {step: 3}", "smoke.step: unknown field; did you mean steps?"},
      {"smoke: 3", "smoke: must be an object {steps, rows} or true, got 3"},
  };
  for (const auto& [line, error] : bad) {
    Result<Plan> p = parse_plan(head + line + "\n", "p.yaml");
    ASSERT_FALSE(p.is_ok()) << line;
    EXPECT_EQ(p.status().describe(), error) << line;
  }
}

TEST(Plan, AMisspeltFieldSuggestsTheNearestValidOne) {
  Result<Plan> p = parse_plan(
      "kind: run\nworkload: w\nconfig:\n  dataset: d\n  hyperparams:\n    optimizer: {learningRat: 0.1}\n", "p.yaml");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().describe(), "config.hyperparams.optimizer.learningRat: unknown field; did you mean learningRate?");
  Result<Plan> seq = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d, maxSeqLen: 64}\n", "p.yaml");
  ASSERT_FALSE(seq.is_ok());
  EXPECT_EQ(seq.status().describe(), "config.maxSeqLen: unknown field; did you mean maxSeqLength?");
  Result<Plan> mod = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d, hyperparams: {lora: {targetModules: [q_prj]}}}\n", "p");
  ASSERT_FALSE(mod.is_ok());
  EXPECT_NE(mod.status().message().find("(did you mean q_proj?)"), std::string::npos) << mod.status().message();
}

TEST(Plan, LocateFieldGivesLineAndColumnOfTheKey) {
  const std::string yaml =
      "kind: run\n"
      "workload: w\n"
      "config:\n"
      "  dataset: d\n"
      "  hyperparams:\n"
      "    optimizer:\n"
      "      learningRat: 0.1\n";
  auto at = locate_field(yaml, "config.hyperparams.optimizer.learningRat");
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->line, 7);
  EXPECT_EQ(at->column, 7);
  // A missing field points at the deepest enclosing key that is written.
  auto missing = locate_field(yaml, "config.hyperparams.lora.rank");
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->line, 5);
  // Flow style and JSON text too.
  auto flow = locate_field("{\"kind\": \"run\",\n \"workload\": \"w\"}", "workload");
  ASSERT_TRUE(flow.has_value());
  EXPECT_EQ(flow->line, 2);
  EXPECT_EQ(flow->column, 2);
  EXPECT_FALSE(locate_field(yaml, "nothing.here").has_value());
  EXPECT_FALSE(locate_field("key: [unclosed", "key").has_value());
}

// Every field the parser reads is in the table, with the range the parser enforces. The RL
// fields appear only in an RL plan's resolved form, so an SFT and a GRPO plan (one with tools) are walked;
// the fields of an array's object elements are walked as `path[].field`.
TEST(PlanFields, TheTableCoversEveryFieldOfTheResolvedPlan) {
  Plan rl;
  rl.config.method = Method::kGrpo;
  // Terms of every kind, so that every kind's fields are resolved.
  // caFile and network are shown only when set.
  rl.config.rewardTerms = {{.kind = "json-label-match"}, {.kind = "rule:/r.py", .networkAllow = {"h:443"}},
                           {.kind = "model:judge"}, {.kind = "http:https://h/s", .caFile = "/ca.pem"}};
  std::vector<std::string> leaves;
  std::function<void(const nlohmann::json&, const std::string&)> walk = [&](const nlohmann::json& v,
                                                                          const std::string& path) {
    if (!path.empty() && std::find(leaves.begin(), leaves.end(), path) == leaves.end()) leaves.push_back(path);
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) walk(it.value(), path.empty() ? it.key() : path + "." + it.key());
    } else if (v.is_array()) {  // the fields of object elements, as `path[].field`
      for (const auto& element : v) {
        if (!element.is_object()) continue;
        for (auto it = element.begin(); it != element.end(); ++it) walk(it.value(), path + "[]." + it.key());
      }
    }
  };
  walk(to_json(Plan{}), "");
  walk(to_json(rl), "");
  Plan with_tools = rl;  // rlHyperparams.tools is absent (null) unless set
  with_tools.config.rl.tools = ToolSettings{.command = "/opt/tool", .networkAllow = {"h:443"}};
  walk(to_json(with_tools), "");
  Plan with_smoke;  // smoke is absent (null) unless set
  with_smoke.smoke = SmokeSettings{};
  walk(to_json(with_smoke), "");
  for (const auto& path : leaves) EXPECT_NE(find_field(path), nullptr) << path << " is not in the field table";
  // Input spellings only: the resolved plan writes source.model as warmStartModelId.
  const std::vector<std::string> input_only = {"source", "source.model"};
  for (const auto& spec : plan_fields()) {
    if (std::find(input_only.begin(), input_only.end(), std::string(spec.path)) != input_only.end()) continue;
    EXPECT_NE(std::find(leaves.begin(), leaves.end(), std::string(spec.path)), leaves.end())
        << spec.path << " is in the table but not in the resolved plan";
  }
  EXPECT_EQ(plan_fields().size(), leaves.size() + input_only.size());
}

TEST(PlanFields, RangesAreTheOnesTheParserEnforces) {
  const FieldSpec* rank = find_field("config.hyperparams.lora.rank");
  ASSERT_NE(rank, nullptr);
  EXPECT_EQ(field_range_text(*rank), "1 to 4096");
  EXPECT_EQ(field_default_text(*rank), "8");
  EXPECT_EQ(field_range_text(*find_field("config.hyperparams.optimizer.learningRate")), "(0, 1]");
  EXPECT_EQ(field_default_text(*find_field("config.hyperparams.training.maxSteps")), "absent");
  EXPECT_EQ(field_default_text(*find_field("config.dataset")), "required");
  EXPECT_EQ(field_default_text(*find_field("config.hyperparams.optimizer.schedule")), "linear");
  auto over = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d, hyperparams: {lora: {rank: 4097}}}\n", "p");
  ASSERT_FALSE(over.is_ok());
  EXPECT_EQ(over.status().message(), "must be between 1 and 4096, got 4097");
  auto at_max = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d, hyperparams: {lora: {rank: 4096}}}\n", "p");
  EXPECT_TRUE(at_max.is_ok());
}

// docs/plans.md carries the generated table; regenerate it with TRAINER_UPDATE_DOCS=1.
TEST(PlanFields, DocsPlansMdCarriesTheGeneratedTable) {
  const std::string path = std::string(TRAINER_SOURCE_DIR) + "/docs/plans.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream buf;
  buf << in.rdbuf();
  std::string doc = buf.str();
  const std::string begin = "<!-- BEGIN generated from src/plan/plan.cpp (plan_fields) -->\n";
  const std::string end = "<!-- END generated -->";
  const size_t a = doc.find(begin);
  const size_t b = doc.find(end);
  ASSERT_NE(a, std::string::npos) << "docs/plans.md lost its BEGIN marker";
  ASSERT_NE(b, std::string::npos) << "docs/plans.md lost its END marker";
  const std::string expected = fields_reference_markdown();
  const std::string actual = doc.substr(a + begin.size(), b - a - begin.size());
  if (actual != expected && std::getenv("TRAINER_UPDATE_DOCS")) {
    doc.replace(a + begin.size(), b - a - begin.size(), expected);
    std::ofstream(path) << doc;
    return;
  }
  EXPECT_EQ(actual, expected) << "docs/plans.md is out of date: run plan_test with TRAINER_UPDATE_DOCS=1";
}

TEST(Plan, BadValuesNameTheFieldAndTheValue) {
  Result<Plan> p = parse_plan(
      R"({"kind":"run","workload":"w","config":{"dataset":"d","hyperparams":{"lora":{"rank":-1}}}})", "plan.json");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().field(), "config.hyperparams.lora.rank");
  EXPECT_EQ(p.status().message(), "must be between 1 and 4096, got -1");

  Result<Plan> prec = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d, model: {precision: fp16}}\n", "p");
  ASSERT_FALSE(prec.is_ok());
  EXPECT_EQ(prec.status().describe(), "config.model.precision: must be one of \"BF16\", \"FP32\", got \"fp16\"");

  Result<Plan> no_ds = parse_plan("kind: run\nworkload: w\nconfig: {method: sft}\n", "p");
  ASSERT_FALSE(no_ds.is_ok());
  EXPECT_EQ(no_ds.status().describe(), "config.dataset: required field is missing");

  Result<Plan> lr = parse_plan("kind: run\nworkload: w\nconfig: {dataset: d, hyperparams: {optimizer: {learningRate: \"fast\"}}}\n", "p");
  ASSERT_FALSE(lr.is_ok());
  EXPECT_EQ(lr.status().describe(), "config.hyperparams.optimizer.learningRate: must be a number, got \"fast\"");
}

TEST(Plan, MalformedTextIsRefusedWithItsSource) {
  Result<Plan> p = parse_plan("{\"kind\": ", "broken.json");
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("broken.json"), std::string::npos) << p.status().message();
  EXPECT_TRUE(p.status().field().empty());
  Result<Plan> y = parse_plan("kind: run\nworkload: [w\n", "broken.yaml");
  ASSERT_FALSE(y.is_ok());
  EXPECT_EQ(y.status().message().rfind("broken.yaml:", 0), 0u) << y.status().message();
  Result<Plan> k = parse_plan("kind: pipeline\nworkload: w\n", "p.yaml");
  ASSERT_FALSE(k.is_ok());
  EXPECT_EQ(k.status().describe(), "kind: must be \"run\", got \"pipeline\"");
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

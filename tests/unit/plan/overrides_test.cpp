// A child run's plan: the parent's resolved plan, the override document's declared fields, and
// the child's own budget; what each restore kind may change (plan/overrides.h).
#include "plan/overrides.h"

#include <gtest/gtest.h>

#include "plan/plan.h"

namespace trainer::plan {
namespace {

using json = nlohmann::json;

json parse(const std::string& text) {
  auto p = parse_plan(text, "parent.yaml");
  EXPECT_TRUE(p.is_ok()) << p.status().describe();
  return p.is_ok() ? to_json(*p) : json::object();
}

json parent() {
  auto p = parse_plan(R"(
kind: run
workload: w
baseModel: m
config:
  dataset: d
  hyperparams:
    optimizer: {learningRate: 0.001}
    training: {epochs: 2}
execution: {gpus: 0}
submissionId: s-1
)",
                      "parent.yaml");
  EXPECT_TRUE(p.is_ok()) << p.status().describe();
  return to_json(*p);
}

TEST(ChildPlan, DottedAndNestedOverridesApplyAndTheBudgetIsTheChildsOwn) {
  json overrides = {{"hyperparams.optimizer.learningRate", 5e-5},
                    {"hyperparams", {{"lora", {{"alpha", 32}}}}}};
  auto child = child_plan(parent(), overrides, {.restore = Restore::kWeights}, 40);
  ASSERT_TRUE(child.is_ok()) << child.status().describe();
  EXPECT_EQ(child->plan["config"]["hyperparams"]["optimizer"]["learningRate"], 5e-5);
  EXPECT_EQ(child->plan["config"]["hyperparams"]["lora"]["alpha"], 32);
  EXPECT_EQ(child->plan["config"]["hyperparams"]["training"]["maxSteps"], 40);
  EXPECT_FALSE(child->plan.contains("submissionId"));
  EXPECT_EQ(child->plan["workload"], "w");
  EXPECT_TRUE(plan_from_json(child->plan, "child").is_ok());
}

TEST(ChildPlan, ConfigPrefixIsAccepted) {
  auto child = child_plan(parent(), {{"config.hyperparams.optimizer.learningRate", 0.002}},
                          {.restore = Restore::kTrainingState}, 5);
  ASSERT_TRUE(child.is_ok()) << child.status().describe();
  EXPECT_EQ(child->plan["config"]["hyperparams"]["optimizer"]["learningRate"], 0.002);
}

TEST(ChildPlan, UndeclaredFieldIsRefusedByName) {
  auto child = child_plan(parent(), {{"hyperparams.optimizer.learningRat", 0.1}}, {}, 5);
  ASSERT_FALSE(child.is_ok());
  EXPECT_EQ(child.status().field(), "overrides.hyperparams.optimizer.learningRat");
  EXPECT_NE(child.status().message().find("not a declared plan field"), std::string::npos);
}

TEST(ChildPlan, FieldsOutsideConfigAreRefused) {
  auto child = child_plan(parent(), {{"execution", {{"gpus", 2}}}}, {}, 5);
  ASSERT_FALSE(child.is_ok());
  EXPECT_EQ(child.status().field(), "overrides.execution");
}

TEST(ChildPlan, BudgetFieldsAreRefused) {
  auto child = child_plan(parent(), {{"hyperparams.training.epochs", 3}}, {}, 5);
  ASSERT_FALSE(child.is_ok());
  EXPECT_EQ(child.status().field(), "overrides.hyperparams.training.epochs");
}

TEST(ChildPlan, TrainingStateAllowsOnlyTheLearningRateEvenAtAnEqualValue) {
  auto child = child_plan(parent(), {{"hyperparams.training.batchSize", 4}}, {.restore = Restore::kTrainingState}, 5);
  ASSERT_FALSE(child.is_ok());
  EXPECT_EQ(child.status().field(), "overrides.hyperparams.training.batchSize");
  EXPECT_NE(child.status().message().find("only hyperparams.optimizer.learningRate"), std::string::npos);
}

TEST(ChildPlan, ContinuationAlsoAllowsValidationFrequency) {
  const json o = {{"hyperparams.training.validationFrequencySteps", 10}};
  EXPECT_FALSE(child_plan(parent(), o, {.restore = Restore::kTrainingState}, 5).is_ok());
  EXPECT_TRUE(child_plan(parent(), o, {.restore = Restore::kTrainingState, .continuation = true}, 5).is_ok());
}

TEST(ChildPlan, WeightsBranchKeepsTheAdaptersShape) {
  auto child = child_plan(parent(), {{"hyperparams.lora.rank", 16}}, {.restore = Restore::kWeights}, 5);
  ASSERT_FALSE(child.is_ok());
  EXPECT_EQ(child.status().field(), "overrides.hyperparams.lora.rank");
}

TEST(ChildPlan, NullValuesAndDuplicatesAreRefused) {
  EXPECT_FALSE(child_plan(parent(), {{"hyperparams.optimizer.learningRate", nullptr}}, {}, 5).is_ok());
  json twice = {{"hyperparams.optimizer.learningRate", 0.1}, {"hyperparams", {{"optimizer", {{"learningRate", 0.2}}}}}};
  auto child = child_plan(parent(), twice, {}, 5);
  ASSERT_FALSE(child.is_ok());
  EXPECT_NE(child.status().message().find("twice"), std::string::npos);
}

TEST(ChildPlan, StepsMustBePositive) {
  auto child = child_plan(parent(), json::object(), {}, 0);
  ASSERT_FALSE(child.is_ok());
  EXPECT_EQ(child.status().field(), "steps");
}

// ---- a child that changes method ------------------------------------------------------------

// An SFT parent that wrote SFT-only fields of its own (a validation set, its optimizer, batches).
json sft_parent() {
  return parse(R"(
kind: run
workload: w
baseModel: m
config:
  dataset: d
  validationDataset: v
  hyperparams:
    optimizer: {learningRate: 0.001}
    training: {batchSize: 2, gradientAccumulation: 2, validationSplit: 0.1}
  maxSeqLength: 64
execution: {gpus: 0}
)");
}

json grpo_parent() {
  return parse(R"(
kind: run
workload: w
config:
  dataset: d
  method: grpo
  maxSeqLength: 64
  klBeta: 0.1
  reward: {terms: [{kind: json-label-match}]}
  rlHyperparams: {maxCompletionLength: 16}
execution: {gpus: 0}
)");
}

const json kGrader = {{"terms", json::array({{{"kind", "json-label-match"}, {"weight", 1}}})}};

TEST(MethodFields, EveryMethodOnlyFieldIsAFieldOfTheTable) {
  for (const MethodField& f : method_only_fields()) {
    EXPECT_NE(find_field(f.path), nullptr) << f.path;
    EXPECT_EQ(f.path.rfind("config.", 0), 0u) << f.path;
    EXPECT_EQ(f.instead.empty(), f.rl) << f.path;  // SFT fields say what an RL run does instead
  }
}

TEST(MethodFields, EachIsRefusedByThePlanOfTheOtherKind) {
  // The list the child drops by is the list the parser refuses by: each SFT field added to an RL
  // plan is refused by its own path, and each RL field on an SFT plan.
  for (const MethodField& f : method_only_fields()) {
    json doc = f.rl ? sft_parent() : grpo_parent();
    json& config = doc["config"];
    const json source = f.rl ? grpo_parent()["config"] : sft_parent()["config"];
    std::string below(f.path.substr(7));
    const json* from = &source;
    json* to = &config;
    for (size_t start = 0;;) {
      const size_t dot = below.find('.', start);
      const std::string key = below.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      ASSERT_TRUE(from->contains(key)) << f.path;
      from = &(*from)[key];
      if (dot == std::string::npos) {
        (*to)[key] = *from;
        break;
      }
      if (!to->contains(key)) (*to)[key] = json::object();
      to = &(*to)[key];
      start = dot + 1;
    }
    auto parsed = plan_from_json(doc, "plan");
    ASSERT_FALSE(parsed.is_ok()) << f.path;
    EXPECT_EQ(parsed.status().field(), f.path);
    EXPECT_NE(parsed.status().message().find(f.rl ? "a reinforcement-learning field" : "an SFT field"),
              std::string::npos)
        << parsed.status().message();
  }
}

TEST(DropMethodFields, FromSftToGrpoDropsEverySftFieldThatHeldAValue) {
  json plan = sft_parent();
  json config = plan["config"];
  auto dropped = drop_method_fields(config, Method::kSft, Method::kGrpo);
  // Resolved, an SFT config writes each of its fields (validationDataset too: it was given).
  const std::vector<std::string> want = {
      "config.validationDataset", "config.hyperparams.optimizer", "config.hyperparams.training.batchSize",
      "config.hyperparams.training.gradientAccumulation", "config.hyperparams.training.validationFrequencySteps",
      "config.hyperparams.training.validationSplit", "config.hyperparams.training.packing"};
  EXPECT_EQ(dropped, want);
  EXPECT_FALSE(config.contains("validationDataset"));
  EXPECT_FALSE(config["hyperparams"].contains("optimizer"));
  EXPECT_EQ(config["hyperparams"]["training"].size(), 3u);  // epochs, maxSteps, seed: both kinds have them
  EXPECT_TRUE(config["hyperparams"].contains("lora"));
  // What is left is a valid grpo config.
  config["method"] = "grpo";
  config["rlHyperparams"] = {{"maxCompletionLength", 16}};
  plan["config"] = config;
  auto parsed = plan_from_json(plan, "child");
  EXPECT_TRUE(parsed.is_ok()) << parsed.status().describe();
}

TEST(DropMethodFields, ANullFieldIsRemovedButNotListed) {
  json config = parent()["config"];  // no validationDataset: resolved as null
  ASSERT_TRUE(config.contains("validationDataset") && config["validationDataset"].is_null());
  auto dropped = drop_method_fields(config, Method::kSft, Method::kGspo);
  EXPECT_FALSE(config.contains("validationDataset"));
  EXPECT_EQ(dropped.front(), "config.hyperparams.optimizer");
}

TEST(DropMethodFields, FromGrpoToSftDropsTheRlFields) {
  json config = grpo_parent()["config"];
  auto dropped = drop_method_fields(config, Method::kGrpo, Method::kSft);
  EXPECT_EQ(dropped, (std::vector<std::string>{"config.reward", "config.klBeta", "config.rlHyperparams"}));
  EXPECT_FALSE(config.contains("reward") || config.contains("klBeta") || config.contains("rlHyperparams"));
}

TEST(DropMethodFields, BetweenRlMethodsNothingIsDropped) {
  json config = grpo_parent()["config"];
  const json before = config;
  EXPECT_TRUE(drop_method_fields(config, Method::kGrpo, Method::kGspo).empty());
  EXPECT_EQ(config, before);
}

TEST(DropMethodFields, TheChangeInWords) {
  MethodChange change{.from = Method::kSft, .to = Method::kGrpo,
                      .dropped = {"config.validationDataset", "config.hyperparams.optimizer"}};
  EXPECT_EQ(dropped_fields_text(change),
            "dropped config.validationDataset, config.hyperparams.optimizer: SFT fields a grpo run does not have");
  change = {.from = Method::kGspo, .to = Method::kSft, .dropped = {"config.reward"}};
  EXPECT_EQ(dropped_fields_text(change), "dropped config.reward: reinforcement-learning fields an sft run does not have");
  EXPECT_EQ(dropped_fields_text({.from = Method::kGrpo, .to = Method::kGspo, .dropped = {}}), "");
}

TEST(ChildPlan, AMethodOverrideDropsTheParentsSftFieldsAndTheChildPlanParses) {
  json overrides = {{"method", "grpo"}, {"reward", kGrader}, {"rlHyperparams.maxCompletionLength", 16}};
  auto child = child_plan(sft_parent(), overrides, {.restore = Restore::kWeights}, 3);
  ASSERT_TRUE(child.is_ok()) << child.status().describe();
  ASSERT_TRUE(child->method_change.has_value());
  EXPECT_EQ(child->method_change->from, Method::kSft);
  EXPECT_EQ(child->method_change->to, Method::kGrpo);
  EXPECT_EQ(child->method_change->dropped.front(), "config.validationDataset");
  EXPECT_EQ(child->plan["config"]["method"], "grpo");
  EXPECT_EQ(child->plan["config"]["reward"], kGrader);
  EXPECT_EQ(child->plan["config"]["hyperparams"]["lora"], sft_parent()["config"]["hyperparams"]["lora"]);
  auto parsed = plan_from_json(child->plan, "child");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().describe();
  EXPECT_EQ(parsed->config.method, Method::kGrpo);
  EXPECT_EQ(parsed->config.training.maxSteps, 3);
}

TEST(ChildPlan, RewardTermsMayBeGivenDottedAsAList) {
  json overrides = {{"method", "gspo"}, {"reward.terms", kGrader["terms"]}, {"rlHyperparams.maxCompletionLength", 16}};
  auto child = child_plan(sft_parent(), overrides, {}, 3);
  ASSERT_TRUE(child.is_ok()) << child.status().describe();
  EXPECT_EQ(child->plan["config"]["reward"]["terms"], kGrader["terms"]);
}

TEST(ChildPlan, FromSftToRlWithoutARewardNamesItAndShowsAnExample) {
  auto child = child_plan(sft_parent(), {{"method", "grpo"}}, {}, 3);
  ASSERT_FALSE(child.is_ok());
  EXPECT_EQ(child.status().field(), "overrides.reward.terms");
  EXPECT_NE(child.status().message().find("required: the child changes method from sft to grpo"), std::string::npos)
      << child.status().message();
  EXPECT_NE(child.status().message().find("reward:\n  terms:\n    - {kind: json-label-match"), std::string::npos)
      << child.status().message();
}

TEST(ChildPlan, AMethodChangeRestoringTrainingStateIsRefusedByName) {
  json overrides = {{"method", "grpo"}, {"reward", kGrader}};
  auto child = child_plan(sft_parent(), overrides, {.restore = Restore::kTrainingState}, 3);
  ASSERT_FALSE(child.is_ok());
  EXPECT_EQ(child.status().field(), "restore");
  EXPECT_NE(child.status().message().find("trainingState is refused: the child changes method from sft to grpo"),
            std::string::npos)
      << child.status().message();
  auto cont = child_plan(sft_parent(), overrides, {.restore = Restore::kTrainingState, .continuation = true}, 3);
  ASSERT_FALSE(cont.is_ok());
  EXPECT_EQ(cont.status().field(), "overrides.method");
  EXPECT_NE(cont.status().message().find("--method grpo"), std::string::npos) << cont.status().message();
}

TEST(ChildPlan, FromGrpoToSftDropsTheRlFieldsAndNeedsNothingMore) {
  auto child = child_plan(grpo_parent(), {{"method", "sft"}}, {}, 2);
  ASSERT_TRUE(child.is_ok()) << child.status().describe();
  EXPECT_EQ(child->method_change->dropped,
            (std::vector<std::string>{"config.reward", "config.klBeta", "config.rlHyperparams"}));
  auto parsed = plan_from_json(child->plan, "child");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().describe();
  EXPECT_EQ(parsed->config.method, Method::kSft);
}

TEST(ChildPlan, AnOverrideOfAFieldTheNewMethodLacksIsLeftToTheParserWhichRefusesIt) {
  json overrides = {{"method", "grpo"}, {"reward", kGrader}, {"hyperparams.optimizer.learningRate", 0.1}};
  auto child = child_plan(sft_parent(), overrides, {}, 3);
  ASSERT_TRUE(child.is_ok()) << child.status().describe();
  auto parsed = plan_from_json(child->plan, "child");
  ASSERT_FALSE(parsed.is_ok());
  EXPECT_EQ(parsed.status().field(), "config.hyperparams.optimizer");
}

TEST(ChildPlan, TheSameMethodIsNoChange) {
  auto child = child_plan(sft_parent(), {{"method", "sft"}}, {}, 3);
  ASSERT_TRUE(child.is_ok()) << child.status().describe();
  EXPECT_FALSE(child->method_change.has_value());
  EXPECT_TRUE(child->plan["config"].contains("validationDataset"));
}

}  // namespace
}  // namespace trainer::plan

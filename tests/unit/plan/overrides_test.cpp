// A child run's plan: the parent's resolved plan, the override document's declared fields, and
// the child's own budget; what each restore kind may change (plan/overrides.h).
#include "plan/overrides.h"

#include <gtest/gtest.h>

#include "plan/plan.h"

namespace trainer::plan {
namespace {

using json = nlohmann::json;

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
  EXPECT_EQ((*child)["config"]["hyperparams"]["optimizer"]["learningRate"], 5e-5);
  EXPECT_EQ((*child)["config"]["hyperparams"]["lora"]["alpha"], 32);
  EXPECT_EQ((*child)["config"]["hyperparams"]["training"]["maxSteps"], 40);
  EXPECT_FALSE(child->contains("submissionId"));
  EXPECT_EQ((*child)["workload"], "w");
  EXPECT_TRUE(plan_from_json(*child, "child").is_ok());
}

TEST(ChildPlan, ConfigPrefixIsAccepted) {
  auto child = child_plan(parent(), {{"config.hyperparams.optimizer.learningRate", 0.002}},
                          {.restore = Restore::kTrainingState}, 5);
  ASSERT_TRUE(child.is_ok()) << child.status().describe();
  EXPECT_EQ((*child)["config"]["hyperparams"]["optimizer"]["learningRate"], 0.002);
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

}  // namespace
}  // namespace trainer::plan

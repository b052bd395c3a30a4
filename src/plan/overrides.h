// A child run's plan (`runs branch`, `runs continue`, docs/lineage.md): the parent's resolved
// plan with an override document applied and the child's own step budget.
//
// An override document names only changed `config` fields, relative to `config` ("config." may
// be written too), nested or as dotted keys:
//   hyperparams.optimizer.learningRate: 5e-5
//   hyperparams: {training: {validationFrequencySteps: 10}}
// Every path must be a declared plan field (plan_fields()); what a child may change depends on
// what it restores of its source snapshot (ChildRules).
//
// An override of `method` (sft to grpo or gspo, or back) changes what the child trains: the
// parent's fields that only its own kind of method has are dropped (drop_method_fields(), by
// the plan's one list of them, method_only_fields()), the child starts from the snapshot's
// weights alone, and a child that becomes an RL run from an SFT one must name its reward.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "plan/plan.h"

namespace trainer::plan {

// What a child restores of its source snapshot.
enum class Restore {
  kWeights,        // the adapter's weights; a fresh optimizer, schedule, RNG and data order
  kTrainingState,  // everything: weights, optimizer moments, RNG, data position
};

// "weights" | "trainingState"
const char* restore_name(Restore r);

struct ChildRules {
  Restore restore = Restore::kWeights;
  bool continuation = false;  // `runs continue`: validationFrequencySteps may change as well
};

// The override document flattened to declared leaf fields: {"config.hyperparams.lora.rank": 16}.
// InvalidArgument naming "overrides.PATH" for an undeclared path, a field outside `config`, a
// path given twice or a null value.
Result<std::map<std::string, nlohmann::json>> flatten_overrides(const nlohmann::json& doc);

// Removes from `config` (a resolved config: config_to_json()'s shape, a plan's "config") every
// field that `from`'s kind of method has and `to`'s does not (method_only_fields()). Returns the
// dotted paths ("config.validationDataset") of the removed fields that held a value, in that
// list's order; a null one is removed unlisted (nothing was set). Between methods of one kind
// (grpo and gspo) nothing is removed.
std::vector<std::string> drop_method_fields(nlohmann::json& config, Method from, Method to);

// What a child whose overrides change config.method left of its parent's config.
struct MethodChange {
  Method from = Method::kSft;        // the parent's method
  Method to = Method::kSft;          // the child's
  std::vector<std::string> dropped;  // drop_method_fields()' answer: the parent's fields the child's method lacks
};

// The change in words: "dropped config.validationDataset, config.hyperparams.optimizer: SFT
// fields a grpo run does not have"; "" when nothing was dropped.
std::string dropped_fields_text(const MethodChange& change);

// The child's plan, and what a method change dropped of its parent's.
struct ChildPlan {
  nlohmann::json plan;
  std::optional<MethodChange> method_change;  // absent: the child keeps its parent's method
};

// The child's plan: `parent_plan` (a resolved plan, plan::to_json's shape) with `overrides`
// applied and config.hyperparams.training.maxSteps = `steps` (its schedule spans its own
// budget). Refuses, naming "overrides.PATH", what the rules do not allow: the budget fields
// (epochs, maxSteps: --steps sets it), the adapter's shape (lora.rank, lora.targetModules) and,
// restoring trainingState, anything but the active learning rate (and, continuing,
// validationFrequencySteps), even at an equal value.
//
// An override of `method` to another kind (sft to grpo/gspo, or back) drops the parent's fields
// of its old kind (drop_method_fields()) before the overrides apply; it is refused, by name,
// restoring trainingState (an SFT optimizer state cannot seed an RL one, nor the reverse: field
// "restore", or "overrides.method" when continuing), and from sft to an RL method it needs
// overrides.reward.terms (the error shows an example override document). The result still goes
// through the plan parser when it is submitted, which checks every value's type and range (an
// override of a field the new method does not have is refused there, as in any plan).
Result<ChildPlan> child_plan(const nlohmann::json& parent_plan, const nlohmann::json& overrides,
                                  const ChildRules& rules, int64_t steps);

}  // namespace trainer::plan

// A child run's plan (`runs branch`, `runs continue`, docs/lineage.md): the parent's resolved
// plan with an override document applied and the child's own step budget.
//
// An override document names only changed `config` fields, relative to `config` ("config." may
// be written too), nested or as dotted keys:
//   hyperparams.optimizer.learningRate: 5e-5
//   hyperparams: {training: {validationFrequencySteps: 10}}
// Every path must be a declared plan field (plan_fields()); what a child may change depends on
// what it restores of its source snapshot (ChildRules).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

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

// The child's plan: `parent_plan` (a resolved plan, plan::to_json's shape) with `overrides`
// applied and config.hyperparams.training.maxSteps = `steps` (its schedule spans its own
// budget). Refuses, naming "overrides.PATH", what the rules do not allow: the budget fields
// (epochs, maxSteps: --steps sets it), the adapter's shape (lora.rank, lora.targetModules) and,
// restoring trainingState, anything but the active learning rate (and, continuing,
// validationFrequencySteps), even at an equal value. The result still goes through the plan
// parser when it is submitted, which checks every value's type and range.
Result<nlohmann::json> child_plan(const nlohmann::json& parent_plan, const nlohmann::json& overrides,
                                  const ChildRules& rules, int64_t steps);

}  // namespace trainer::plan

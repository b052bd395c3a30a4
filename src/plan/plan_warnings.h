// What a valid plan asks for that the engine will not do as asked: said at submission (the
// service's dry run and the run's creation) and again by the job as a `warning` event, in the
// same words (docs/data-parallel.md).
#pragma once

#include <optional>
#include <string>

#include "plan/plan.h"

namespace trainer::plan {

struct PlanWarning {
  std::string field;    // the plan field, "execution.gpus"
  std::string message;  // for a person
};

// A GRPO/GSPO plan with execution.gpus N > 1: the run holds N devices but trains on one
// (data parallelism is SFT only). nullopt for any other plan.
std::optional<PlanWarning> single_device_warning(const Plan& plan);

}  // namespace trainer::plan

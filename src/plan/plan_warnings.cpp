// Plan warnings (declared in plan/plan_warnings.h).
#include "plan/plan_warnings.h"

namespace trainer::plan {

std::optional<PlanWarning> single_device_warning(const Plan& plan) {
  if (plan.execution.gpus <= 1 || plan.config.method == Method::kSft) return std::nullopt;
  const std::string n = std::to_string(plan.execution.gpus);
  return PlanWarning{"execution.gpus",
                     "execution.gpus is " + n + ", but " + method_name(plan.config.method) +
                         " trains on one device: the run holds " + n +
                         " devices and trains on one of them (data parallelism is SFT only; "
                         "docs/data-parallel.md). Set execution.gpus: 1 to hold one."};
}

}  // namespace trainer::plan

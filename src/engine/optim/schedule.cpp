#include "engine/optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace trainer::engine::optim {

int64_t warmup_steps(const plan::OptimizerSettings& settings, int64_t total_steps) {
  if (settings.warmupSteps > 0) return settings.warmupSteps;
  return static_cast<int64_t>(std::ceil(settings.warmupRatio * static_cast<double>(total_steps)));
}

double lr_multiplier(plan::Schedule schedule, int64_t step, int64_t warmup, int64_t total_steps) {
  if (step < warmup) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
  switch (schedule) {
    case plan::Schedule::kConstant:
      return 1.0;
    case plan::Schedule::kLinear:
      return std::max(0.0, static_cast<double>(total_steps - step) / static_cast<double>(std::max<int64_t>(1, total_steps - warmup)));
    case plan::Schedule::kCosine: {
      const double progress =
          static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total_steps - warmup));
      const double num_cycles = 0.5;
      return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * num_cycles * 2.0 * progress)));
    }
  }
  return 1.0;
}

}  // namespace trainer::engine::optim

// Learning-rate schedules exactly as transformers' get_{linear,cosine,constant}_schedule_with_warmup
// (a LambdaLR: the rate of optimizer step k, counted from 0, is peak * multiplier(k)). No torch.
#pragma once

#include <cstdint>

#include "plan/plan.h"

namespace trainer::engine::optim {

// Warmup length in optimizer steps: warmupSteps when > 0, else ceil(warmupRatio * total), as
// transformers' TrainingArguments.get_warmup_steps.
int64_t warmup_steps(const plan::OptimizerSettings& settings, int64_t total_steps);

// Multiplier of the peak rate at optimizer step `step` (0-based).
double lr_multiplier(plan::Schedule schedule, int64_t step, int64_t warmup, int64_t total_steps);

}  // namespace trainer::engine::optim

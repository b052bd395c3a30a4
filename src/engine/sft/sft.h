// The LoRA SFT loop (engine::train_sft in engine.h). Internal pieces exposed for tests.
//
// Its events are the job protocol's (protocol/job_protocol.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "plan/plan.h"

namespace trainer::engine::sft {

// AdamW with torch.optim.AdamW's numerics (the single-tensor path): decoupled weight decay,
// bias-corrected moments, eps added after the square root of the corrected second moment.
class AdamW {
 public:
  AdamW(std::vector<at::Tensor> params, const plan::OptimizerSettings& settings);
  // One update at learning rate `lr`; parameters without a gradient are skipped.
  void step(double lr);
  void zero_grad();
  int64_t steps() const { return step_; }
  // Bytes of the moments (the optimizer state).
  int64_t state_bytes() const;

 private:
  std::vector<at::Tensor> params_, exp_avg_, exp_avg_sq_;
  plan::OptimizerSettings settings_;
  int64_t step_ = 0;
};

// torch.nn.utils.clip_grad_norm_: returns the total L2 norm before clipping, and scales every
// gradient by min(1, max_norm / (norm + 1e-6)) when max_norm > 0.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace trainer::engine::sft

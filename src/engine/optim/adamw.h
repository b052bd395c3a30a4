// The optimizer of every training method: AdamW with torch.optim.AdamW's numerics and gradient
// clipping with torch.nn.utils.clip_grad_norm_'s. Internal to the engine (includes torch).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "plan/plan.h"

namespace trainer::engine::optim {

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
  // The state, for training-state checkpoints: the parameters and their first and second moments,
  // in the order given to the constructor.
  const std::vector<at::Tensor>& params() const { return params_; }
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  void set_steps(int64_t steps) { step_ = steps; }

 private:
  std::vector<at::Tensor> params_, exp_avg_, exp_avg_sq_;
  plan::OptimizerSettings settings_;
  int64_t step_ = 0;
};

// torch.nn.utils.clip_grad_norm_: returns the total L2 norm before clipping, and scales every
// gradient by min(1, max_norm / (norm + 1e-6)) when max_norm > 0.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace trainer::engine::optim

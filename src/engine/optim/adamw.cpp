// AdamW and gradient clipping with torch.optim's numerics (declared in optim/adamw.h).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "engine/optim/adamw.h"

namespace trainer::engine::optim {

AdamW::AdamW(std::vector<at::Tensor> params, const plan::OptimizerSettings& settings)
    : params_(std::move(params)), settings_(settings) {
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
  }
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const double beta1 = settings_.beta1, beta2 = settings_.beta2;
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step_));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step_));
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (settings_.weightDecay != 0) p.mul_(1 - lr * settings_.weightDecay);
    exp_avg_[i].lerp_(g, 1 - beta1);
    exp_avg_sq_[i].mul_(beta2).addcmul_(g, g, 1 - beta2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias_correction2_sqrt).add_(settings_.epsilon);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t total = 0;
  for (const auto& t : exp_avg_) total += static_cast<int64_t>(t.nbytes());
  for (const auto& t : exp_avg_sq_) total += static_cast<int64_t>(t.nbytes());
  return total;
}

void AdamW::zero_grad() {
  for (auto& p : params_) p.mutable_grad().reset();
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return 0.0;
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2);
  if (max_norm > 0) {
    at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
    at::_foreach_mul_(grads, coef);
  }
  return total.item<double>();
}

}  // namespace trainer::engine::optim

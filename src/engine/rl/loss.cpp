// GRPO/GSPO losses (declared in rl/loss.h).
#include "engine/rl/loss.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "engine/model/model.h"

namespace trainer::engine::rl {

at::Tensor advantages(const at::Tensor& rewards, int64_t group_size, plan::ScaleRewards scale) {
  at::Tensor r = rewards.to(at::kFloat);
  at::Tensor grouped = r.view({-1, group_size});
  at::Tensor mean = grouped.mean(1).repeat_interleave(group_size);
  at::Tensor adv = r - mean;
  // Bessel-corrected standard deviations, as torch.std (NaN-free: one sample gives 0).
  auto std_of = [](const at::Tensor& x, int64_t dim) {
    const int64_t n = x.size(dim);
    if (n < 2) return at::zeros_like(x.select(dim, 0));
    return ((x - x.mean(dim, true)).pow(2).sum(dim) / static_cast<double>(n - 1)).sqrt();
  };
  if (scale == plan::ScaleRewards::kGroup) {
    adv = adv / (std_of(grouped, 1).repeat_interleave(group_size) + 1e-4);
  } else if (scale == plan::ScaleRewards::kBatch) {
    adv = adv / (std_of(r, 0) + 1e-4);
  }
  return adv;
}

at::Tensor masked_token_logps(model::CausalLM& model, const at::Tensor& hidden, const at::Tensor& targets,
                              const at::Tensor& mask, double temperature, at::Tensor* entropy) {
  const int64_t n = targets.size(0), C = targets.size(1);
  model::TokenStats stats;
  stats.want_entropy = entropy != nullptr;
  at::Tensor keep = (mask.reshape({-1}) != 0).nonzero().squeeze(1);
  if (keep.numel() == n * C) {
    at::Tensor logps = model.token_logps(hidden, targets, temperature, &stats);
    if (entropy != nullptr) *entropy = stats.entropy;
    return logps;
  }
  const at::TensorOptions f32 = hidden.options().dtype(at::kFloat);
  auto spread = [&](const at::Tensor& kept) {  // [kept] -> [n, C], 0 elsewhere
    return at::zeros({n * C}, f32).index_copy(0, keep, kept).view({n, C});
  };
  if (keep.numel() == 0) {
    if (entropy != nullptr) *entropy = at::zeros({n, C}, f32);
    return at::zeros({n, C}, f32) + (hidden.sum() * 0).to(at::kFloat);  // still part of the graph
  }
  at::Tensor logps = spread(model.token_logps(hidden.reshape({-1, hidden.size(-1)}).index_select(0, keep),
                                              targets.reshape({-1}).index_select(0, keep), temperature, &stats));
  if (entropy != nullptr) *entropy = spread(stats.entropy);
  return logps;
}

LossOutput policy_loss(const LossInputs& in, const LossSettings& s) {
  const at::Tensor& logps = in.logps;
  const at::Tensor& mask = in.mask;
  at::Tensor old = in.old_logps.defined() ? in.old_logps : logps.detach();
  at::Tensor adv = in.advantages.dim() == 1 ? in.advantages.unsqueeze(1) : in.advantages;
  at::Tensor log_ratio = logps - old;
  at::Tensor log_w = s.sequence_level ? ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)).unsqueeze(-1)
                                      : log_ratio;
  at::Tensor coef_1 = at::exp(log_w);
  at::Tensor coef_2 = at::clamp(coef_1, 1 - s.clip_low, 1 + s.clip_high);
  at::Tensor per_token = -at::min(coef_1 * adv, coef_2 * adv);
  at::Tensor kl;
  if (s.beta != 0.0) {
    at::Tensor d = in.ref_logps - logps;
    kl = at::exp(d) - d - 1;
    // TRL's use_bias_correction_kl (its default): weighting by the importance ratio makes the
    // KL gradient the unbiased reverse-KL gradient when the batch is off-policy.
    if (s.kl_bias_correction) kl = kl * coef_1;
    per_token = per_token + s.beta * kl;
  }
  const double micro = static_cast<double>(std::max<int64_t>(1, in.micro_batches));
  at::Tensor masked = per_token * mask;
  LossOutput out;
  switch (s.aggregation) {
    case plan::LossAggregation::kGrpo:
      out.loss = (masked.sum(-1) / mask.sum(-1).clamp_min(1.0)).mean() / micro;
      break;
    case plan::LossAggregation::kBnpo:
      out.loss = masked.sum() / mask.sum().clamp_min(1.0) / micro;
      break;
    case plan::LossAggregation::kDrGrpo:
      out.loss = masked.sum() / static_cast<double>(per_token.size(0) * s.max_completion_length) / micro;
      break;
    case plan::LossAggregation::kDapo:
      out.loss = masked.sum() / std::max(1.0, in.active_tokens);
      break;
  }
  at::NoGradGuard no_grad;
  const double tokens = mask.sum().item<double>();
  out.tokens = tokens;
  // As TRL logs them: a per-sequence figure [B, 1] (GSPO) is averaged over sequences, a
  // per-token one [B, T] over the completion tokens.
  auto masked_mean = [&](const at::Tensor& x) {
    if (x.size(1) == 1) return x.size(0) > 0 ? x.sum().item<double>() / static_cast<double>(x.size(0)) : 0.0;
    return tokens > 0 ? (x * mask).sum().item<double>() / tokens : 0.0;
  };
  at::Tensor low = ((coef_1 < 1 - s.clip_low) & (adv < 0)).to(at::kFloat);
  at::Tensor high = ((coef_1 > 1 + s.clip_high) & (adv > 0)).to(at::kFloat);
  out.clip_low = masked_mean(low);
  out.clip_high = masked_mean(high);
  out.clip_region = masked_mean((low + high).clamp_max(1.0));
  if (kl.defined()) out.kl = masked_mean(kl.detach());
  return out;
}

}  // namespace trainer::engine::rl

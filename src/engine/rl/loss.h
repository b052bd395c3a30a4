// The GRPO and GSPO policy losses (docs/rl.md writes the formulas), with TRL's conventions
// (trl/trainer/grpo_trainer.py, GRPOTrainer._compute_loss): the importance ratio of the current
// policy to the one that sampled, per token (GRPO) or as the length-normalised sequence ratio
// (GSPO); the clipped surrogate with separate lower and upper bounds; the k3 KL estimate to the
// reference (the base model, adapter disabled) weighted by beta; the loss aggregations TRL calls
// dapo (token-level over the whole batch), bnpo (token-level per micro-batch), grpo (mean of the
// per-sequence token means) and dr_grpo (fixed length). Internal to the engine.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "plan/plan.h"

namespace trainer::engine::model {
class CausalLM;
}

namespace trainer::engine::rl {

// Group-normalised advantages: rewards [N] (prompt-major groups of `group_size`) minus their
// group mean, divided by (std + 1e-4) per scale_rewards: the group's std ("group"), the whole
// batch's ("batch") or not at all ("none"); stds are Bessel-corrected, as TRL's.
at::Tensor advantages(const at::Tensor& rewards, int64_t group_size, plan::ScaleRewards scale);

struct LossSettings {
  bool sequence_level = false;   // GSPO
  double clip_low = 0.2;         // epsilon_low
  double clip_high = 0.2;        // epsilon_high
  double beta = 0.0;             // KL weight
  bool kl_bias_correction = true;  // KL term times the importance ratio (TRL's use_bias_correction_kl)
  plan::LossAggregation aggregation = plan::LossAggregation::kDapo;
  int64_t max_completion_length = 256;  // dr_grpo's fixed length
};

struct LossInputs {
  at::Tensor logps;       // [B, T] per-token log-probabilities under the current policy (differentiable)
  at::Tensor old_logps;   // [B, T] under the sampling policy; undefined = logps.detach() (on-policy)
  at::Tensor ref_logps;   // [B, T] under the reference model; needed when beta != 0
  at::Tensor advantages;  // [B]
  at::Tensor mask;        // [B, T] float: completion tokens
  // Normalisers of a micro-batch inside an optimizer step: `active_tokens` is the step's total
  // completion tokens (dapo), `micro_batches` the number of micro-batches (bnpo, grpo, dr_grpo
  // divide by it, as TRL's gradient accumulation does).
  double active_tokens = 0;
  int64_t micro_batches = 1;
};

struct LossOutput {
  at::Tensor loss;            // scalar, differentiable: this micro-batch's share of the step loss
  // Diagnostics as TRL logs them (detached scalars):
  double kl = 0;              // masked mean k3 KL (0 when beta is 0)
  double clip_low = 0;        // share of tokens clipped at the lower bound (ratio < 1-eps_low, A < 0)
  double clip_high = 0;       // share clipped at the upper bound (ratio > 1+eps_high, A > 0)
  double clip_region = 0;     // either
  double tokens = 0;          // masked tokens of the micro-batch
};

LossOutput policy_loss(const LossInputs& in, const LossSettings& s);

// Per-token log-probabilities [n, C] of `targets` [n, C] from final hidden states [n, C, hidden]
// (the positions that predict them) where `mask` [n, C] is not 0, and 0 elsewhere: the padded
// tail of a completion that ended early never goes through the [tokens, vocabulary] head, and
// every use of those positions is masked. With `entropy`, the per-token entropies likewise.
at::Tensor masked_token_logps(model::CausalLM& model, const at::Tensor& hidden, const at::Tensor& targets,
                              const at::Tensor& mask, double temperature, at::Tensor* entropy = nullptr);

}  // namespace trainer::engine::rl

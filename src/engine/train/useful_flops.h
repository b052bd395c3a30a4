// Useful FLOPs of a LoRA update: the matrix products one optimizer step really runs, counted from
// the model's shapes, the adapter's targets and rank, and the step's sequences. This stands beside
// the specification's convention (6 x every linear parameter, head included, x every token;
// device::training_flops_per_token), which sft.mfu and rl.mfu keep: that convention counts a
// weight gradient for the frozen weights and the head at every position, which a LoRA step does
// not compute. docs/telemetry-usage.md ("Useful FLOPs") states the formula and what it leaves out.
// Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/config.h"
#include "plan/plan.h"

namespace trainer::engine::train {

// The sequences one update runs forward and backward over.
struct PassShape {
  // Real (non-padding) tokens of each sequence, one entry per sequence attention keeps apart: a
  // packed row counts as the rows packed into it.
  std::vector<int64_t> sequence_lengths;
  int64_t head_positions = 0;  // positions where the output head is computed (and its input gradient)
};

// FLOPs of an update by part (a multiply-add counts 2).
struct FlopsParts {
  double base = 0;       // the layers' frozen projections: forward and input gradient
  double adapters = 0;   // the LoRA products: forward, input gradient, weight gradient
  double attention = 0;  // causal QK^T and AV over each sequence's real positions: forward and backward
  double head = 0;       // the frozen output head at its positions: forward and input gradient
  double total() const { return base + adapters + attention + head; }
};

// Parameters of the layers' projections, the head left out (ModelConfig::linear_parameters()
// less vocab x hidden).
int64_t base_linear_parameters(const model::ModelConfig& config);

// Parameters of the adapters `lora` attaches to every layer: r x (in + out) for each projection
// named in lora.targetModules (a name given twice counts once). Throws EngineError
// (kInvalidArgument) naming an unknown target, as lora::attach does.
int64_t adapter_parameters(const model::ModelConfig& config, const plan::LoraSettings& lora);

// The useful FLOPs of one LoRA update (forward and backward) over `pass`, per token T of the
// sequences and per head position P:
//   base       4 x base_linear_parameters x T   (forward 2, input gradient 2; frozen: no weight gradient)
//   adapters   6 x adapter_parameters x T       (forward 2, input gradient 2, weight gradient 2)
//   attention  3 x 4 x layers x heads x head_dim x sum over sequences of s(s+1)/2
//              (QK^T and AV, 2 FLOPs per multiply-add, each query seeing the keys up to itself;
//               the backward twice the forward)
//   head       4 x hidden x vocab x P           (forward 2, input gradient 2; frozen)
FlopsParts lora_update_flops(const model::ModelConfig& config, const plan::LoraSettings& lora, const PassShape& pass);

// The pass of an RL policy update over rollouts: each row's prompt and completion (real tokens,
// tool turns included) as one sequence, the head at every completion position (the log-probs of
// the completion's tokens; a completion's padding is not counted). Rows in the same order.
PassShape rl_update_shape(const std::vector<int64_t>& prompt_lengths, const std::vector<int64_t>& completion_lengths);

}  // namespace trainer::engine::train

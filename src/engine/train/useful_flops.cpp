// Useful FLOPs of a LoRA update (declared in train/useful_flops.h).
#include "engine/train/useful_flops.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/engine_error.h"

namespace trainer::engine::train {
namespace {

// FLOPs per multiply-add.
constexpr double kFlopsPerMac = 2;
// Products per weight and token: a frozen weight's forward and input gradient; a trained one's
// forward, input gradient and weight gradient. Each as many multiply-adds as the forward.
constexpr double kFrozenProducts = 2;
constexpr double kTrainedProducts = 3;
// Attention's forward and backward (the gradients of Q, K and V: twice the forward).
constexpr double kAttentionPasses = 3;

struct Projection {
  const char* name;
  int64_t in, out;
};

// The projections of one layer, in lora::supported_targets() order.
std::vector<Projection> layer_projections(const model::ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t i = c.intermediate_size;
  return {{"q_proj", h, q},    {"k_proj", h, kv},  {"v_proj", h, kv},    {"o_proj", q, h},
          {"gate_proj", h, i}, {"up_proj", h, i},  {"down_proj", i, h}};
}

}  // namespace

int64_t base_linear_parameters(const model::ModelConfig& config) {
  int64_t per_layer = 0;
  for (const Projection& p : layer_projections(config)) per_layer += p.in * p.out;
  return config.num_hidden_layers * per_layer;
}

int64_t adapter_parameters(const model::ModelConfig& config, const plan::LoraSettings& lora) {
  const std::vector<Projection> projections = layer_projections(config);
  for (const std::string& t : lora.targetModules) {
    if (std::none_of(projections.begin(), projections.end(), [&](const Projection& p) { return t == p.name; })) {
      throw EngineError(StatusCode::kInvalidArgument,
                        "config.lora.targetModules: unknown target module '" + t +
                            "' (supported: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
    }
  }
  int64_t per_layer = 0;
  for (const Projection& p : projections) {
    const auto& targets = lora.targetModules;
    if (std::find(targets.begin(), targets.end(), p.name) != targets.end()) per_layer += lora.rank * (p.in + p.out);
  }
  return config.num_hidden_layers * per_layer;
}

FlopsParts lora_update_flops(const model::ModelConfig& config, const plan::LoraSettings& lora, const PassShape& pass) {
  double tokens = 0, query_keys = 0;  // query_keys: the (query, key) pairs causal attention scores
  for (int64_t s : pass.sequence_lengths) {
    const auto n = static_cast<double>(s);
    tokens += n;
    query_keys += n * (n + 1) / 2;
  }
  FlopsParts f;
  f.base = kFrozenProducts * kFlopsPerMac * static_cast<double>(base_linear_parameters(config)) * tokens;
  f.adapters = kTrainedProducts * kFlopsPerMac * static_cast<double>(adapter_parameters(config, lora)) * tokens;
  // Per layer, (query, key) pair and query head: QK^T and AV, head_dim multiply-adds each.
  const double attention_forward = 2 * kFlopsPerMac * static_cast<double>(config.num_hidden_layers) *
                                   static_cast<double>(config.num_attention_heads * config.head_dim) * query_keys;
  f.attention = kAttentionPasses * attention_forward;
  f.head = kFrozenProducts * kFlopsPerMac * static_cast<double>(config.hidden_size * config.vocab_size) *
           static_cast<double>(pass.head_positions);
  return f;
}

PassShape rl_update_shape(const std::vector<int64_t>& prompt_lengths, const std::vector<int64_t>& completion_lengths) {
  if (prompt_lengths.size() != completion_lengths.size()) {
    throw EngineError(StatusCode::kInternal, "rl_update_shape: " + std::to_string(prompt_lengths.size()) +
                                                 " prompt lengths for " + std::to_string(completion_lengths.size()) +
                                                 " completions");
  }
  PassShape pass;
  for (size_t i = 0; i < prompt_lengths.size(); ++i) {
    pass.sequence_lengths.push_back(prompt_lengths[i] + completion_lengths[i]);
    pass.head_positions += completion_lengths[i];
  }
  return pass;
}

}  // namespace trainer::engine::train

// LoRA adapters on a CausalLM's projections, in PEFT's conventions: A kaiming-uniform(a=sqrt(5)),
// B zeros, scale alpha/r, dropout on the adapter's input; saved and loaded in PEFT's format
// (adapter_config.json + adapter_model.safetensors with PEFT's key names). Internal to the engine.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/model.h"
#include "plan/plan.h"

namespace trainer::engine::lora {

// The projections LoRA can adapt.
const std::vector<std::string>& supported_targets();

// Adds fresh adapters (fp32, requires grad, on the model's device) to every layer's projections
// named in `settings.targetModules`. A is drawn from a generator seeded with `seed`, so the same
// seed gives the same adapter. Throws EngineError (kInvalidArgument) on an unknown target.
void attach(model::CausalLM& model, const plan::LoraSettings& settings, uint64_t seed);

// The adapter parameters with PEFT's key names
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), layers in order.
std::vector<std::pair<std::string, at::Tensor>> named_parameters(model::CausalLM& model);

// Writes adapter_config.json and adapter_model.safetensors (fp32) into `dir`, which must
// exist; each file atomically. `base_model` is written as base_model_name_or_path.
void save_peft(model::CausalLM& model, const plan::LoraSettings& settings, const std::string& base_model,
               const std::string& dir);

// Saves into `final_dir` atomically as a folder: a temporary sibling is written and synced,
// then renamed over `final_dir`. Nothing half-written is left on failure.
void save_peft_folder(model::CausalLM& model, const plan::LoraSettings& settings, const std::string& base_model,
                      const std::string& final_dir);

// A PEFT LoRA adapter folder's matrices for `model`'s layers (fp32, on the model's device, no
// grad), kept apart from the model, and its rank. Errors name the file and field.
struct PeftAdapter {
  model::AdapterWeights weights;  // [layer][target in supported_targets() order]
  int64_t rank = 0;               // r of adapter_config.json
};
PeftAdapter read_peft(model::CausalLM& model, const std::string& dir);

// Loads a PEFT LoRA adapter folder onto `model` (frozen: no grad). Errors name the file and field.
void load_peft(model::CausalLM& model, const std::string& dir);

}  // namespace trainer::engine::lora

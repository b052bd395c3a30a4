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

// The fields of a PEFT LoRA folder's adapter_config.json the engine reads. Refused (by field,
// naming the file): a peft_type other than LORA, r not a positive integer, DoRA, fan_in_fan_out,
// per-module rank_pattern or alpha_pattern.
struct PeftConfig {
  int64_t rank = 0;                  // r
  double alpha = 8;                  // lora_alpha (PEFT's default 8 when absent)
  bool rslora = false;               // use_rslora
  double scale = 0;                  // as PEFT scales B·A: alpha / r, or alpha / sqrt(r) with rsLoRA
  std::string bias = "none";         // bias ("none", "all", "lora_only"; "" when not a string)
  bool has_modules_to_save = false;  // modules_to_save names modules saved whole
};
PeftConfig read_peft_config(const std::string& dir);

// Writes into `out_dir` (an existing, empty folder) the Hugging Face model folder of the model
// folder `model_dir` with the PEFT LoRA folder `adapter_dir` merged into its weights, as PEFT's
// merge_and_unload() does: for each adapted linear W' = W + scale * (B @ A), the product in fp32,
// the sum in fp32 rounded once to W's dtype. Every other tensor is copied unchanged under its
// own name and dtype into one model.safetensors (a sharded base is written as one file); the
// folder's other files (config.json, tokenizer files, ...) are copied. Throws EngineError
// naming the file and tensor or field at fault: an adapter key that is not a LoRA A/B matrix of
// a base weight, a missing half of a pair, shapes that do not fit, modules_to_save or bias
// terms (which a merge of A and B alone would drop). Returns the number of linears merged.
int64_t merge_peft_into(const std::string& model_dir, const std::string& adapter_dir, const std::string& out_dir);

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

// A Hugging Face model folder's config.json and weight files, read into plain structs. No torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainer::engine::model {

enum class Architecture { kLlama, kQwen2, kQwen3 };
const char* architecture_name(Architecture a);  // "LlamaForCausalLM", ...

// Rotary embedding parameters (config.json "rope_parameters", or the older
// "rope_theta" + "rope_scaling").
struct RopeSettings {
  double theta = 10000.0;          // base of the inverse frequencies
  std::string type = "default";    // "default" | "llama3"
  double factor = 1.0;             // llama3: wavelength scale of the low frequencies
  double low_freq_factor = 1.0;    // llama3
  double high_freq_factor = 4.0;   // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;           // "llama", "qwen2", "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  RopeSettings rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;      // bias on q/k/v (Qwen2: always; Llama: attention_bias, also on o_proj)
  bool o_proj_bias = false;
  bool mlp_bias = false;            // Llama's mlp_bias
  bool qk_norm = false;             // Qwen3: per-head RMSNorm of queries and keys
  int64_t max_position_embeddings = 0;
  std::string torch_dtype;          // as saved ("bfloat16", "float32", ...); informative

  // Parameters of the linear layers and output head (what MFU counts), embeddings excluded
  // unless tied weights make the head one of them.
  int64_t linear_parameters() const;
};

// Reads `<dir>/config.json`. Errors name the file and the field: "DIR/config.json: field
// 'architectures': unknown architecture 'GPT2LMHeadModel' (supported: ...)".
Result<ModelConfig> read_model_config(const std::string& dir);

// The weight files of a model folder: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json`. Errors name the missing file.
Result<std::vector<std::string>> model_weight_files(const std::string& dir);

}  // namespace trainer::engine::model

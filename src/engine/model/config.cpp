#include "engine/model/config.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/model_architectures.h"

namespace trainer::engine::model {
namespace fs = std::filesystem;

const char* architecture_name(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
    case Architecture::kQwen3: return "Qwen3ForCausalLM";
  }
  return "?";
}

int64_t ModelConfig::linear_parameters() const {
  const int64_t q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  const int64_t attn = hidden_size * q + 2 * hidden_size * kv + q * hidden_size;
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  return num_hidden_layers * (attn + mlp) + vocab_size * hidden_size;
}

namespace {

Result<nlohmann::json> read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": no such file (is this a Hugging Face model folder?)");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(ss.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return invalid_argument(path + ": not a JSON object");
  return doc;
}

// Reads an integer field; `required` ones must be present and positive.
Status get_int(const nlohmann::json& doc, const std::string& path, const char* field, int64_t* out, bool required) {
  if (!doc.contains(field) || doc[field].is_null()) {
    if (required) return invalid_argument(path + ": field '" + field + "' is missing");
    return Status::ok();
  }
  if (!doc[field].is_number_integer() || doc[field].get<int64_t>() <= 0) {
    return invalid_argument(path + ": field '" + field + "' must be a positive integer, got " + doc[field].dump());
  }
  *out = doc[field].get<int64_t>();
  return Status::ok();
}

Status get_double(const nlohmann::json& doc, const std::string& path, const std::string& field, double* out) {
  if (!doc.contains(field) || doc[field].is_null()) return Status::ok();
  if (!doc[field].is_number()) return invalid_argument(path + ": field '" + field + "' must be a number, got " + doc[field].dump());
  *out = doc[field].get<double>();
  return Status::ok();
}

Status read_rope(const nlohmann::json& doc, const std::string& path, RopeSettings* rope) {
  TRAINER_RETURN_IF_ERROR(get_double(doc, path, "rope_theta", &rope->theta));
  const char* field = doc.contains("rope_parameters") && doc["rope_parameters"].is_object() ? "rope_parameters"
                      : (doc.contains("rope_scaling") && doc["rope_scaling"].is_object() ? "rope_scaling" : nullptr);
  if (field == nullptr) return Status::ok();
  const nlohmann::json& r = doc[field];
  const std::string where = path + ": field '" + field + "'";
  if (r.contains("rope_theta")) TRAINER_RETURN_IF_ERROR(get_double(r, where, "rope_theta", &rope->theta));
  std::string type = "default";
  if (r.contains("rope_type") && r["rope_type"].is_string()) type = r["rope_type"].get<std::string>();
  else if (r.contains("type") && r["type"].is_string()) type = r["type"].get<std::string>();
  if (type != "default" && type != "llama3") {
    return invalid_argument(where + ": rope_type '" + type + "' is not supported (supported: default, llama3)");
  }
  rope->type = type;
  if (type == "llama3") {
    TRAINER_RETURN_IF_ERROR(get_double(r, where, "factor", &rope->factor));
    TRAINER_RETURN_IF_ERROR(get_double(r, where, "low_freq_factor", &rope->low_freq_factor));
    TRAINER_RETURN_IF_ERROR(get_double(r, where, "high_freq_factor", &rope->high_freq_factor));
    if (r.contains("original_max_position_embeddings")) {
      TRAINER_RETURN_IF_ERROR(get_int(r, where, "original_max_position_embeddings", &rope->original_max_position_embeddings, false));
    }
  }
  return Status::ok();
}

}  // namespace

Result<ModelConfig> read_model_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  if (!fs::is_directory(dir)) return not_found(dir + ": no such model folder");
  auto doc_or = read_json(path);
  if (!doc_or.is_ok()) return doc_or.status();
  const nlohmann::json& doc = *doc_or;
  ModelConfig c;
  std::string arch;
  if (doc.contains("architectures") && doc["architectures"].is_array() && !doc["architectures"].empty() &&
      doc["architectures"][0].is_string()) {
    arch = doc["architectures"][0].get<std::string>();
  } else if (doc.contains("model_type") && doc["model_type"].is_string()) {
    arch = doc["model_type"].get<std::string>();
  } else {
    return invalid_argument(path + ": field 'architectures' is missing (and no 'model_type')");
  }
  if (arch == "Qwen3ForCausalLM" || arch == "qwen3") {
    c.architecture = Architecture::kQwen3, c.model_type = "qwen3", c.qk_norm = true, c.head_dim = 128;
  } else if (arch == "Qwen2ForCausalLM" || arch == "qwen2") {
    c.architecture = Architecture::kQwen2, c.model_type = "qwen2", c.attention_bias = true;
  } else if (arch == "LlamaForCausalLM" || arch == "llama") {
    c.architecture = Architecture::kLlama, c.model_type = "llama";
  } else {
    return invalid_argument(path + ": field 'architectures': unknown architecture '" + arch +
                            "' (supported: " + supported_architectures_text() + ")");
  }
  TRAINER_RETURN_IF_ERROR(get_int(doc, path, "vocab_size", &c.vocab_size, true));
  TRAINER_RETURN_IF_ERROR(get_int(doc, path, "hidden_size", &c.hidden_size, true));
  TRAINER_RETURN_IF_ERROR(get_int(doc, path, "intermediate_size", &c.intermediate_size, true));
  TRAINER_RETURN_IF_ERROR(get_int(doc, path, "num_hidden_layers", &c.num_hidden_layers, true));
  TRAINER_RETURN_IF_ERROR(get_int(doc, path, "num_attention_heads", &c.num_attention_heads, true));
  c.num_key_value_heads = c.num_attention_heads;
  TRAINER_RETURN_IF_ERROR(get_int(doc, path, "num_key_value_heads", &c.num_key_value_heads, false));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return invalid_argument(path + ": field 'num_key_value_heads' (" + std::to_string(c.num_key_value_heads) +
                            ") must divide num_attention_heads (" + std::to_string(c.num_attention_heads) + ")");
  }
  if (c.architecture != Architecture::kQwen3) c.head_dim = c.hidden_size / c.num_attention_heads;
  TRAINER_RETURN_IF_ERROR(get_int(doc, path, "head_dim", &c.head_dim, false));
  TRAINER_RETURN_IF_ERROR(get_int(doc, path, "max_position_embeddings", &c.max_position_embeddings, false));
  TRAINER_RETURN_IF_ERROR(get_double(doc, path, "rms_norm_eps", &c.rms_norm_eps));
  TRAINER_RETURN_IF_ERROR(read_rope(doc, path, &c.rope));
  if (doc.contains("tie_word_embeddings") && doc["tie_word_embeddings"].is_boolean()) {
    c.tie_word_embeddings = doc["tie_word_embeddings"].get<bool>();
  }
  if (c.architecture != Architecture::kQwen2 && doc.contains("attention_bias") && doc["attention_bias"].is_boolean()) {
    c.attention_bias = doc["attention_bias"].get<bool>();
    c.o_proj_bias = c.attention_bias;
  }
  if (c.architecture == Architecture::kLlama && doc.contains("mlp_bias") && doc["mlp_bias"].is_boolean()) {
    c.mlp_bias = doc["mlp_bias"].get<bool>();
  }
  if (doc.contains("use_sliding_window") && doc["use_sliding_window"].is_boolean() && doc["use_sliding_window"].get<bool>()) {
    return invalid_argument(path + ": field 'use_sliding_window': sliding-window attention is not supported");
  }
  if (doc.contains("hidden_act") && doc["hidden_act"] != "silu") {
    return invalid_argument(path + ": field 'hidden_act': only \"silu\" is supported, got " + doc["hidden_act"].dump());
  }
  if (doc.contains("torch_dtype") && doc["torch_dtype"].is_string()) c.torch_dtype = doc["torch_dtype"].get<std::string>();
  if (doc.contains("dtype") && doc["dtype"].is_string()) c.torch_dtype = doc["dtype"].get<std::string>();
  return c;
}

Result<std::vector<std::string>> model_weight_files(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(single)) return std::vector<std::string>{single.string()};
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    return not_found(dir + ": no weights: neither model.safetensors nor model.safetensors.index.json exists");
  }
  auto doc_or = read_json(index.string());
  if (!doc_or.is_ok()) return doc_or.status();
  const nlohmann::json& doc = *doc_or;
  if (!doc.contains("weight_map") || !doc["weight_map"].is_object()) {
    return invalid_argument(index.string() + ": field 'weight_map' is missing or not an object");
  }
  std::set<std::string> shards;
  for (auto& [name, file] : doc["weight_map"].items()) {
    if (!file.is_string()) return invalid_argument(index.string() + ": field 'weight_map." + name + "' must be a file name");
    shards.insert(file.get<std::string>());
  }
  std::vector<std::string> out;
  for (const auto& s : shards) {
    const fs::path p = fs::path(dir) / s;
    if (!fs::exists(p)) return not_found(index.string() + ": field 'weight_map' names " + s + ", which does not exist");
    out.push_back(p.string());
  }
  return out;
}

}  // namespace trainer::engine::model

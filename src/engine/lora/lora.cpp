#include "engine/lora/lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "engine/engine_error.h"
#include "engine/model/safetensors.h"

namespace trainer::engine::lora {
namespace fs = std::filesystem;

const std::vector<std::string>& supported_targets() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return names;
}

namespace {

std::string module_path(int64_t layer, const std::string& target) {
  const bool attn = target == "q_proj" || target == "k_proj" || target == "v_proj" || target == "o_proj";
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + target;
}

void check_targets(const std::vector<std::string>& targets, const std::string& where) {
  if (targets.empty()) throw EngineError(StatusCode::kInvalidArgument, where + ": no target modules");
  for (const auto& t : targets) {
    const auto& ok = supported_targets();
    if (std::find(ok.begin(), ok.end(), t) == ok.end()) {
      throw EngineError(StatusCode::kInvalidArgument,
                        where + ": unknown target module '" + t + "' (supported: q_proj, k_proj, v_proj, o_proj, "
                                                                   "gate_proj, up_proj, down_proj)");
    }
  }
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

void attach(model::CausalLM& model, const plan::LoraSettings& settings, uint64_t seed) {
  check_targets(settings.targetModules, "config.hyperparams.lora.targetModules");
  if (settings.rank <= 0) throw EngineError(StatusCode::kInvalidArgument, "config.hyperparams.lora.rank: must be positive");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double scale = settings.alpha / settings.rank;
  for (auto& layer : model.layers()) {
    for (const auto& target : supported_targets()) {  // fixed order: the draw does not depend on the list's order
      if (std::find(settings.targetModules.begin(), settings.targetModules.end(), target) == settings.targetModules.end()) continue;
      model::Linear* lin = layer.projection(target);
      const int64_t out = lin->weight.size(0), in = lin->weight.size(1);
      // kaiming_uniform_(a=sqrt(5)) on [r, in]: gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in) = 1/sqrt(in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      at::Tensor A = at::empty({settings.rank, in}, at::kFloat).uniform_(-bound, bound, gen);
      lin->lora_A = A.to(model.device()).set_requires_grad(true);
      lin->lora_B = at::zeros({out, settings.rank}, at::TensorOptions().dtype(at::kFloat).device(model.device()))
                        .set_requires_grad(true);
      lin->lora_scale = scale;
      lin->lora_dropout = settings.dropout;
    }
  }
}

std::vector<std::pair<std::string, at::Tensor>> named_parameters(model::CausalLM& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  int64_t i = 0;
  for (auto& layer : model.layers()) {
    for (const auto& target : supported_targets()) {
      model::Linear* lin = layer.projection(target);
      if (!lin->lora_A.defined()) continue;
      const std::string base = "base_model.model." + module_path(i, target);
      out.emplace_back(base + ".lora_A.weight", lin->lora_A);
      out.emplace_back(base + ".lora_B.weight", lin->lora_B);
    }
    ++i;
  }
  return out;
}

void save_peft(model::CausalLM& model, const plan::LoraSettings& settings, const std::string& base_model,
               const std::string& dir) {
  nlohmann::ordered_json cfg = {
      {"alpha_pattern", nlohmann::json::object()},
      {"base_model_name_or_path", base_model},
      {"bias", "none"},
      {"exclude_modules", nullptr},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"lora_alpha", settings.alpha},
      {"lora_bias", false},
      {"lora_dropout", settings.dropout},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", settings.rank},
      {"rank_pattern", nlohmann::json::object()},
      {"revision", nullptr},
      {"target_modules", settings.targetModules},
      {"task_type", "CAUSAL_LM"},
      {"use_dora", false},
      {"use_rslora", false},
  };
  if (std::floor(settings.alpha) == settings.alpha) cfg["lora_alpha"] = static_cast<int64_t>(settings.alpha);
  std::vector<at::Tensor> keep;
  std::vector<model::TensorToWrite> tensors;
  for (auto& [name, t] : named_parameters(model)) {
    at::Tensor c = t.detach().to(at::kCPU, at::kFloat).contiguous();
    keep.push_back(c);
    tensors.push_back({name, "F32", c.sizes().vec(), c.data_ptr(), static_cast<size_t>(c.nbytes())});
  }
  const std::string bytes = model::serialize_safetensors(tensors, {{"format", "pt"}});
  throw_if_error(write_file_atomic((fs::path(dir) / "adapter_model.safetensors").string(), bytes));
  throw_if_error(write_file_atomic((fs::path(dir) / "adapter_config.json").string(), cfg.dump(2) + "\n"));
}

void save_peft_folder(model::CausalLM& model, const plan::LoraSettings& settings, const std::string& base_model,
                      const std::string& final_dir) {
  const fs::path final_path(final_dir);
  const fs::path parent = final_path.has_parent_path() ? final_path.parent_path() : fs::path(".");
  const fs::path tmp = parent / ("." + final_path.filename().string() + ".tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  try {
    save_peft(model, settings, base_model, tmp.string());
    fsync_path(tmp.string());
    const fs::path old = parent / ("." + final_path.filename().string() + ".old-" + std::to_string(::getpid()));
    if (fs::exists(final_path)) fs::rename(final_path, old);
    fs::rename(tmp, final_path);
    fs::remove_all(old, ec);
    fsync_path(parent.string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

PeftConfig read_peft_config(const std::string& dir) {
  const std::string cfg_path = (fs::path(dir) / "adapter_config.json").string();
  std::ifstream in(cfg_path);
  if (!in) throw EngineError(StatusCode::kNotFound, cfg_path + ": no such file (is this a PEFT adapter folder?)");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json cfg = nlohmann::json::parse(ss.str(), nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) throw EngineError(StatusCode::kInvalidArgument, cfg_path + ": not a JSON object");
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!cfg.contains(name)) throw EngineError(StatusCode::kInvalidArgument, cfg_path + ": field '" + name + "' is missing");
    return cfg[name];
  };
  if (field("peft_type") != "LORA") {
    throw EngineError(StatusCode::kInvalidArgument, cfg_path + ": field 'peft_type' must be \"LORA\", got " + cfg["peft_type"].dump());
  }
  if (!field("r").is_number_integer() || cfg["r"].get<int64_t>() <= 0) {
    throw EngineError(StatusCode::kInvalidArgument, cfg_path + ": field 'r' must be a positive integer");
  }
  PeftConfig out;
  out.rank = cfg["r"].get<int64_t>();
  out.alpha = cfg.value("lora_alpha", 8.0);
  out.rslora = cfg.value("use_rslora", false);
  if (cfg.value("use_dora", false)) throw EngineError(StatusCode::kInvalidArgument, cfg_path + ": field 'use_dora': DoRA is not supported");
  if (cfg.contains("fan_in_fan_out") && cfg["fan_in_fan_out"] == true) {
    throw EngineError(StatusCode::kInvalidArgument, cfg_path + ": field 'fan_in_fan_out': not supported");
  }
  for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
    if (cfg.contains(pattern) && cfg[pattern].is_object() && !cfg[pattern].empty()) {
      throw EngineError(StatusCode::kInvalidArgument,
                        cfg_path + ": field '" + pattern + "': per-module ranks and alphas are not supported");
    }
  }
  // PEFT's LoraLayer.update_layer: lora_alpha / sqrt(r) with rsLoRA, lora_alpha / r without.
  out.scale = out.rslora ? out.alpha / std::sqrt(static_cast<double>(out.rank)) : out.alpha / static_cast<double>(out.rank);
  if (cfg.contains("bias")) out.bias = cfg["bias"].is_string() ? cfg["bias"].get<std::string>() : "";
  out.has_modules_to_save = cfg.contains("modules_to_save") && !cfg["modules_to_save"].is_null() &&
                            !(cfg["modules_to_save"].is_array() && cfg["modules_to_save"].empty());
  return out;
}

PeftAdapter read_peft(model::CausalLM& model, const std::string& dir) {
  const PeftConfig cfg = read_peft_config(dir);
  const int64_t r = cfg.rank;
  const double scale = cfg.scale;
  const std::string st_path = (fs::path(dir) / "adapter_model.safetensors").string();
  auto file = value_or_throw(model::SafetensorsFile::open(st_path));
  PeftAdapter out;
  out.rank = r;
  int64_t loaded = 0;
  int64_t i = 0;
  for (auto& layer : model.layers()) {
    out.weights.emplace_back(supported_targets().size());
    for (size_t t = 0; t < supported_targets().size(); ++t) {
      const std::string& target = supported_targets()[t];
      const std::string base = "base_model.model." + module_path(i, target);
      const model::TensorView* a = file->find(base + ".lora_A.weight");
      const model::TensorView* b = file->find(base + ".lora_B.weight");
      if (a == nullptr && b == nullptr) continue;
      if (a == nullptr || b == nullptr) {
        throw EngineError(StatusCode::kInvalidArgument, st_path + ": tensor '" + base + (a ? ".lora_B" : ".lora_A") + ".weight' is missing");
      }
      model::Linear* lin = layer.projection(target);
      const int64_t out_features = lin->weight.size(0), inf = lin->weight.size(1);
      auto make = [&](const model::TensorView* v, const std::string& name, std::vector<int64_t> shape) {
        if (v->shape != shape) {
          throw EngineError(StatusCode::kInvalidArgument,
                            st_path + ": tensor '" + name + "' has the wrong shape for r=" + std::to_string(r) + " on this model");
        }
        at::ScalarType st = model::scalar_type_of(v->dtype);
        if (st == at::ScalarType::Undefined || !at::isFloatingType(st)) {
          throw EngineError(StatusCode::kInvalidArgument, st_path + ": tensor '" + name + "': field 'dtype' is not a float type");
        }
        return at::from_blob(const_cast<void*>(v->data), v->shape, at::TensorOptions().dtype(st))
            .to(model.device(), at::kFloat, /*non_blocking=*/false, /*copy=*/true);
      };
      model::LoraWeights& w = out.weights.back()[t];
      w.A = make(a, base + ".lora_A.weight", {r, inf});
      w.B = make(b, base + ".lora_B.weight", {out_features, r});
      w.scale = scale;
      ++loaded;
    }
    ++i;
  }
  if (loaded == 0) {
    throw EngineError(StatusCode::kInvalidArgument,
                      st_path + ": no LoRA tensor matches this model's layers (expected keys like "
                                "'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')");
  }
  return out;
}

void load_peft(model::CausalLM& model, const std::string& dir) {
  PeftAdapter adapter = read_peft(model, dir);
  for (size_t i = 0; i < model.layers().size(); ++i) {
    for (size_t t = 0; t < supported_targets().size(); ++t) {
      const model::LoraWeights& w = adapter.weights[i][t];
      if (!w.A.defined()) continue;
      model::Linear* lin = model.layers()[i].projection(supported_targets()[t]);
      lin->lora_A = w.A;
      lin->lora_B = w.B;
      lin->lora_scale = w.scale;
      lin->lora_dropout = 0;
    }
  }
}

}  // namespace trainer::engine::lora

// PEFT LoRA adapter checks before an import (see adapter_check.h).
#include "service/adapter_check.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/json_parse.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // safetensors' own bound on a header
constexpr const char* kPeftPrefix = "base_model.model.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The last '.'-separated part of a module path ("model.layers.0.mlp.up_proj" -> "up_proj").
std::string leaf(const std::string& module) {
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

}  // namespace

Result<std::map<std::string, std::vector<int64_t>>> safetensors_shapes(const std::string& path,
                                                                       const std::string& field) {
  const std::string name = fs::path(path).filename().string();
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return invalid_field(field, name + ": cannot be read (" + ec.message() + ")");
  std::ifstream in(path, std::ios::binary);
  unsigned char len_bytes[8] = {};
  if (size < 8 || !in.read(reinterpret_cast<char*>(len_bytes), 8)) {
    return invalid_field(field, name + " is not a safetensors file: shorter than its 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeaderBytes || n > size - 8) {
    return invalid_field(field, name + " is not a safetensors file: its header length " + std::to_string(n) +
                                    " does not fit the file's " + std::to_string(size) + " bytes");
  }
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return invalid_field(field, name + ": header cannot be read");
  auto doc = parse_json(header, name + "'s header");
  if (!doc.is_ok() || !doc->is_object()) {
    return invalid_field(field, name + " is not a safetensors file: its header is not a JSON object");
  }
  const uint64_t data_bytes = size - 8 - n;
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [tensor, entry] : doc->items()) {
    if (tensor == "__metadata__") continue;
    const auto bad = [&](const std::string& why) { return invalid_field(field, name + ": tensor '" + tensor + "' " + why); };
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
        !entry["shape"].is_array() || !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      return bad("has no dtype, shape and data_offsets");
    }
    std::vector<int64_t> shape;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("has a malformed shape");
      shape.push_back(d.get<int64_t>());
    }
    const json& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned() || off[0].get<uint64_t>() > off[1].get<uint64_t>() ||
        off[1].get<uint64_t>() > data_bytes) {
      return bad("has data offsets " + off.dump() + " outside the file's " + std::to_string(data_bytes) +
                 " bytes of tensor data (a truncated or damaged file)");
    }
    out[tensor] = std::move(shape);
  }
  return out;
}

Result<AdapterInfo> check_peft_adapter(const std::string& dir, const std::string& base_dir, int max_rank,
                                       const std::string& field) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return invalid_field(field, "'" + dir + "' is not a folder on this host");
  for (const char* file : {kAdapterConfigFile, kAdapterWeightsFile}) {
    if (!fs::is_regular_file(fs::path(dir) / file, ec)) {
      return invalid_field(field, "missing file " + std::string(file) + " in " + dir +
                                      " (a PEFT LoRA adapter folder holds adapter_config.json and "
                                      "adapter_model.safetensors)");
    }
  }
  std::ifstream cfg_in(fs::path(dir) / kAdapterConfigFile);
  std::string cfg_text((std::istreambuf_iterator<char>(cfg_in)), std::istreambuf_iterator<char>());
  auto cfg = parse_json(cfg_text, kAdapterConfigFile);
  if (!cfg.is_ok() || !cfg->is_object()) return invalid_field(field, std::string(kAdapterConfigFile) + " is not a JSON object");
  const json& c = *cfg;
  const std::string peft_type = c.value("peft_type", json(nullptr)).is_string() ? c["peft_type"].get<std::string>() : "";
  if (peft_type != "LORA") {
    return invalid_field(field, std::string(kAdapterConfigFile) + ": peft_type is " +
                                    (c.contains("peft_type") ? c["peft_type"].dump() : std::string("missing")) +
                                    "; only LoRA adapters (peft_type \"LORA\") can be imported");
  }
  if (c.contains("modules_to_save") && !c["modules_to_save"].is_null() &&
      !(c["modules_to_save"].is_array() && c["modules_to_save"].empty())) {
    return invalid_field(field, std::string(kAdapterConfigFile) + ": modules_to_save is " + c["modules_to_save"].dump() +
                                    "; an adapter that saves whole modules besides its LoRA factors cannot be "
                                    "imported (train it without modules_to_save)");
  }
  if (c.value("use_dora", false) == true) {
    return invalid_field(field, std::string(kAdapterConfigFile) + ": use_dora is true; DoRA adapters cannot be imported");
  }
  if (!c.contains("r") || !c["r"].is_number_integer() || c["r"].get<int64_t>() <= 0) {
    return invalid_field(field, std::string(kAdapterConfigFile) + ": r must be a positive integer");
  }
  AdapterInfo info;
  info.rank = c["r"].get<int64_t>();
  if (info.rank > max_rank) {
    return invalid_field(field, "the adapter's rank r=" + std::to_string(info.rank) + " is above the deployment's maximum " +
                                    std::to_string(max_rank) + " (limits.maxAdapterRank)");
  }
  if (c.contains("rank_pattern") && c["rank_pattern"].is_object() && !c["rank_pattern"].empty()) {
    return invalid_field(field, std::string(kAdapterConfigFile) + ": rank_pattern gives modules other ranks; "
                                                                  "only one rank per adapter can be imported");
  }
  info.alpha = c.value("lora_alpha", json(8.0)).is_number() ? c["lora_alpha"].get<double>() : 8.0;
  if (c.contains("base_model_name_or_path") && c["base_model_name_or_path"].is_string()) {
    info.base_model_name_or_path = c["base_model_name_or_path"].get<std::string>();
  }
  const json targets = c.value("target_modules", json(nullptr));
  if (targets.is_string()) {
    info.target_modules.push_back(targets.get<std::string>());
  } else if (targets.is_array() && !targets.empty()) {
    for (const auto& t : targets) {
      if (!t.is_string()) return invalid_field(field, std::string(kAdapterConfigFile) + ": target_modules must be names");
      info.target_modules.push_back(t.get<std::string>());
    }
  } else {
    return invalid_field(field, std::string(kAdapterConfigFile) + ": target_modules must name the modules it adapts");
  }
  std::sort(info.target_modules.begin(), info.target_modules.end());

  // The base model's linear weights by module path ("model.layers.0.self_attn.q_proj").
  std::map<std::string, std::vector<int64_t>> base;
  for (auto it = fs::directory_iterator(base_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() != ".safetensors") continue;
    auto shapes = safetensors_shapes(it->path().string(), "baseModel");
    if (!shapes.is_ok()) return shapes.status();
    for (auto& [name, shape] : *shapes) {
      if (ends_with(name, ".weight") && shape.size() == 2) base[name.substr(0, name.size() - 7)] = shape;
    }
  }
  if (base.empty()) return failed_precondition("the base model folder " + base_dir + " holds no safetensors weights");
  std::set<std::string> base_leaves;
  for (const auto& [module, _] : base) base_leaves.insert(leaf(module));
  for (const auto& t : info.target_modules) {
    if (!base_leaves.count(t)) {
      std::string known;
      for (const auto& l : base_leaves) known += (known.empty() ? "" : ", ") + l;
      return invalid_field(field, std::string(kAdapterConfigFile) + ": target module '" + t +
                                      "' is not a module of the base model (its linear modules: " + known + ")");
    }
  }

  auto tensors = safetensors_shapes((fs::path(dir) / kAdapterWeightsFile).string(), field);
  if (!tensors.is_ok()) return tensors.status();
  for (const auto& [name, shape] : *tensors) {
    const bool a = ends_with(name, ".lora_A.weight");
    const bool b = ends_with(name, ".lora_B.weight");
    if ((!a && !b) || name.rfind(kPeftPrefix, 0) != 0) {
      return invalid_field(field, std::string(kAdapterWeightsFile) + ": tensor '" + name +
                                      "' is not a LoRA factor (expected base_model.model.MODULE.lora_A.weight or "
                                      ".lora_B.weight)");
    }
    const std::string module = name.substr(std::string(kPeftPrefix).size(),
                                           name.size() - std::string(kPeftPrefix).size() - std::string(".lora_A.weight").size());
    auto found = base.find(module);
    if (found == base.end()) {
      return invalid_field(field, std::string(kAdapterWeightsFile) + ": tensor '" + name + "' adapts '" + module +
                                      "', which the base model does not have");
    }
    const std::string partner = name.substr(0, name.size() - std::string("A.weight").size()) + (a ? "B.weight" : "A.weight");
    if (!tensors->count(partner)) {
      return invalid_field(field, std::string(kAdapterWeightsFile) + ": tensor '" + partner + "' is missing");
    }
    const int64_t out = found->second[0], in = found->second[1];
    const std::vector<int64_t> expected = a ? std::vector<int64_t>{info.rank, in} : std::vector<int64_t>{out, info.rank};
    if (shape != expected) {
      return invalid_field(field, std::string(kAdapterWeightsFile) + ": tensor '" + name + "' has shape " +
                                      shape_text(shape) + ", but r=" + std::to_string(info.rank) + " on the base model's " +
                                      module + " " + shape_text(found->second) + " needs " + shape_text(expected) +
                                      " (was it trained on another base model?)");
    }
    ++info.lora_tensors;
  }
  if (info.lora_tensors == 0) return invalid_field(field, std::string(kAdapterWeightsFile) + " holds no LoRA tensors");
  return info;
}

}  // namespace trainer::service

// Checks a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) against a
// base model folder before the registry imports it: the configuration is LoRA, saves no whole
// modules, stays within the deployment's rank, targets modules the base model has, and every
// tensor is a LoRA factor of the right shape for that base model. Reads only the safetensors
// headers (no tensor bytes, no torch); that the adapter loads is proven separately by the
// engine (trainer-job score). Internal to src/service.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::service {

inline constexpr const char* kAdapterConfigFile = "adapter_config.json";
inline constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";

// What an accepted adapter declares.
struct AdapterInfo {
  int64_t rank = 0;                         // r
  double alpha = 0;                         // lora_alpha
  std::vector<std::string> target_modules;  // as declared, sorted
  std::string base_model_name_or_path;      // as PEFT recorded it ("" when absent)
  int64_t lora_tensors = 0;                 // lora_A and lora_B tensors in the weights file
};

// The tensors of a safetensors file by name: {dtype, shape}. invalid_field(`field`) naming the
// file when its header is not a well-formed safetensors header that fits the file.
Result<std::map<std::string, std::vector<int64_t>>> safetensors_shapes(const std::string& path,
                                                                       const std::string& field);

// Checks the adapter under `dir` against the base model folder `base_dir` (its *.safetensors
// files). Errors blame `field` and say what is wrong with which file, tensor or setting.
Result<AdapterInfo> check_peft_adapter(const std::string& dir, const std::string& base_dir, int max_rank,
                                       const std::string& field);

}  // namespace trainer::service

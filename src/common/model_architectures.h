// The model architectures the native engine trains, as a Hugging Face folder's config.json names
// them. One list: the engine's config reader, base-model selection and the run checks all use it,
// so a folder the engine cannot train is refused when it is selected, not when a job starts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace trainer {

// One architecture: its config.json "architectures"[0] class name and its "model_type".
struct ModelArchitecture {
  std::string_view class_name;  // "Qwen3ForCausalLM"
  std::string_view model_type;  // "qwen3"
};

// Every architecture the engine trains, in the order messages list them.
const std::vector<ModelArchitecture>& supported_architectures();

// "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM".
std::string supported_architectures_text();

// The supported architecture `name` (a class name or a model_type); nullptr when unsupported.
const ModelArchitecture* find_architecture(std::string_view name);

// What `DIR/config.json` names as the folder's architecture: "architectures"[0], else
// "model_type". Errors (kInvalidArgument, kNotFound) name the file and what is wrong with it.
Result<std::string> folder_architecture(const std::string& dir);

// ok when the folder's architecture is one the engine trains; otherwise kFailedPrecondition:
// "WHAT is a GPT2LMHeadModel (DIR/config.json), which the engine cannot train; supported
// architectures: ...". `what` names the folder for the user ("base model 'gpt2'").
Status check_trainable_folder(const std::string& dir, const std::string& what);

}  // namespace trainer

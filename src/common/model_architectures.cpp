#include "common/model_architectures.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json_parse.h"

namespace trainer {

const std::vector<ModelArchitecture>& supported_architectures() {
  static const std::vector<ModelArchitecture> kList = {
      {"Qwen3ForCausalLM", "qwen3"}, {"Qwen2ForCausalLM", "qwen2"}, {"LlamaForCausalLM", "llama"}};
  return kList;
}

std::string supported_architectures_text() {
  std::string text;
  for (const auto& a : supported_architectures()) text += (text.empty() ? "" : ", ") + std::string(a.class_name);
  return text;
}

const ModelArchitecture* find_architecture(std::string_view name) {
  for (const auto& a : supported_architectures()) {
    if (a.class_name == name || a.model_type == name) return &a;
  }
  return nullptr;
}

Result<std::string> folder_architecture(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) return not_found(path + ": no such file (is this a Hugging Face model folder?)");
  std::stringstream text;
  text << in.rdbuf();
  TRAINER_ASSIGN_OR_RETURN(nlohmann::json doc, parse_json(text.str(), path));
  if (!doc.is_object()) return invalid_argument(path + ": not a JSON object");
  if (doc.contains("architectures") && doc["architectures"].is_array() && !doc["architectures"].empty() &&
      doc["architectures"][0].is_string()) {
    return doc["architectures"][0].get<std::string>();
  }
  if (doc.contains("model_type") && doc["model_type"].is_string()) return doc["model_type"].get<std::string>();
  return invalid_argument(path + ": field 'architectures' is missing (and no 'model_type')");
}

Status check_trainable_folder(const std::string& dir, const std::string& what) {
  auto arch = folder_architecture(dir);
  if (!arch.is_ok()) {
    return failed_precondition(what + " cannot be read as a model: " + arch.status().message());
  }
  if (find_architecture(*arch) != nullptr) return Status::ok();
  return failed_precondition(what + " is a " + *arch + " (" + (std::filesystem::path(dir) / "config.json").string() +
                    "), which the engine cannot train; supported architectures: " + supported_architectures_text());
}

}  // namespace trainer

// Merging a PEFT LoRA adapter into its base model's weights: a Hugging Face model folder that
// transformers and vLLM load without PEFT (`trainer-job merge`, `trainer trained-models export
// --merged`). Works on the safetensors files themselves, not on a loaded CausalLM, so every base
// tensor keeps its own name and dtype and only the adapted linears are materialised.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/files.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/lora/lora.h"
#include "engine/model/config.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"

namespace trainer::engine {
namespace lora {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPeftPrefix = "base_model.model.";
constexpr const char* kLoraA = ".lora_A.weight";
constexpr const char* kLoraB = ".lora_B.weight";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Files of a model folder that hold weights (or an index of them): the merged folder writes its
// own model.safetensors instead. Everything else (config.json, generation_config.json, the
// tokenizer's files, a chat template) is copied.
bool is_weight_file(const std::string& name) {
  for (const char* ext : {".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json", ".pt", ".pth",
                          ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx"}) {
    if (ends_with(name, ext)) return true;
  }
  return false;
}

at::Tensor tensor_of(const model::TensorView& v, const std::string& where) {
  const at::ScalarType st = model::scalar_type_of(v.dtype);
  if (st == at::ScalarType::Undefined || !at::isFloatingType(st)) {
    throw EngineError(StatusCode::kInvalidArgument, where + ": field 'dtype' " + v.dtype + " is not a float type");
  }
  return at::from_blob(const_cast<void*>(v.data), v.shape, at::TensorOptions().dtype(st));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

int64_t merge_peft_into(const std::string& model_dir, const std::string& adapter_dir, const std::string& out_dir) {
  const PeftConfig cfg = read_peft_config(adapter_dir);
  const std::string cfg_path = (fs::path(adapter_dir) / "adapter_config.json").string();
  if (cfg.has_modules_to_save) {
    throw EngineError(StatusCode::kInvalidArgument,
                      cfg_path + ": field 'modules_to_save': modules saved whole cannot be merged into the base");
  }
  if (cfg.bias != "none") {
    throw EngineError(StatusCode::kInvalidArgument, cfg_path + ": field 'bias': only \"none\" can be merged");
  }

  // The adapter's pairs, by the base module they adapt ("model.layers.0.self_attn.q_proj").
  const std::string st_path = (fs::path(adapter_dir) / "adapter_model.safetensors").string();
  auto adapter = value_or_throw(model::SafetensorsFile::open(st_path));
  struct Pair {
    const model::TensorView* a = nullptr;
    const model::TensorView* b = nullptr;
  };
  std::map<std::string, Pair> pairs;
  for (const auto& [name, view] : adapter->tensors()) {
    const bool is_a = ends_with(name, kLoraA);
    if (name.rfind(kPeftPrefix, 0) != 0 || (!is_a && !ends_with(name, kLoraB))) {
      throw EngineError(StatusCode::kInvalidArgument,
                        st_path + ": tensor '" + name + "' is not a LoRA A or B matrix (expected keys like "
                                  "'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight'); it cannot be merged");
    }
    const std::string module = name.substr(std::string(kPeftPrefix).size(),
                                           name.size() - std::string(kPeftPrefix).size() - std::string(kLoraA).size());
    (is_a ? pairs[module].a : pairs[module].b) = &view;
  }
  if (pairs.empty()) throw EngineError(StatusCode::kInvalidArgument, st_path + ": holds no LoRA tensors");

  // The base's tensors, from one file or the shards its index names.
  std::vector<std::shared_ptr<model::SafetensorsFile>> files;
  std::map<std::string, const model::TensorView*> base;
  for (const auto& path : value_or_throw(model::model_weight_files(model_dir))) {
    files.push_back(value_or_throw(model::SafetensorsFile::open(path)));
    for (const auto& [name, view] : files.back()->tensors()) {
      if (!base.emplace(name, &view).second) {
        throw EngineError(StatusCode::kInvalidArgument, path + ": tensor '" + name + "' is also in another shard");
      }
    }
  }

  // The merged weights, kept alive until the file is written.
  std::map<std::string, at::Tensor> merged;
  for (const auto& [module, ab] : pairs) {
    const std::string key = kPeftPrefix + module;
    if (ab.a == nullptr || ab.b == nullptr) {
      throw EngineError(StatusCode::kInvalidArgument,
                        st_path + ": tensor '" + key + (ab.a ? kLoraB : kLoraA) + "' is missing");
    }
    const std::string weight_name = module + ".weight";
    auto it = base.find(weight_name);
    if (it == base.end()) {
      throw EngineError(StatusCode::kInvalidArgument, st_path + ": tensor '" + key + kLoraA + "' adapts '" + weight_name +
                                                          "', which the base model in " + model_dir + " does not have");
    }
    const model::TensorView& w = *it->second;
    const std::vector<int64_t> want_a = {cfg.rank, w.shape.size() == 2 ? w.shape[1] : -1};
    const std::vector<int64_t> want_b = {w.shape.empty() ? -1 : w.shape[0], cfg.rank};
    if (w.shape.size() != 2 || ab.a->shape != want_a || ab.b->shape != want_b) {
      throw EngineError(StatusCode::kInvalidArgument,
                        st_path + ": tensors '" + key + ".lora_A/B.weight' have shapes " + shape_text(ab.a->shape) +
                            " and " + shape_text(ab.b->shape) + ", which do not fit r=" + std::to_string(cfg.rank) +
                            " on '" + weight_name + "' " + shape_text(w.shape));
    }
    const at::Tensor W = tensor_of(w, weight_name);
    const at::Tensor A = tensor_of(*ab.a, st_path + ": tensor '" + key + kLoraA + "'").to(at::kFloat);
    const at::Tensor B = tensor_of(*ab.b, st_path + ": tensor '" + key + kLoraB + "'").to(at::kFloat);
    // PEFT's Linear.get_delta_weight: (B @ A) * scaling in fp32; then `weight.data += delta`,
    // which adds in fp32 and rounds once to the weight's dtype.
    const at::Tensor delta = at::matmul(B, A) * cfg.scale;
    merged[weight_name] = (W.to(at::kFloat) + delta).to(W.scalar_type()).contiguous();
  }

  std::vector<model::TensorToWrite> out;
  out.reserve(base.size());
  for (const auto& [name, view] : base) {
    auto m = merged.find(name);
    if (m == merged.end()) {
      out.push_back({name, view->dtype, view->shape, view->data, view->nbytes});
    } else {
      out.push_back({name, view->dtype, view->shape, m->second.data_ptr(), static_cast<size_t>(m->second.nbytes())});
    }
  }
  throw_if_error(write_file_atomic((fs::path(out_dir) / "model.safetensors").string(),
                                   model::serialize_safetensors(out, {{"format", "pt"}})));

  for (const auto& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.empty() || name[0] == '.' || is_weight_file(name)) continue;
    fs::copy_file(entry.path(), fs::path(out_dir) / name, fs::copy_options::overwrite_existing);
  }
  return static_cast<int64_t>(merged.size());
}

}  // namespace lora

Result<MergeResult> merge_adapter(const MergeRequest& request) {
  namespace fs = std::filesystem;
  MergeResult result;
  const fs::path final_path = fs::path(request.output_dir).lexically_normal();
  std::error_code ec;
  if (final_path.empty() || final_path.filename().empty()) {
    return invalid_argument("output: '" + request.output_dir + "' does not name a folder");
  }
  if (fs::exists(final_path, ec)) {
    return Status(StatusCode::kAlreadyExists,
                  "output: " + final_path.string() + " already exists; a merge writes a new folder");
  }
  const fs::path parent = final_path.has_parent_path() ? final_path.parent_path() : fs::path(".");
  const fs::path tmp = parent / ("." + final_path.filename().string() + ".merging-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status(StatusCode::kInvalidArgument, "output: cannot create " + tmp.string() + ": " + ec.message());
  Status status = guard(
      [&] {
        result.merged_modules = lora::merge_peft_into(request.model_dir, request.adapter_dir, tmp.string());
        for (const auto& entry : fs::directory_iterator(tmp)) result.files.push_back(entry.path().filename().string());
        std::sort(result.files.begin(), result.files.end());
        lora::fsync_path(tmp);
        fs::rename(tmp, final_path);
        lora::fsync_path(parent);
      },
      "merging " + request.adapter_dir + " into " + request.model_dir);
  if (!status.is_ok()) {
    fs::remove_all(tmp, ec);
    return status;
  }
  return result;
}

}  // namespace trainer::engine

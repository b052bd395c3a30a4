// Training state of a checkpoint (declared in train/state.h).
#include "engine/train/state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/files.h"
#include "engine/engine_error.h"
#include "engine/lora/lora.h"
#include "engine/model/safetensors.h"

namespace trainer::engine::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kStateFormat = 1;
constexpr const char* kStateFile = "state.json";
constexpr const char* kTensorFile = "tensors.safetensors";

model::TensorToWrite to_write(const std::string& name, const at::Tensor& cpu) {
  return {.name = name,
          .dtype = model::safetensors_dtype_of(cpu.scalar_type()),
          .shape = cpu.sizes().vec(),
          .data = cpu.data_ptr(),
          .nbytes = static_cast<size_t>(cpu.nbytes())};
}

at::Tensor from_view(const model::TensorView& v, const std::string& file, const std::string& name) {
  const at::ScalarType t = model::scalar_type_of(v.dtype);
  if (t == at::ScalarType::Undefined) throw EngineError(StatusCode::kInvalidArgument, file + ": tensor '" + name + "' has dtype " + v.dtype);
  return at::from_blob(const_cast<void*>(v.data), v.shape, at::TensorOptions().dtype(t)).clone();
}

}  // namespace

void save_training_state(const std::string& dir, Updater& updater, int64_t engine_step, const json& data,
                         const at::Device& device) {
  fs::create_directories(dir);
  optim::AdamW& adam = updater.optimizer();
  std::vector<at::Tensor> keep;  // CPU copies, alive until serialized
  std::vector<model::TensorToWrite> tensors;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    keep.push_back(t.detach().to(at::kCPU).contiguous());
    tensors.push_back(to_write(name, keep.back()));
  };
  for (size_t i = 0; i < adam.exp_avg().size(); ++i) {
    add("adam.exp_avg." + std::to_string(i), adam.exp_avg()[i]);
    add("adam.exp_avg_sq." + std::to_string(i), adam.exp_avg_sq()[i]);
  }
  add("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
  if (device.is_cuda()) {
    add("rng.cuda." + std::to_string(device.index()),
        at::globalContext().defaultGenerator(device).get_state());
  }
  throw_if_error(write_file_atomic((fs::path(dir) / kTensorFile).string(),
                                            model::serialize_safetensors(tensors, {{"format", "trainer-training-state"}})));
  json state = {{"format", kStateFormat},
                {"engineStep", engine_step},
                {"optimizerSteps", adam.steps()},
                {"accumulation", 0},
                {"parameters", static_cast<int64_t>(adam.exp_avg().size())},
                {"data", data}};
  throw_if_error(write_file_atomic((fs::path(dir) / kStateFile).string(), state.dump(2) + "\n"));
}

LoadedState load_training_state(const std::string& dir, Updater& updater, const at::Device& device) {
  const std::string state_path = (fs::path(dir) / kStateFile).string();
  std::ifstream in(state_path);
  if (!in) throw EngineError(StatusCode::kNotFound, state_path + ": no such file (is this a training state folder?)");
  std::stringstream ss;
  ss << in.rdbuf();
  json state = json::parse(ss.str(), nullptr, false);
  if (state.is_discarded() || !state.is_object()) throw EngineError(StatusCode::kInvalidArgument, state_path + ": not a JSON object");
  auto integer = [&](const char* key) {
    if (!state.contains(key) || !state[key].is_number_integer()) {
      throw EngineError(StatusCode::kInvalidArgument, state_path + ": field '" + key + "' must be an integer");
    }
    return state[key].get<int64_t>();
  };
  if (integer("format") != kStateFormat) throw EngineError(StatusCode::kInvalidArgument, state_path + ": unknown format");
  if (integer("accumulation") != 0) {
    throw EngineError(StatusCode::kInvalidArgument, state_path + ": field 'accumulation': only states saved at an optimizer boundary resume");
  }
  optim::AdamW& adam = updater.optimizer();
  if (integer("parameters") != static_cast<int64_t>(adam.exp_avg().size())) {
    throw EngineError(StatusCode::kInvalidArgument, state_path + ": field 'parameters': the state holds " +
                                                        std::to_string(integer("parameters")) + " adapter tensors, the run trains " +
                                                        std::to_string(adam.exp_avg().size()));
  }
  const std::string tensor_path = (fs::path(dir) / kTensorFile).string();
  auto file = value_or_throw(model::SafetensorsFile::open(tensor_path));
  auto tensor = [&](const std::string& name) {
    const model::TensorView* v = file->find(name);
    if (v == nullptr) throw EngineError(StatusCode::kInvalidArgument, tensor_path + ": tensor '" + name + "' is missing");
    return from_view(*v, tensor_path, name);
  };
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < adam.exp_avg().size(); ++i) {
    for (auto [name, target] : {std::pair{"adam.exp_avg.", &adam.exp_avg()[i]}, std::pair{"adam.exp_avg_sq.", &adam.exp_avg_sq()[i]}}) {
      at::Tensor t = tensor(name + std::to_string(i));
      if (t.sizes() != target->sizes()) {
        throw EngineError(StatusCode::kInvalidArgument, tensor_path + ": tensor '" + name + std::to_string(i) + "' has another shape than the run's adapter");
      }
      target->copy_(t);
    }
  }
  adam.set_steps(integer("optimizerSteps"));
  at::Generator cpu_generator = at::detail::getDefaultCPUGenerator();
  cpu_generator.set_state(tensor("rng.cpu"));
  if (device.is_cuda()) {
    const std::string name = "rng.cuda." + std::to_string(device.index());
    at::Generator cuda_generator = at::globalContext().defaultGenerator(device);
    if (file->find(name) != nullptr) cuda_generator.set_state(tensor(name));
  }
  return LoadedState{.engine_step = integer("engineStep"), .data = state.value("data", json::object())};
}

void load_adapter_weights(const std::string& adapter_dir, model::CausalLM& model) {
  const std::string path = (fs::path(adapter_dir) / "adapter_model.safetensors").string();
  auto file = value_or_throw(model::SafetensorsFile::open(path));
  c10::NoGradGuard no_grad;
  for (auto& [name, param] : lora::named_parameters(model)) {
    const model::TensorView* v = file->find(name);
    if (v == nullptr) throw EngineError(StatusCode::kInvalidArgument, path + ": tensor '" + name + "' is missing");
    at::Tensor t = from_view(*v, path, name);
    if (t.sizes() != param.sizes()) throw EngineError(StatusCode::kInvalidArgument, path + ": tensor '" + name + "' has another shape than the run's adapter");
    param.copy_(t);
  }
}

}  // namespace trainer::engine::train

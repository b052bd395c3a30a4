// runtime_info(), the engine's boundary helpers and the debug_forward() test hook.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include "common/files.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/lora/lora.h"
#include "engine/model/safetensors.h"

namespace trainer::engine {

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.torch_version = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                       std::to_string(TORCH_VERSION_PATCH);
  info.cuda_available = at::hasCUDA();
  info.cuda_devices = info.cuda_available ? static_cast<int>(at::detail::getCUDAHooks().getNumGPUs()) : 0;
  info.cpu_threads = at::get_num_threads();
  return info;
}

at::Device pick_device(int gpus) {
  if (gpus > 0 && at::hasCUDA()) return at::Device(at::kCUDA, 0);
  return at::Device(at::kCPU);
}

at::ScalarType dtype_of(plan::Precision p) { return p == plan::Precision::kBf16 ? at::kBFloat16 : at::kFloat; }

Status guard(const std::function<void()>& body, const std::string& context) {
  auto with = [&](const std::string& m) { return context.empty() ? m : context + ": " + m; };
  try {
    body();
    return Status::ok();
  } catch (const EngineError& e) {
    return Status(e.code(), e.what());
  } catch (const c10::Error& e) {
    return internal_error(with(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return internal_error(with(e.what()));
  }
}

Status debug_forward(const DebugForwardRequest& request) {
  return guard([&] {
    auto model = model::CausalLM::load(request.model_dir, dtype_of(request.precision), at::Device(at::kCPU));
    if (!request.adapter_dir.empty()) {
      lora::load_peft(*model, request.adapter_dir);
      for (auto& [name, p] : lora::named_parameters(*model)) p.set_requires_grad(request.grads);
    }
    auto in = value_or_throw(model::SafetensorsFile::open(request.inputs_path));
    auto get = [&](const std::string& name) -> at::Tensor {
      const model::TensorView* v = in->find(name);
      if (v == nullptr) return {};
      if (v->dtype != "I64") {
        throw EngineError(StatusCode::kInvalidArgument, request.inputs_path + ": tensor '" + name + "' must be I64");
      }
      return at::from_blob(const_cast<void*>(v->data), v->shape, at::kLong).clone();
    };
    model::ForwardInput fi;
    fi.input_ids = get("input_ids");
    if (!fi.input_ids.defined()) throw EngineError(StatusCode::kInvalidArgument, request.inputs_path + ": tensor 'input_ids' is missing");
    const int64_t B = fi.input_ids.size(0), T = fi.input_ids.size(1);
    fi.position_ids = get("position_ids");
    if (!fi.position_ids.defined()) fi.position_ids = at::arange(T, at::kLong).unsqueeze(0).expand({B, T}).contiguous();
    at::Tensor seq = get("sequence_ids");
    if (seq.defined()) fi.attn_mask = model::packed_attention_mask(seq);
    at::Tensor labels = get("labels");
    if (!labels.defined()) labels = fi.input_ids.clone();

    c10::AutoGradMode grad_mode(request.grads);
    at::Tensor hidden = model->hidden_states(fi, false);
    at::Tensor logits = model->logits(hidden).contiguous();
    auto parts = model::next_token_loss(*model, hidden, labels);
    at::Tensor loss = parts.loss_sum / static_cast<double>(std::max<int64_t>(parts.tokens, 1));
    std::vector<at::Tensor> keep = {logits.detach(), loss.detach().reshape({}).contiguous()};
    std::vector<model::TensorToWrite> out = {
        {"logits", "F32", logits.sizes().vec(), keep[0].data_ptr(), static_cast<size_t>(keep[0].nbytes())},
        {"loss", "F32", {}, keep[1].data_ptr(), static_cast<size_t>(keep[1].nbytes())},
    };
    if (request.grads) {
      loss.backward();
      for (auto& [name, p] : lora::named_parameters(*model)) {
        at::Tensor g = p.grad().defined() ? p.grad().contiguous() : at::zeros_like(p);
        keep.push_back(g);
        out.push_back({"grad." + name, "F32", g.sizes().vec(), g.data_ptr(), static_cast<size_t>(g.nbytes())});
      }
    }
    throw_if_error(write_file_atomic(request.output_path, model::serialize_safetensors(out, {{"format", "pt"}})));
  }, request.model_dir);
}

}  // namespace trainer::engine

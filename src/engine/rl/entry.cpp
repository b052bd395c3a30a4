// The engine's public RL entries (engine.h): train_rl, train, and the test hooks debug_generate
// and debug_rl_loss.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "common/files.h"
#include "common/json_parse.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/generate/generate.h"
#include "engine/lora/lora.h"
#include "engine/model/safetensors.h"
#include "engine/rl/grpo.h"
#include "engine/rl/loss.h"
#include "engine/text/tokenizer.h"

namespace trainer::engine {
namespace {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw EngineError(StatusCode::kInvalidArgument, path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return value_or_throw(parse_json(ss.str(), path));
}

}  // namespace

Result<TrainResult> train_rl(const TrainRequest& request, const EventSink& events) {
  TrainResult result;
  Status st = guard(
      [&] {
        const plan::Plan& plan = request.plan;
        const plan::RunConfig& cfg = plan.config;
        if (!cfg.is_rl()) {
          throw EngineError(StatusCode::kInvalidArgument, "config.method: train_rl trains \"grpo\" or \"gspo\"");
        }
        train::Setup setup = train::prepare(plan, events);
        int64_t total = 0;
        std::unique_ptr<train::Method> method = rl::make_method(plan, setup, events, request.output_dir, &total);
        train::Updater updater(*setup.model, cfg.lora, cfg.rl.optimizer, cfg.training.seed, total);
        train::LoopOptions options = train::loop_options(request);
        result = train::run(*method, setup, updater, options, events);
      },
      "");
  if (!st.is_ok()) return st;
  return result;
}

Result<TrainResult> run_training(const TrainRequest& request, const EventSink& events) {
  return request.plan.config.is_rl() ? train_rl(request, events) : train_sft(request, events);
}

Status debug_generate(const DebugGenerateRequest& request) {
  return guard([&] {
    auto model = model::CausalLM::load(request.model_dir, dtype_of(request.precision), pick_device(1));
    if (!request.adapter_dir.empty()) lora::load_peft(*model, request.adapter_dir);
    const nlohmann::json req = read_json_file(request.request_path);
    std::vector<std::vector<int64_t>> prompts = req.at("prompts").get<std::vector<std::vector<int64_t>>>();
    generate::SamplingOptions o;
    o.max_new_tokens = req.value("maxNewTokens", int64_t{16});
    o.greedy = req.value("greedy", false);
    o.temperature = req.value("temperature", 1.0);
    o.top_p = req.value("topP", 1.0);
    o.top_k = req.value("topK", int64_t{0});
    o.group_size = req.value("groupSize", int64_t{1});
    o.seed = req.value("seed", uint64_t{0});
    o.stop_ids = req.value("stopIds", std::vector<int64_t>{});
    o.pad_id = req.value("padId", int64_t{0});
    o.logprobs = req.value("logprobs", false);
    o.stop_strings = req.value("stopStrings", std::vector<std::string>{});
    std::optional<text::Tokenizer> tok;
    if (!o.stop_strings.empty()) {
      tok.emplace(value_or_throw(text::Tokenizer::load(request.model_dir)));
      o.decode = [&tok](const std::vector<int64_t>& ids) {
        return value_or_throw(tok->decode(std::vector<int32_t>(ids.begin(), ids.end()), false));
      };
    }
    const int repeat = std::max(1, req.value("repeat", 1));
    generate::Generation g;
    for (int i = 0; i < repeat; ++i) g = generate::generate(*model, prompts, o);
    nlohmann::json out;
    std::vector<std::vector<int64_t>> completions;
    for (int64_t i = 0; i < g.completion_ids.size(0); ++i) {
      at::Tensor row = g.completion_ids[i].narrow(0, 0, g.lengths[static_cast<size_t>(i)]).contiguous();
      completions.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
    }
    out["completions"] = completions;
    if (o.logprobs) {
      std::vector<std::vector<double>> logps;
      for (int64_t i = 0; i < g.completion_logps.size(0); ++i) {
        at::Tensor row = g.completion_logps[i].narrow(0, 0, g.lengths[static_cast<size_t>(i)]).to(at::kDouble).contiguous();
        logps.emplace_back(row.data_ptr<double>(), row.data_ptr<double>() + row.numel());
      }
      out["logprobs"] = logps;
    }
    out["lengths"] = g.lengths;
    out["terminated"] = g.terminated;
    out["generatedTokens"] = g.generated_tokens;
    out["seconds"] = g.seconds;
    out["tokensPerSecond"] = g.seconds > 0 ? static_cast<double>(g.generated_tokens) / g.seconds : 0.0;
    throw_if_error(write_file_atomic(request.output_path, out.dump()));
  }, request.model_dir);
}

Status debug_rl_loss(const DebugRlLossRequest& request) {
  return guard([&] {
    auto model = model::CausalLM::load(request.model_dir, at::kFloat, at::Device(at::kCPU));
    lora::load_peft(*model, request.adapter_dir);
    for (auto& [name, p] : lora::named_parameters(*model)) p.set_requires_grad(true);
    const nlohmann::json s = read_json_file(request.settings_path);
    auto in = value_or_throw(model::SafetensorsFile::open(request.inputs_path));
    auto get = [&](const std::string& name) -> at::Tensor {
      const model::TensorView* v = in->find(name);
      if (v == nullptr) return {};
      const at::ScalarType st = model::scalar_type_of(v->dtype);
      return at::from_blob(const_cast<void*>(v->data), v->shape, at::TensorOptions().dtype(st)).clone();
    };
    at::Tensor prompt_ids = get("prompt_ids"), prompt_mask = get("prompt_mask").to(at::kBool);
    at::Tensor completion_ids = get("completion_ids"), completion_mask = get("completion_mask");
    const int64_t P = prompt_ids.size(1), C = completion_ids.size(1);
    at::Tensor mask = at::cat({prompt_mask, completion_mask.to(at::kBool)}, 1);
    model::ForwardInput fi;
    fi.input_ids = at::cat({prompt_ids, completion_ids}, 1);
    fi.position_ids = generate::positions_of(mask);
    fi.attn_mask = generate::attention_mask(mask, P + C);
    const double temperature = s.value("temperature", 1.0);
    at::Tensor hidden = model->hidden_states(fi, false);
    at::Tensor entropy;
    at::Tensor logps = rl::masked_token_logps(*model, hidden.narrow(1, P - 1, C), completion_ids, completion_mask,
                                              temperature, &entropy);
    rl::LossInputs li;
    li.logps = logps;
    li.old_logps = get("old_logps");
    li.ref_logps = get("ref_logps");
    li.advantages = get("advantages").to(at::kFloat);
    li.mask = completion_mask.to(at::kFloat);
    li.active_tokens = li.mask.sum().item<double>();
    li.micro_batches = 1;
    rl::LossSettings ls;
    ls.sequence_level = s.value("method", "grpo") == "gspo";
    ls.clip_low = s.value("clipLow", 0.2);
    ls.clip_high = s.value("clipHigh", 0.2);
    ls.beta = s.value("klBeta", 0.0);
    const std::string agg = s.value("lossAggregation", "dapo");
    ls.aggregation = agg == "grpo" ? plan::LossAggregation::kGrpo
                     : agg == "bnpo" ? plan::LossAggregation::kBnpo
                     : agg == "dr_grpo" ? plan::LossAggregation::kDrGrpo
                                        : plan::LossAggregation::kDapo;
    ls.max_completion_length = s.value("maxCompletionLength", C);
    rl::LossOutput out = rl::policy_loss(li, ls);
    out.loss.backward();
    std::vector<at::Tensor> keep = {out.loss.detach().reshape({}).contiguous(), logps.detach().contiguous(),
                                    entropy.contiguous()};
    std::vector<model::TensorToWrite> tensors = {
        {"loss", "F32", {}, keep[0].data_ptr(), static_cast<size_t>(keep[0].nbytes())},
        {"logps", "F32", keep[1].sizes().vec(), keep[1].data_ptr(), static_cast<size_t>(keep[1].nbytes())},
        {"entropy", "F32", keep[2].sizes().vec(), keep[2].data_ptr(), static_cast<size_t>(keep[2].nbytes())},
    };
    for (auto& [name, p] : lora::named_parameters(*model)) {
      at::Tensor g = p.grad().defined() ? p.grad().contiguous() : at::zeros_like(p);
      keep.push_back(g);
    }
    size_t k = 3;
    for (auto& [name, p] : lora::named_parameters(*model)) {
      const at::Tensor& g = keep[k++];
      tensors.push_back({"grad." + name, "F32", g.sizes().vec(), g.data_ptr(), static_cast<size_t>(g.nbytes())});
    }
    throw_if_error(write_file_atomic(request.output_path, model::serialize_safetensors(tensors, {{"format", "pt"}})));
  }, request.model_dir);
}

}  // namespace trainer::engine

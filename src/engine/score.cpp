// score(): mean next-token loss of a dataset under a model (and adapter).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/data/dataset.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/lora/lora.h"
#include "engine/train/batch_tensors.h"

namespace trainer::engine {

text::Tokenizer load_tokenizer_for(const std::string& model_dir, const model::ModelConfig& config) {
  text::Tokenizer tok = value_or_throw(text::Tokenizer::load(model_dir));
  if (tok.vocab_size() > config.vocab_size) {
    throw EngineError(StatusCode::kInvalidArgument,
                      (std::filesystem::path(model_dir) / "tokenizer.json").string() + ": the tokenizer has " +
                          std::to_string(tok.vocab_size()) + " tokens but config.json field 'vocab_size' is " +
                          std::to_string(config.vocab_size) + ": this tokenizer does not belong to this model");
  }
  return tok;
}

std::vector<int64_t> stop_ids_of(const std::string& model_dir, const text::Tokenizer& tok) {
  std::set<int64_t> ids;
  if (auto eos = tok.eos_id()) ids.insert(*eos);
  for (const char* file : {"generation_config.json", "config.json"}) {
    std::ifstream in(std::filesystem::path(model_dir) / file);
    if (!in) continue;
    const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || !doc.contains("eos_token_id")) continue;
    const nlohmann::json& e = doc["eos_token_id"];
    if (e.is_number_integer()) ids.insert(e.get<int64_t>());
    if (e.is_array()) {
      for (const auto& v : e) {
        if (v.is_number_integer()) ids.insert(v.get<int64_t>());
      }
    }
    break;  // generation_config.json, when present, is what generate reads
  }
  return {ids.begin(), ids.end()};
}

Result<ScoreResult> score(const ScoreRequest& request) {
  ScoreResult result;
  Status st = guard([&] {
    at::NoGradGuard no_grad;
    auto model = model::CausalLM::load(request.model_dir, dtype_of(request.precision), at::Device(at::kCPU));
    if (!request.adapter_dir.empty()) lora::load_peft(*model, request.adapter_dir);
    text::Tokenizer tok = load_tokenizer_for(request.model_dir, model->config());
    data::LoadOptions opts;
    opts.max_seq_length = request.max_seq_length;
    data::Dataset ds = value_or_throw(data::load_dataset(request.data_path, tok, opts));
    std::vector<size_t> order(ds.rows.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    data::SequenceOptions so;
    so.max_seq_length = request.max_seq_length;
    auto seqs = data::plan_sequences(ds.rows, order, so);
    const int32_t pad = tok.pad_id().value_or(0);
    double loss_sum = 0;
    int64_t correct = 0;
    for (size_t b = 0; b < seqs.size(); b += request.batch_size) {
      data::Batch batch = data::make_batch(ds.rows, seqs, b, request.batch_size, pad);
      auto t = train::to_tensors(batch, model->device(), false);
      at::Tensor hidden = model->hidden_states(t.input, false);
      auto parts = model::next_token_loss(*model, hidden, t.labels);
      loss_sum += parts.loss_sum.item<double>();
      correct += parts.correct.item<int64_t>();
      result.tokens += parts.tokens;
    }
    result.rows = static_cast<int64_t>(ds.rows.size());
    if (result.tokens > 0) {
      result.mean_loss = loss_sum / static_cast<double>(result.tokens);
      result.token_accuracy = static_cast<double>(correct) / static_cast<double>(result.tokens);
    }
  }, "");
  if (!st.is_ok()) return st;
  return result;
}

}  // namespace trainer::engine

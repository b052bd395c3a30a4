// measure_dataset and TextCodec (declared in engine.h): the engine's tokenizer and dataset
// reading as trainer-job's analyze and tokenize use them. Torch-free.
#include "engine/data/dataset.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"

namespace trainer::engine {

Result<DatasetMeasure> measure_dataset(const DatasetMeasureRequest& request) {
  TRAINER_ASSIGN_OR_RETURN(text::Tokenizer tok, text::Tokenizer::load(request.model_dir));
  data::LoadOptions options;
  options.max_seq_length = request.max_seq_length;
  options.progress = request.progress;
  TRAINER_ASSIGN_OR_RETURN(data::Dataset ds, data::load_dataset(request.data_path, tok, options));
  const data::LengthStats stats = data::length_stats(ds.lengths);
  DatasetMeasure m;
  m.rows = stats.rows;
  m.min_tokens = stats.min_tokens;
  m.max_tokens = stats.max_tokens;
  m.mean_tokens = stats.mean_tokens;
  m.p50 = stats.p50;
  m.p90 = stats.p90;
  m.p99 = stats.p99;
  m.truncated = ds.fit.truncated;
  m.exact = ds.fit.exact;
  m.dropped = ds.fit.dropped;
  for (int64_t l : ds.lengths) m.tokens += l;
  for (const auto& row : ds.rows) m.trained_tokens += row.trained_count();
  return m;
}

Result<TextCodec> TextCodec::load(const std::string& model_dir) {
  TRAINER_ASSIGN_OR_RETURN(text::Tokenizer tok, text::Tokenizer::load(model_dir));
  return TextCodec(std::make_shared<const text::Tokenizer>(std::move(tok)));
}

Result<std::vector<int32_t>> TextCodec::encode(const std::string& text, bool add_special_tokens) const {
  return tokenizer_->encode(text, add_special_tokens);
}

Result<std::string> TextCodec::decode(const std::vector<int32_t>& ids) const { return tokenizer_->decode(ids, false); }

Result<TextCodec::RenderedRow> TextCodec::render_row(const std::string& row_json, const std::string& source) const {
  TRAINER_ASSIGN_OR_RETURN(std::vector<data::Example> examples, data::parse_jsonl(row_json, source));
  if (examples.empty()) return invalid_argument(source + ": no row");
  TRAINER_ASSIGN_OR_RETURN(data::TokenizedRow tokenized, data::tokenize_example(examples.front(), *tokenizer_, source));
  TRAINER_ASSIGN_OR_RETURN(std::string text, tokenizer_->decode(tokenized.input_ids, false));
  return RenderedRow{.text = std::move(text), .input_ids = std::move(tokenized.input_ids), .trained = std::move(tokenized.trained)};
}

}  // namespace trainer::engine

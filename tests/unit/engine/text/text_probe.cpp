// text_probe: one JSON request per stdin line, one JSON answer per stdout line. Used by the
// parity tests in tests/python/text. Requests (every one names the tokenizer folder "dir"):
//   {"op":"info"}                                      vocab size, special tokens and ids
//   {"op":"encode","text":S,"add_special_tokens":B}    {"ids":[...],"offsets":[[b,e],...]}
//   {"op":"decode","ids":[...],"skip_special_tokens":B}  {"text":S}
//   {"op":"render","messages":[...],"tools":[...]|null,"add_generation_prompt":B,"extra":{}}
//                                                      {"text":S,"spans":[[b,e],...]}
//   {"op":"row","row":{...}}                           {"input_ids":[...],"trained":[...]}
//   {"op":"dataset","path":P,"max_seq_length":N,"packing":B,"batch_size":N,"seed":N,
//    "validation_split":F,"no_batches":B}              fit counts, lengths, load time, batches
// Failures answer {"error": message}.
#include <chrono>
#include <iostream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/data/dataset.h"
#include "engine/text/tokenizer.h"

using trainer::engine::text::Tokenizer;
namespace data = trainer::engine::data;
using json = nlohmann::ordered_json;

namespace {

json batch_json(const data::Batch& b) {
  return {{"rows", b.rows},
          {"seq_len", b.seq_len},
          {"input_ids", b.input_ids},
          {"labels", b.labels},
          {"attention_mask", b.attention_mask},
          {"position_ids", b.position_ids},
          {"sequence_ids", b.sequence_ids},
          {"real_tokens", b.real_tokens},
          {"trained_tokens", b.trained_tokens},
          {"padding_tokens", b.padding_tokens},
          {"examples", b.examples}};
}

json answer(const json& req, std::map<std::string, Tokenizer>& cache) {
  const std::string dir = req.value("dir", "");
  auto it = cache.find(dir);
  if (it == cache.end()) {
    auto tok = Tokenizer::load(dir);
    if (!tok.is_ok()) return {{"error", tok.status().message()}};
    it = cache.emplace(dir, std::move(*tok)).first;
  }
  const Tokenizer& tok = it->second;
  const std::string op = req.value("op", "");
  if (op == "info") {
    auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
    return {{"vocab_size", tok.vocab_size()}, {"bos_id", opt(tok.bos_id())},        {"eos_id", opt(tok.eos_id())},
            {"pad_id", opt(tok.pad_id())},    {"eos", opt(tok.special_tokens().eos)}, {"bos", opt(tok.special_tokens().bos)},
            {"has_chat_template", tok.has_chat_template()},
            {"has_generation_markers", tok.has_chat_template() && tok.chat_template().has_generation_markers()}};
  }
  if (op == "encode") {
    auto enc = tok.encode_with_offsets(req.at("text").get<std::string>(), req.value("add_special_tokens", true));
    if (!enc.is_ok()) return {{"error", enc.status().message()}};
    return {{"ids", enc->ids}, {"offsets", enc->offsets}};
  }
  if (op == "decode") {
    auto text = tok.decode(req.at("ids").get<std::vector<int32_t>>(), req.value("skip_special_tokens", false));
    if (!text.is_ok()) return {{"error", text.status().message()}};
    return {{"text", *text}};
  }
  if (op == "render") {
    if (!tok.has_chat_template()) return {{"error", "no chat template"}};
    trainer::engine::text::RenderOptions options;
    options.add_generation_prompt = req.value("add_generation_prompt", false);
    options.extra = req.value("extra", json(nullptr));
    auto r = tok.chat_template().render_with_spans(req.at("messages"), req.value("tools", json(nullptr)), options);
    if (!r.is_ok()) return {{"error", r.status().message()}};
    return {{"text", r->text}, {"spans", r->generation_spans}};
  }
  if (op == "row") {
    auto examples = data::parse_jsonl(req.at("row").dump(), "row.jsonl");
    if (!examples.is_ok()) return {{"error", examples.status().message()}};
    auto row = data::tokenize_example(examples->front(), tok, "row.jsonl");
    if (!row.is_ok()) return {{"error", row.status().message()}};
    return {{"input_ids", row->input_ids}, {"trained", row->trained}};
  }
  if (op == "dataset") {
    data::LoadOptions options;
    options.max_seq_length = req.value("max_seq_length", 2048);
    const auto started = std::chrono::steady_clock::now();
    auto ds = data::load_dataset(req.at("path").get<std::string>(), tok, options);
    if (!ds.is_ok()) return {{"error", ds.status().message()}};
    const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const uint64_t seed = req.value("seed", 0);
    auto split = data::split_validation(std::move(ds->rows), req.value("validation_split", 0.0), seed);
    json out = {{"fit", {{"rows", ds->fit.rows}, {"truncated", ds->fit.truncated}, {"exact", ds->fit.exact},
                         {"dropped", ds->fit.dropped}}},
                {"lengths", ds->lengths},
                {"load_seconds", load_seconds},
                {"train_lines", json::array()},
                {"validation_lines", json::array()}};
    for (const auto& r : split.train) out["train_lines"].push_back(r.line);
    for (const auto& r : split.validation) out["validation_lines"].push_back(r.line);
    const auto order = req.value("shuffle", false) ? data::shuffled_order(split.train.size(), seed, req.value("epoch", 0))
                                                   : data::shuffled_order(split.train.size(), seed, 0);
    std::vector<size_t> identity(split.train.size());
    for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
    const auto& use = req.value("shuffle", false) ? order : identity;
    out["order"] = use;
    const auto seqs = data::plan_sequences(split.train, use, {.packing = req.value("packing", false),
                                                              .max_seq_length = options.max_seq_length});
    const size_t bs = req.value("batch_size", 2);
    if (req.value("no_batches", false)) return out;
    out["batches"] = json::array();
    for (size_t b = 0; b < seqs.size(); b += bs)
      out["batches"].push_back(batch_json(data::make_batch(split.train, seqs, b, bs, tok.pad_id().value_or(0))));
    return out;
  }
  return {{"error", "unknown op \"" + op + "\""}};
}

}  // namespace

int main() {
  std::map<std::string, Tokenizer> cache;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json out;
    try {
      out = answer(json::parse(line), cache);
    } catch (const std::exception& e) {
      out = {{"error", std::string("bad request: ") + e.what()}};
    }
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
  }
  return 0;
}

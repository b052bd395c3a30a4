#include "engine/data/dataset.h"

#include "dataset/validator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

namespace trainer::engine::data {

using text::Json;

namespace {

// "file:line: " prefix of every row error.
std::string where(const std::string& source, int64_t line) { return source + ":" + std::to_string(line) + ": "; }

// Builds the example of a row; the rules of which rows are valid live in dataset/validator.h,
// shared with trainerd, so the engine trains exactly the rows the service accepted.
Result<Example> parse_row(const Json& row) {
  auto kind = dataset::check_row(row);
  if (!kind.is_ok()) return invalid_argument(kind.status().describe());
  Example ex;
  switch (*kind) {
    case dataset::RowKind::kChat:
      ex.kind = Example::Kind::kChat;
      ex.messages = row["messages"];
      break;
    case dataset::RowKind::kPromptCompletionText:
      ex.kind = Example::Kind::kPromptCompletion;
      ex.prompt = row["prompt"].get<std::string>();
      ex.completion = row["completion"].get<std::string>();
      break;
    case dataset::RowKind::kPromptCompletionMessages:
      ex.kind = Example::Kind::kChat;
      ex.messages = row["prompt"];
      for (const auto& m : row["completion"]) ex.messages.push_back(m);
      ex.prompt_messages = row["prompt"].size();
      break;
  }
  if (row.contains("tools") && !row["tools"].is_null()) ex.tools = row["tools"];
  return ex;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Marks the tokens overlapping the byte range [begin, end).
void mark_range(const text::Encoding& enc, int64_t begin, int64_t end, std::vector<uint8_t>& trained) {
  for (size_t t = 0; t < enc.ids.size(); ++t) {
    const auto [b, e] = enc.offsets[t];
    if (b < end && e > begin) trained[t] = 1;
  }
}

Result<TokenizedRow> tokenize_chat(const Example& ex, const text::Tokenizer& tok) {
  if (!tok.has_chat_template())
    return invalid_argument(tok.dir() +
                            "/tokenizer_config.json: chat_template: missing; chat rows need the model's chat template");
  const auto& tmpl = tok.chat_template();
  auto full = tmpl.render_with_spans(ex.messages, ex.tools, {});
  if (!full.is_ok()) return full.status();
  auto enc = tok.encode_with_offsets(full->text, /*add_special_tokens=*/false);
  if (!enc.is_ok()) return enc.status();

  TokenizedRow row;
  row.input_ids = enc->ids;
  row.trained.assign(enc->ids.size(), 0);

  // Where the prompt of a prompt/completion conversation ends: only later text is trained.
  int64_t trainable_from = 0;
  if (ex.prompt_messages > 0) {
    Json prompt(ex.messages.begin(), ex.messages.begin() + static_cast<std::ptrdiff_t>(ex.prompt_messages));
    auto rendered = tmpl.render(prompt, ex.tools, {.add_generation_prompt = true});
    if (!rendered.is_ok()) return rendered.status().with_context("prompt");
    if (!starts_with(full->text, *rendered))
      return invalid_argument("prompt: the chat template renders the prompt differently inside the whole conversation");
    trainable_from = static_cast<int64_t>(rendered->size());
  }

  if (tmpl.has_generation_markers()) {
    for (const auto& [b, e] : full->generation_spans) {
      if (e <= trainable_from) continue;
      mark_range(*enc, std::max(b, trainable_from), e, row.trained);
    }
    return row;
  }

  for (size_t i = ex.prompt_messages; i < ex.messages.size(); ++i) {
    if (ex.messages[i]["role"] != "assistant") continue;
    const std::string field = "messages[" + std::to_string(i) + "]";
    Json before(ex.messages.begin(), ex.messages.begin() + static_cast<std::ptrdiff_t>(i));
    int64_t start = 0;
    if (i > 0) {
      auto prefix = tmpl.render(before, ex.tools, {.add_generation_prompt = true});
      if (!prefix.is_ok()) return prefix.status().with_context(field);
      if (starts_with(full->text, *prefix)) {
        start = static_cast<int64_t>(prefix->size());
      } else {
        // Some templates prefill the generation prompt with text a finished turn does not
        // have (DeepSeek-R1's "<think>\n"): the turn starts where the two renders part, as
        // long as that is past the messages before it.
        auto plain = tmpl.render(before, ex.tools, {});
        if (!plain.is_ok()) return plain.status().with_context(field);
        if (!starts_with(full->text, *plain))
          return invalid_argument(field +
                                  ": the chat template renders the conversation before this assistant message "
                                  "differently from the whole conversation, so its tokens cannot be located; give the "
                                  "template {% generation %} markers");
        const auto parted = std::mismatch(prefix->begin(), prefix->end(), full->text.begin(), full->text.end());
        start = std::max<int64_t>(static_cast<int64_t>(plain->size()), parted.first - prefix->begin());
      }
    }
    // The bound of this message: where the conversation rendered up to and including it parts
    // from the whole conversation (its end, or the text a template writes after the last
    // message, like Phi-3's eos_token) when that is past `start`; else the end of the text
    // (Qwen3 renders a last assistant turn with a thinking block, so the renders part at once).
    int64_t limit = static_cast<int64_t>(full->text.size());
    Json upto(ex.messages.begin(), ex.messages.begin() + static_cast<std::ptrdiff_t>(i + 1));
    auto through = tmpl.render(upto, ex.tools, {});
    if (!through.is_ok()) return through.status().with_context(field);
    int64_t parted =
        std::mismatch(through->begin(), through->end(), full->text.begin(), full->text.end()).first - through->begin();
    // A part inside one of the conversation's tokens ("<t" shared by "<think>" and "<tool_call>")
    // is a re-rendered turn, not its end: count from that token's start.
    for (const auto& [b, e] : enc->offsets) {
      if (b <= parted && parted < e) {
        parted = b;
        break;
      }
    }
    const bool bounded = parted > start;
    if (bounded) limit = parted;
    // Train from the token covering `start` through the first special token (the end of turn)
    // and the whitespace the template writes right after it, as TRL's training templates do.
    size_t t = 0;
    bool ended = false;
    for (; t < enc->ids.size(); ++t) {
      const auto [b, e] = enc->offsets[t];
      if (e <= start) continue;
      if (b >= limit) break;
      row.trained[t] = 1;
      if (b >= start && tok.is_special(enc->ids[t])) {
        ended = true;
        break;
      }
    }
    if (!ended && !bounded && i + 1 < ex.messages.size())
      return invalid_argument(field +
                              ": cannot find where this assistant turn ends: the chat template ends it with no special "
                              "token of the tokenizer; give the template {% generation %} markers");
    for (++t; t < enc->ids.size(); ++t) {
      const auto [b, e] = enc->offsets[t];
      if (b >= limit || e <= b || tok.is_special(enc->ids[t])) break;
      const std::string_view piece = std::string_view(full->text).substr(static_cast<size_t>(b), static_cast<size_t>(e - b));
      if (piece.find_first_not_of(" \t\r\n") != std::string_view::npos) break;
      row.trained[t] = 1;
    }
  }
  return row;
}

Result<TokenizedRow> tokenize_prompt_completion(const Example& ex, const text::Tokenizer& tok) {
  std::string text = ex.prompt + ex.completion;
  const auto& eos = tok.special_tokens().eos;
  if (eos && !(ex.completion.size() >= eos->size() &&
               ex.completion.compare(ex.completion.size() - eos->size(), eos->size(), *eos) == 0))
    text += *eos;
  auto prompt_ids = tok.encode(ex.prompt, /*add_special_tokens=*/true);
  if (!prompt_ids.is_ok()) return prompt_ids.status().with_context("prompt");
  auto ids = tok.encode(text, /*add_special_tokens=*/true);
  if (!ids.is_ok()) return ids.status().with_context("completion");
  TokenizedRow row;
  row.input_ids = std::move(*ids);
  row.trained.assign(row.input_ids.size(), 0);
  for (size_t t = prompt_ids->size(); t < row.input_ids.size(); ++t) row.trained[t] = 1;
  return row;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

int64_t TokenizedRow::trained_count() const {
  int64_t n = 0;
  for (uint8_t t : trained) n += t ? 1 : 0;
  return n;
}

Result<std::vector<Example>> parse_jsonl(std::string_view text, const std::string& source) {
  std::vector<Example> out;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    ++line_no;
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
      if (end == text.size()) break;
      continue;
    }
    Json row;
    try {
      row = Json::parse(line);
    } catch (const Json::parse_error& e) {
      std::string what = e.what();
      if (auto p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
      return invalid_argument(where(source, line_no) + "not valid JSON: " + what);
    }
    auto ex = parse_row(row);
    if (!ex.is_ok()) return ex.status().with_context(source + ":" + std::to_string(line_no));
    ex->line = line_no;
    out.push_back(std::move(*ex));
    if (end == text.size()) break;
  }
  if (out.empty()) return invalid_argument(source + ": no rows; a dataset is JSONL with one row per line");
  return out;
}

Result<std::vector<Example>> read_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument(path + ": cannot read the dataset file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_jsonl(ss.str(), path);
}

Result<TokenizedRow> tokenize_example(const Example& example, const text::Tokenizer& tokenizer,
                                      const std::string& source) {
  auto row = example.kind == Example::Kind::kChat ? tokenize_chat(example, tokenizer)
                                                  : tokenize_prompt_completion(example, tokenizer);
  if (!row.is_ok()) return row.status().with_context(source + ":" + std::to_string(example.line));
  row->line = example.line;
  return row;
}

FitCounts fit_rows(std::vector<TokenizedRow>& rows, int max_seq_length) {
  FitCounts fit;
  const size_t limit = static_cast<size_t>(std::max(max_seq_length, 1));
  std::vector<TokenizedRow> kept;
  kept.reserve(rows.size());
  for (auto& row : rows) {
    ++fit.rows;
    if (row.input_ids.size() > limit) {
      row.input_ids.resize(limit);
      row.trained.resize(limit);
      ++fit.truncated;
    } else if (row.input_ids.size() == limit) {
      ++fit.exact;
    }
    if (row.trained_count() == 0) {
      ++fit.dropped;
      continue;
    }
    kept.push_back(std::move(row));
  }
  rows = std::move(kept);
  return fit;
}

Result<Dataset> load_dataset(const std::string& path, const text::Tokenizer& tokenizer, const LoadOptions& options) {
  if (options.max_seq_length <= 0)
    return invalid_argument("maxSeqLength: must be a positive integer, got " + std::to_string(options.max_seq_length));
  auto examples = read_jsonl(path);
  if (!examples.is_ok()) return examples.status();
  const size_t n = examples->size();
  std::vector<std::optional<Result<TokenizedRow>>> results(n);
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex progress_mu;  // serializes calls of options.progress
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      results[i].emplace(tokenize_example((*examples)[i], tokenizer, path));
      const int64_t d = ++done;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        options.progress(d, static_cast<int64_t>(n));
      }
    }
  };
  const size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), std::max<size_t>(1, n / 64));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();

  Dataset ds;
  ds.rows.reserve(n);
  ds.lengths.reserve(n);
  for (auto& r : results) {
    if (!r->is_ok()) return r->status();
    ds.lengths.push_back(static_cast<int64_t>((*r)->input_ids.size()));
    ds.rows.push_back(std::move(r->value()));
  }
  ds.fit = fit_rows(ds.rows, options.max_seq_length);
  return ds;
}

std::vector<size_t> shuffled_order(size_t n, uint64_t seed, int64_t epoch) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ULL);
  for (size_t i = n; i > 1; --i) {
    const size_t j = static_cast<size_t>(splitmix64(state) % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

Split split_validation(std::vector<TokenizedRow> rows, double share, uint64_t seed) {
  Split split;
  const size_t n = rows.size();
  size_t held = 0;
  if (share > 0 && n >= 2) {
    held = static_cast<size_t>(std::llround(share * static_cast<double>(n)));
    held = std::clamp<size_t>(held, 1, n - 1);
  }
  std::vector<uint8_t> is_validation(n, 0);
  // A stream of its own (epoch -1), so the split does not repeat epoch 0's order.
  const auto order = shuffled_order(n, seed, -1);
  for (size_t k = 0; k < held; ++k) is_validation[order[k]] = 1;
  for (size_t i = 0; i < n; ++i) (is_validation[i] ? split.validation : split.train).push_back(std::move(rows[i]));
  return split;
}

std::vector<Sequence> plan_sequences(const std::vector<TokenizedRow>& rows, const std::vector<size_t>& order,
                                     const SequenceOptions& options) {
  std::vector<Sequence> out;
  if (!options.packing) {
    out.reserve(order.size());
    for (size_t i : order) out.push_back({i});
    return out;
  }
  const size_t capacity = static_cast<size_t>(std::max(options.max_seq_length, 1));
  Sequence current;
  size_t used = 0;
  for (size_t i : order) {
    const size_t len = rows[i].input_ids.size();
    if (!current.empty() && used + len > capacity) {
      out.push_back(std::move(current));
      current.clear();
      used = 0;
    }
    current.push_back(i);
    used += len;
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

Batch make_batch(const std::vector<TokenizedRow>& rows, const std::vector<Sequence>& sequences, size_t first,
                 size_t count, int32_t pad_id) {
  Batch batch;
  const size_t end = std::min(sequences.size(), first + count);
  if (first >= end) return batch;
  batch.rows = static_cast<int64_t>(end - first);
  for (size_t s = first; s < end; ++s) {
    int64_t len = 0;
    for (size_t r : sequences[s]) len += static_cast<int64_t>(rows[r].input_ids.size());
    batch.seq_len = std::max(batch.seq_len, len);
  }
  const size_t total = static_cast<size_t>(batch.rows * batch.seq_len);
  batch.input_ids.assign(total, pad_id);
  batch.labels.assign(total, kIgnoreIndex);
  batch.attention_mask.assign(total, 0);
  batch.position_ids.assign(total, 0);
  batch.sequence_ids.assign(total, -1);
  for (size_t s = first; s < end; ++s) {
    size_t at = (s - first) * static_cast<size_t>(batch.seq_len);
    int64_t k = 0;
    for (size_t r : sequences[s]) {
      const auto& row = rows[r];
      for (size_t t = 0; t < row.input_ids.size(); ++t, ++at) {
        batch.input_ids[at] = row.input_ids[t];
        // The first token of a row is never a target: no loss crosses a packed-row boundary.
        if (t > 0 && row.trained[t]) {
          batch.labels[at] = row.input_ids[t];
          ++batch.trained_tokens;
        }
        batch.attention_mask[at] = 1;
        batch.position_ids[at] = static_cast<int64_t>(t);
        batch.sequence_ids[at] = k;
        ++batch.real_tokens;
      }
      ++k;
      ++batch.examples;
      batch.row_lengths.push_back(static_cast<int64_t>(row.input_ids.size()));
    }
  }
  batch.padding_tokens = batch.rows * batch.seq_len - batch.real_tokens;
  return batch;
}

LengthStats length_stats(std::vector<int64_t> lengths) {
  LengthStats s;
  if (lengths.empty()) return s;
  std::sort(lengths.begin(), lengths.end());
  const size_t n = lengths.size();
  s.rows = static_cast<int64_t>(n);
  s.min_tokens = lengths.front();
  s.max_tokens = lengths.back();
  double sum = 0;
  for (int64_t l : lengths) sum += static_cast<double>(l);
  s.mean_tokens = sum / static_cast<double>(n);
  auto rank = [&](double q) {
    size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
    k = std::clamp<size_t>(k, 1, n);
    return lengths[k - 1];
  };
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  return s;
}

}  // namespace trainer::engine::data

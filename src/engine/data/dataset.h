// Training rows: a JSONL dataset rendered with the model's chat template into token ids and
// the mask of tokens the loss is taken on; fitting to maxSeqLength; shuffling; batching with
// padding or packing. No torch here: the engine turns Batch into tensors.
//
// Typical use (the SFT loop):
//
//   auto tok = text::Tokenizer::load(model_dir);
//   auto ds = data::load_dataset(jsonl_path, *tok, {.max_seq_length = 2048});  // Result<Dataset>
//   //   ds->fit  : {rows, truncated, exact, dropped} for the data_fit event
//   //   ds->rows : TokenizedRow, already cut to max_seq_length, rows with nothing to train dropped
//   auto split = data::split_validation(std::move(ds->rows), 0.1, seed);   // when no eval file
//   auto order = data::shuffled_order(split.train.size(), seed, epoch);     // same seed -> same order
//   auto seqs  = data::plan_sequences(split.train, order, {.packing = true, .max_seq_length = 2048});
//   for (size_t b = 0; b < seqs.size(); b += batch_size) {
//     data::Batch batch = data::make_batch(split.train, seqs, b, batch_size, *tok->pad_id());
//     // batch.input_ids, labels, attention_mask, position_ids, sequence_ids: [rows x seq_len]
//   }
//
// Rows:
//   chat:              {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": ...,
//                       "tool_calls"?: [...]}, ...], "tools"?: [...]}  last message: assistant
//   prompt/completion: {"prompt": "text", "completion": "text"}  (strings), or both message lists
//                       ({"prompt": [...user...], "completion": [...assistant...]}).
//
// Loss mask (which tokens are trained), following TRL's assistant_only_loss/completion_only_loss:
//   - template with {% generation %} markers: the tokens inside them, exactly as transformers'
//     apply_chat_template(return_assistant_tokens_mask=True) marks them;
//   - otherwise, for each assistant message i: its tokens start where
//     render(messages[:i], add_generation_prompt=True) ends (that render must be a prefix of the
//     whole conversation's render; when the generation prompt prefills text a finished turn
//     lacks, as DeepSeek-R1's "<think>\n", where the two renders part, but never before the end
//     of render(messages[:i])), and end with the first special token after that point (the
//     end-of-turn token: <|im_end|> for Qwen, <|eot_id|> for Llama 3), which is trained, plus
//     the whitespace the template writes right after it within the turn (Qwen's "\n"): the
//     tokens TRL's training templates put inside {% generation %}. A turn never runs past the
//     point, at a token boundary, where render(messages[:i+1]) parts from the whole render (its
//     end, or Phi-3's eos written after a last message); a turn that neither locates is an error
//     asking for {% generation %} markers. The text is always the whole conversation rendered
//     once, exactly as apply_chat_template renders it.
//   - prompt/completion strings: text = prompt + completion (+ eos_token unless the completion
//     already ends with it), encoded with special tokens; trained = tokens after the prompt's.
//
// Labels follow Hugging Face: labels[t] = input_ids[t] where trained, else -100, NOT shifted
// (the loss compares logits[t] with labels[t + 1]). Every packed row's first token is untrained,
// so no loss crosses a row boundary.
//
// Errors name the file, the 1-based line and the field: "train.jsonl:3: messages[2].role:
// unknown role \"bot\" (expected system, user, assistant or tool)".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/text/tokenizer.h"

namespace trainer::engine::data {

inline constexpr int64_t kIgnoreIndex = -100;  // label of a token the loss skips

// One dataset row as read from JSONL, before tokenization.
struct Example {
  enum class Kind { kChat, kPromptCompletion };
  Kind kind = Kind::kChat;
  text::Json messages;         // kChat (and message-list prompt/completion: prompt + completion)
  text::Json tools;            // declared tools, or null
  std::string prompt;          // kPromptCompletion with string fields
  std::string completion;
  size_t prompt_messages = 0;  // message-list prompt/completion: messages that are prompt only
  int64_t line = 0;            // 1-based line in the source file
};

// A tokenized row: the ids of the rendered conversation and which of them are trained.
struct TokenizedRow {
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> trained;  // 1 = the loss is taken on this token; same size as input_ids
  int64_t line = 0;              // source line (1-based), for messages and debugging
  int64_t trained_count() const;
};

// How the rows fit max_seq_length (the spec's sft.data.fit values; job event "data_fit").
struct FitCounts {
  int64_t rows = 0;       // every row read
  int64_t truncated = 0;  // rows longer than max_seq_length, cut to it
  int64_t exact = 0;      // rows exactly max_seq_length tokens long (not cut)
  int64_t dropped = 0;    // rows left with no token to train on once cut (removed, as TRL does)
};

struct LoadOptions {
  int max_seq_length = 2048;  // tokens per row after the chat template (> 0)
  // Called after every row with (rows done, rows total); may be empty.
  std::function<void(int64_t, int64_t)> progress;
};

struct Dataset {
  std::vector<TokenizedRow> rows;  // fitted: cut to max_seq_length, dropped rows removed
  FitCounts fit;
  std::vector<int64_t> lengths;    // token length of every row before cutting (analyze uses it)
};

// Parses JSONL text: one Example per non-blank line. `source` names the file in messages.
Result<std::vector<Example>> parse_jsonl(std::string_view text, const std::string& source);
Result<std::vector<Example>> read_jsonl(const std::string& path);

// Renders and tokenizes one example (untruncated). Errors are prefixed with "source:line: ".
Result<TokenizedRow> tokenize_example(const Example& example, const text::Tokenizer& tokenizer,
                                      const std::string& source);

// Cuts rows longer than max_seq_length, counts them, removes rows with nothing to train.
FitCounts fit_rows(std::vector<TokenizedRow>& rows, int max_seq_length);

// read_jsonl + tokenize_example for every row + fit_rows.
Result<Dataset> load_dataset(const std::string& path, const text::Tokenizer& tokenizer,
                             const LoadOptions& options);

// A deterministic permutation of [0, n): the same (n, seed, epoch) always gives the same order,
// on every platform (own Fisher-Yates over splitmix64, no std distributions).
std::vector<size_t> shuffled_order(size_t n, uint64_t seed, int64_t epoch);

struct Split {
  std::vector<TokenizedRow> train;
  std::vector<TokenizedRow> validation;
};
// Holds out round(share * rows) rows (at least 1 when share > 0 and there are 2+ rows), chosen
// by a seeded shuffle; both parts keep the input order. share = 0 keeps every row for training.
Split split_validation(std::vector<TokenizedRow> rows, double share, uint64_t seed);

struct SequenceOptions {
  bool packing = false;       // pack several rows into one sequence of up to max_seq_length
  int max_seq_length = 2048;  // packing capacity in tokens
};
// A sequence is the rows (indexes into `rows`) that share one batch row: one row without
// packing; with packing, consecutive rows of `order` while they fit (greedy, order kept).
using Sequence = std::vector<size_t>;
std::vector<Sequence> plan_sequences(const std::vector<TokenizedRow>& rows,
                                     const std::vector<size_t>& order, const SequenceOptions& options);

// A micro-batch, row-major [rows x seq_len], right-padded.
struct Batch {
  int64_t rows = 0;                     // batch rows (sequences)
  int64_t seq_len = 0;                  // longest sequence in the batch
  std::vector<int64_t> input_ids;       // pad_id where padded
  std::vector<int64_t> labels;          // input id where trained, else kIgnoreIndex
  std::vector<int64_t> attention_mask;  // 1 real token, 0 padding
  std::vector<int64_t> position_ids;    // restart at 0 for every packed row; 0 on padding
  std::vector<int64_t> sequence_ids;    // index of the packed row within its batch row; -1 padding
  std::vector<int64_t> row_lengths;     // tokens of each dataset row in the batch, in order (packed rows one by one)
  int64_t real_tokens = 0;              // tokens that are not padding
  int64_t trained_tokens = 0;           // labels != kIgnoreIndex
  int64_t padding_tokens = 0;           // rows * seq_len - real_tokens
  int64_t examples = 0;                 // dataset rows in the batch (> rows when packed)
};

// Builds the batch of sequences [first, first + count) (clamped to the end).
Batch make_batch(const std::vector<TokenizedRow>& rows, const std::vector<Sequence>& sequences,
                 size_t first, size_t count, int32_t pad_id);

// Token length distribution for `trainer-job analyze` and the measure route.
struct LengthStats {
  int64_t rows = 0;
  int64_t min_tokens = 0, max_tokens = 0;
  double mean_tokens = 0;
  int64_t p50 = 0, p90 = 0, p99 = 0;  // nearest-rank percentiles
};
LengthStats length_stats(std::vector<int64_t> lengths);

}  // namespace trainer::engine::data

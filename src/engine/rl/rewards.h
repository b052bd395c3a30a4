// Reward terms of reinforcement runs (config.reward.terms[]) and the RL rows they score.
// Torch-free.
//
// json-label-match: the JSON object in the completion against the gold answer's JSON (the RL
// row's final assistant message), field by field, exact match. JSON is found inside ```json
// fences or surrounding prose. The score is the share of the gold object's fields the
// completion reproduces exactly; a gold answer that is not an object scores 1 when equal; a
// completion with no JSON scores 0. A gold answer with no JSON scores exact text equality
// (trimmed); as a reward term, such a row is an unscored call instead (gold_not_label,
// graders/grader.h). The other term kinds are in graders/.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::engine::rl {

// The first JSON object or array in `text`: a fenced ```json block first, else the first
// balanced {...} or [...] that parses. nullopt when there is none.
std::optional<nlohmann::json> extract_json(std::string_view text);

// json-label-match score of `completion` against `gold` in [0, 1].
double json_label_match(std::string_view completion, std::string_view gold);

// An RL row: the prompt messages (everything before the final assistant message) and the gold
// answer (that message's content).
struct RlRow {
  nlohmann::json messages;  // prompt conversation (system/user/... before the gold answer)
  nlohmann::json tools;     // declared tools, or null
  // The same two with the row's own key order, for the chat template: its `tojson` writes keys
  // in that order, as transformers' does (a sorted copy rendered a tool schema differently).
  nlohmann::ordered_json chat_messages;
  nlohmann::ordered_json chat_tools;
  std::string gold;         // the final assistant message's content
  int64_t line = 0;         // 1-based line in the source file
};

// The text of the last user message of a prompt conversation ("" when there is none): what a
// grader sees as the completion's input.
std::string last_user_text(const nlohmann::json& messages);

// Reads chat rows from a JSONL file; each must end with an assistant message (the gold answer)
// after at least one other message. Errors name `field` (the setting that named the file), the
// file, line and row field.
Result<std::vector<RlRow>> read_rl_rows(const std::string& path, const std::string& field = "config.dataset");

}  // namespace trainer::engine::rl

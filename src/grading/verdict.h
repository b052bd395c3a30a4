// Reading the replies of external graders (docs/graders.md): an http: evaluator's JSON, an
// OpenAI-compatible chat completion, and the 0-1 verdict in a judge's text. Pure functions of
// their input; torch-free. The job's reward terms (engine/rl/graders/) and trainerd's curations
// (service/curation_judge.h) read judges with them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace trainer::grading {

// The first JSON object or array in `text`: a fenced ```json block first, else the first
// balanced {...} or [...] that parses. nullopt when there is none.
std::optional<nlohmann::json> extract_json(std::string_view text);

// An http: evaluator's reply: `score` (a number in [0, 1]), else `ok` or `passed` (a boolean:
// 1 or 0). nullopt when it carries none of them, or a score outside [0, 1].
std::optional<double> evaluator_score(const nlohmann::json& reply);

// The parts of a chat completion a judge term reads.
struct ChatReply {
  std::string content;        // choices[0].message.content
  int64_t input_tokens = 0;   // usage.prompt_tokens; 0 when the reply has no usage block
  int64_t output_tokens = 0;  // usage.completion_tokens
};

// `reply` read as an OpenAI chat completion; nullopt when it is not one (no choices[0].message
// with string content).
std::optional<ChatReply> read_chat_completion(const nlohmann::json& reply);

// The 0-1 score in a judge's reply text, looked for in this order:
//  1. a JSON object (fenced or in prose) with "score" (a number, or a numeric string), else a
//     boolean "passed", "pass" or "ok";
//  2. "score" followed by ':', '=' or "is" and a number, optionally "/ N" or "out of N";
//  3. the whole text being a number, optionally "/ N".
// A fraction "a / N" reads as a / N. nullopt when none is found or the value is outside [0, 1].
std::optional<double> judge_verdict(std::string_view text);

}  // namespace trainer::grading

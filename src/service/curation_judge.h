// How a curation asks its judge about one candidate (docs/curations.md): the same call a run's
// model: term makes (docs/graders.md), from trainerd: POST URL/v1/chat/completions {model,
// temperature 0, max_tokens, messages: [system: INSTRUCTIONS, user: "The user's request:\n...
// \n\nThe assistant's answer:\n..."]}, the reply's text read for a 0-1 verdict (grading/verdict.h).
// A call without a verdict (no answer in time, unreachable, 5xx, 408, 429, no verdict in the text)
// is tried again up to `retries` times; any other 4xx is a refusal, which is not.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::service {

struct CurationJudge {
  std::string label;          // how messages name it: "judge 'NAME'"
  std::string url;            // the chat completions URL
  std::string model;          // the request's `model`
  std::string ca_file;        // PEM CAs for https; "" = the system's store
  std::string proxy;          // outbound.proxy for a declared judge; "" = directly
  std::vector<std::pair<std::string, std::string>> headers;  // Authorization, when it has a key
  std::string instructions;   // the system message
  double timeout_seconds = 60;  // one call
  int retries = 2;              // further tries of a call without a verdict
  int max_tokens = 512;         // the judge's answer at most
};

// The built-in instructions (those of a run's model: term without graderInstructions).
extern const char* const kDefaultJudgeInstructions;

struct JudgeAnswer {
  std::optional<double> score;           // the verdict, in [0, 1]
  std::string failure;                   // why there is none ("" when scored)
  bool refused = false;                  // the judge refused the call (a 4xx): asking again will not help
};

// Asks `judge` about the conversation `messages` (a chat row's, its last message the answer).
// `keep_going` is asked about once a second while a call runs: false stops the call (and its
// retries), answering no verdict. Thread-safe.
JudgeAnswer ask_judge(const CurationJudge& judge, const nlohmann::json& messages,
                      const std::function<bool()>& keep_going);

}  // namespace trainer::service

// How a distillation asks its teacher about one decision (docs/distillations.md): POST
// URL/v1/chat/completions {model, messages: [system: INSTRUCTIONS?] + the history before the
// decision, tools: the row's tools (when it has any), max_tokens, temperature, top_p, seed}, and
// whether the answer is accepted. A call without a chat completion (no answer in time,
// unreachable, 5xx, 408, 429, a reply that is not one) is tried again up to `retries` times; any
// other 4xx is a refusal, which is not.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "service/chat_target.h"

namespace trainer::service {

struct TeacherSampling {
  int max_tokens = 4096;         // the answer at most, in tokens
  double temperature = 1.0;      // sampling temperature
  double top_p = 1.0;            // nucleus sampling's mass
  int64_t seed = 0;              // the request's seed
  std::string instructions;      // a system message put first; "" = none
  double timeout_seconds = 120;  // one call
  int retries = 2;               // further tries of a call without a chat completion
};

struct TeacherAnswer {
  bool accepted = false;
  nlohmann::json message;  // the accepted answer: {role: assistant, content, tool_calls?}
  std::string reason;      // why it was rejected ("" when accepted)
  bool refused = false;    // the teacher refused the call (a 4xx): asking again will not help
  bool answered = false;   // a chat completion came back (accepted or not)
};

// Asks `teacher` to answer the assistant turn messages[index] of `row` from the messages before
// it and the row's tools. `keep_going` is asked about once a second while a call runs: false stops
// the call (and its retries). Thread-safe.
TeacherAnswer ask_teacher(const ChatTarget& teacher, const TeacherSampling& sampling,
                          const nlohmann::json& row, size_t index, const std::function<bool()>& keep_going);

// Whether `message` (a chat completion's choices[0].message, with its finish_reason) is an
// acceptable answer for a row declaring `tools`: "" when it is, else why not.
std::string rejection_of(const nlohmann::json& message, const std::string& finish_reason,
                         const nlohmann::json& tools);

}  // namespace trainer::service

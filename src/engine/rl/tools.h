// Tools of reinforcement runs (config.rlHyperparams.tools): finding a tool call in a completion
// in the chat template's format (Qwen3, Hermes: <tool_call>{"name": ..., "arguments": ...}</tool_call>)
// and running the run's tool executable on it. Torch-free.
//
// The protocol: the executable gets one request {"name": NAME, "arguments": ARGS} (a JSON line)
// on standard input and answers one JSON value on standard output; it runs without a shell, in
// the job's working directory and environment. A call fails when the completion's call is not
// JSON with a string `name`, names a tool the row does not declare, or when the executable
// cannot start, exits non-zero, runs past the timeout (it is killed) or answers no JSON. The
// model is then shown {"error": WHY} as the tool's answer, and the failure is counted.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::engine::rl {

inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";

struct ToolCall {
  std::string name;
  nlohmann::json arguments = nlohmann::json::object();
};

// What a completion segment that ends with kToolCallClose asks: the call, or why it is not one.
struct ParsedToolCall {
  std::optional<ToolCall> call;
  std::string error;  // set when `call` is empty
};

// The call of the last <tool_call>...</tool_call> in `text`; nullopt when `text` does not end
// (but for whitespace) with kToolCallClose.
std::optional<ParsedToolCall> find_tool_call(std::string_view text);

// The names of the tools a row declares (`tools`: [{"type": "function", "function": {"name"}}]
// or [{"name"}]); empty when it declares none.
std::vector<std::string> declared_tool_names(const nlohmann::json& tools);

struct ToolAnswer {
  std::string content;  // what the model is shown in the tool role
  bool failed = false;
  std::string error;    // why it failed
};

// Runs `command` on `call` (see the protocol above), confined; with `network` (the plan declared
// config.rlHyperparams.tools.network) it keeps the host's network. A string answer is shown as it
// is, any other JSON value as its compact text.
ToolAnswer run_tool(const std::string& command, const ToolCall& call, double timeout_seconds, bool network = false);

// The answer shown for a failed call: {"error": why}.
ToolAnswer failed_call(const std::string& why);

}  // namespace trainer::engine::rl

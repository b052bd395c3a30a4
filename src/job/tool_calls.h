// Tool calls in a model's answer, parsed back into OpenAI's `tool_calls` (docs/serving.md,
// "Tool calls"), in the formats of the chat templates we serve:
//   - Qwen / Hermes: `<tool_call>{"name": N, "arguments": {...}}</tool_call>` blocks, anywhere in
//     the answer, one or more; the text outside them is the message's content;
//   - Llama 3: the whole answer one JSON object `{"name": N, "parameters"|"arguments": {...}}`,
//     optionally after `<|python_tag|>`.
// A block that is not such JSON is left in the content as text.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace trainer::job {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's `function.arguments`)
};

struct ParsedAnswer {
  std::string content;  // the text outside the calls, trimmed
  std::vector<ToolCall> calls;
};

// The tool calls of `text`; nullopt when it holds none.
std::optional<ParsedAnswer> parse_tool_calls(const std::string& text);

// How much of a streamed `text` may be sent as content now when the request offered tools: the
// text before anything that is, or may yet become, a tool call (held back until the answer ends).
size_t tool_safe_prefix(const std::string& text);

}  // namespace trainer::job

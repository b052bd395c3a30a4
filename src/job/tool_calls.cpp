#include "job/tool_calls.h"

#include <algorithm>
#include <string_view>

#include <nlohmann/json.hpp>

namespace trainer::job {
namespace {

using json = nlohmann::json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// {"name": string, "arguments"|"parameters": object (or a string holding one)} as a call.
std::optional<ToolCall> call_of(const std::string& text) {
  const json j = json::parse(trimmed(text), nullptr, false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  json args = j.contains("arguments") ? j["arguments"] : j.contains("parameters") ? j["parameters"] : json::object();
  if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
  if (!args.is_object()) return std::nullopt;
  return ToolCall{j["name"].get<std::string>(), args.dump()};
}

}  // namespace

std::optional<ParsedAnswer> parse_tool_calls(const std::string& text) {
  ParsedAnswer out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string::npos) break;
    const size_t body = open + kOpen.size();
    const size_t close = text.find(kClose, body);
    // An unclosed block (the answer ran out of tokens) still counts when its JSON is whole.
    const size_t end = close == std::string::npos ? text.size() : close;
    std::optional<ToolCall> call = call_of(text.substr(body, end - body));
    if (!call) {
      content += text.substr(pos, body - pos);
      pos = body;
      continue;
    }
    content += text.substr(pos, open - pos);
    out.calls.push_back(std::move(*call));
    pos = close == std::string::npos ? text.size() : close + kClose.size();
  }
  if (pos < text.size()) content += text.substr(pos);
  if (out.calls.empty()) {
    std::string whole = trimmed(text);
    if (whole.rfind(kPythonTag, 0) == 0) whole = whole.substr(kPythonTag.size());
    std::optional<ToolCall> call = call_of(whole);
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    return out;
  }
  out.content = trimmed(content);
  return out;
}

size_t tool_safe_prefix(const std::string& text) {
  const std::string_view all(text);
  // A JSON object or the python tag at the start may be a whole-answer call.
  const size_t first = all.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return 0;
  const std::string_view rest = all.substr(first);
  if (rest.front() == '{') return 0;
  if (rest.size() < kPythonTag.size() ? kPythonTag.starts_with(rest) : rest.starts_with(kPythonTag)) return 0;
  const size_t open = all.find(kOpen);
  if (open != std::string_view::npos) return open;
  // A tail that may yet become "<tool_call>".
  for (size_t keep = std::min(all.size(), kOpen.size() - 1); keep > 0; --keep) {
    if (kOpen.starts_with(all.substr(all.size() - keep))) return all.size() - keep;
  }
  return all.size();
}

}  // namespace trainer::job

// One teacher call of a distillation, with its retries, and what makes its answer accepted
// (teacher.h).
#include "service/teacher.h"

#include <set>

#include "common/http_client.h"
#include "common/json_parse.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;

// A refusal is an answer the teacher will give again: a 4xx but 408 and 429.
bool is_refusal(int status) {
  return status >= 400 && status < 500 && status != 408 && status != 429;
}

std::set<std::string> tool_names(const json& tools) {
  std::set<std::string> names;
  if (!tools.is_array()) return names;
  for (const json& t : tools) {
    if (!t.is_object()) continue;
    const json f = t.value("function", json::object());
    if (f.is_object() && f.value("name", json()).is_string()) names.insert(f["name"].get<std::string>());
  }
  return names;
}

TeacherAnswer ask_once(const ChatTarget& teacher, const TeacherSampling& s, const json& row, size_t index,
                       const std::function<bool()>& keep_going) {
  json messages = json::array();
  if (!s.instructions.empty()) messages.push_back({{"role", "system"}, {"content", s.instructions}});
  const json& source = row["messages"];
  for (size_t i = 0; i < index && i < source.size(); ++i) messages.push_back(source[i]);
  json request = {{"model", teacher.model},       {"messages", messages}, {"max_tokens", s.max_tokens},
                  {"temperature", s.temperature}, {"top_p", s.top_p},     {"seed", s.seed}};
  const json tools = row.value("tools", json());
  if (tools.is_array() && !tools.empty()) request["tools"] = tools;
  HttpResponse r = http_call({.method = "POST",
                              .url = teacher.url,
                              .headers = teacher.headers,
                              .body = request.dump(-1, ' ', false, json::error_handler_t::replace),
                              .timeout_seconds = s.timeout_seconds,
                              .ca_file = teacher.ca_file,
                              .keep_going = keep_going,
                              .proxy = teacher.proxy});
  TeacherAnswer a;
  if (r.failure != HttpFailure::kNone) {
    a.reason = (r.failure == HttpFailure::kTimeout ? "timeout: " : "unreachable: ") + r.detail;
    return a;
  }
  // The reply's own bytes never go into a reason, as with judges (docs/graders.md).
  const std::string answered = teacher.label + " answered HTTP " + std::to_string(r.status) +
                               " (a reply of " + std::to_string(r.body.size()) + " bytes, not shown)";
  if (is_refusal(r.status)) {
    a.refused = true;
    a.reason = answered;
    return a;
  }
  auto reply = parse_json(r.body, "the teacher's reply");
  const bool ok = r.status >= 200 && r.status < 300 && reply.is_ok() && reply->is_object();
  const json choices = ok ? reply->value("choices", json()) : json();
  if (!choices.is_array() || choices.empty() || !choices[0].is_object() ||
      !choices[0].value("message", json()).is_object()) {
    a.reason = "no_answer: " + answered + " with no chat completion";
    return a;
  }
  a.answered = true;
  const json message = choices[0]["message"];
  const json finish = choices[0].value("finish_reason", json());
  a.reason = rejection_of(message, finish.is_string() ? finish.get<std::string>() : "", tools);
  if (!a.reason.empty()) return a;
  a.accepted = true;
  const json content = message.value("content", json());
  a.message = {{"role", "assistant"},
               {"content", content.is_string() ? content.get<std::string>() : std::string()}};
  const json calls = message.value("tool_calls", json());
  if (calls.is_array() && !calls.empty()) {
    json kept = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
      const json& c = calls[i];
      const json id = c.value("id", json());
      kept.push_back(
          {{"id", id.is_string() ? id.get<std::string>() : "call_" + std::to_string(i)},
           {"type", "function"},
           {"function", {{"name", c["function"]["name"]}, {"arguments", c["function"]["arguments"]}}}});
    }
    a.message["tool_calls"] = std::move(kept);
  }
  return a;
}

}  // namespace

std::string rejection_of(const json& message, const std::string& finish_reason, const json& tools) {
  if (finish_reason == "length") return "truncated: the answer reached --max-tokens before it ended";
  const json content = message.value("content", json());
  if (!content.is_null() && !content.is_string()) return "bad_content: the answer's content is not text";
  const json calls = message.value("tool_calls", json());
  if (!calls.is_null() && !calls.is_array()) return "bad_tool_call: tool_calls is not a list";
  const bool has_text =
      content.is_string() && content.get<std::string>().find_first_not_of(" \t\r\n") != std::string::npos;
  if (!has_text && (!calls.is_array() || calls.empty()))
    return "empty: the answer has neither text nor a tool call";
  if (!calls.is_array()) return "";
  const std::set<std::string> declared = tool_names(tools);
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = "tool_calls[" + std::to_string(i) + "]";
    const json f = calls[i].is_object() ? calls[i].value("function", json()) : json();
    if (!f.is_object() || !f.value("name", json()).is_string())
      return "bad_tool_call: " + at + " names no function";
    const std::string name = f["name"].get<std::string>();
    if (declared.count(name) == 0) {
      return "unknown_tool: " + at + " calls '" + name + "', which is not among the row's tools";
    }
    const json args = f.value("arguments", json());
    auto parsed = args.is_string() ? parse_json(args.get<std::string>(), "arguments") : Result<json>(json());
    if (!args.is_string() || !parsed.is_ok() || !parsed->is_object()) {
      return "bad_arguments: " + at + " ('" + name + "') arguments are not a JSON object";
    }
  }
  return "";
}

TeacherAnswer ask_teacher(const ChatTarget& teacher, const TeacherSampling& sampling, const json& row,
                          size_t index, const std::function<bool()>& keep_going) {
  TeacherAnswer a;
  for (int attempt = 0; attempt <= sampling.retries && keep_going(); ++attempt) {
    a = ask_once(teacher, sampling, row, index, keep_going);
    if (a.answered || a.refused) return a;
  }
  return a;
}

}  // namespace trainer::service

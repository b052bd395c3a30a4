#include "dataset/validator.h"

#include <algorithm>
#include <iterator>

#include "common/json_parse.h"
#include "common/json_syntax.h"

namespace trainer::dataset {
namespace {

// How a JSON syntax error's message starts: "column 91: not valid JSON: ...".
constexpr const char* kColumnPrefix = "column ";

using json = nlohmann::json;

constexpr const char* kRoles[] = {"system", "user", "assistant", "tool"};
constexpr const char* kChatShape =
    "a row is {\"messages\": [...]} (chat) or {\"prompt\": ..., \"completion\": ...}";

bool known_role(const std::string& role) {
  return std::find(std::begin(kRoles), std::end(kRoles), role) != std::end(kRoles);
}

template <typename J>
std::string type_name(const J& v) { return v.type_name(); }

// Checks one message of a conversation; `path` is its dotted path ("messages[2]").
template <typename J>
Status check_message(const J& m, const std::string& path) {
  if (!m.is_object()) return invalid_field(path, "expected an object, got " + type_name(m));
  auto role = m.find("role");
  if (role == m.end()) {
    if (m.contains("from") || m.contains("value")) {
      return invalid_field(path + ".role", "missing; found \"from\"/\"value\" (ShareGPT); expected \"role\" and "
                                           "\"content\" (human -> user, gpt -> assistant)");
    }
    return invalid_field(path + ".role", "missing");
  }
  if (!role->is_string()) return invalid_field(path + ".role", "expected a string, got " + type_name(*role));
  const std::string r = role->template get<std::string>();
  if (!known_role(r)) {
    return invalid_field(path + ".role", "unknown role \"" + r + "\" (expected system, user, assistant or tool)");
  }
  auto content = m.find("content");
  const bool has_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
  if (has_calls) {
    if (r != "assistant") return invalid_field(path + ".tool_calls", "only assistant messages call tools");
    const auto& calls = m["tool_calls"];
    if (!calls.is_array()) return invalid_field(path + ".tool_calls", "expected an array, got " + type_name(calls));
    for (size_t i = 0; i < calls.size(); ++i) {
      const std::string cp = path + ".tool_calls[" + std::to_string(i) + "]";
      if (!calls[i].is_object()) return invalid_field(cp, "expected an object, got " + type_name(calls[i]));
      const auto& fn = calls[i].contains("function") ? calls[i]["function"] : calls[i];
      if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) {
        return invalid_field(cp + ".function.name", "missing");
      }
    }
  }
  if (content == m.end() || content->is_null()) {
    if (r == "assistant" && has_calls) return Status::ok();
    return invalid_field(path + ".content", "missing");
  }
  if (content->is_string()) return Status::ok();
  if (content->is_array()) {
    for (size_t i = 0; i < content->size(); ++i) {
      const auto& part = (*content)[i];
      if (!part.is_object() || !part.contains("type")) {
        return invalid_field(path + ".content[" + std::to_string(i) + "].type", "missing");
      }
    }
    return Status::ok();
  }
  return invalid_field(path + ".content", "expected a string, got " + type_name(*content));
}

template <typename J>
Status check_conversation(const J& messages, const std::string& field) {
  if (!messages.is_array()) return invalid_field(field, "expected an array of messages, got " + type_name(messages));
  if (messages.empty()) return invalid_field(field, "empty; a conversation needs at least one message");
  for (size_t i = 0; i < messages.size(); ++i) {
    TRAINER_RETURN_IF_ERROR(check_message(messages[i], field + "[" + std::to_string(i) + "]"));
  }
  // A tool message answers the tool_calls of the assistant message before it (or continues the
  // answers of the tool messages before it).
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "tool") continue;
    size_t j = i;
    while (j > 0 && messages[j - 1]["role"] == "tool") --j;
    const bool answered = j > 0 && messages[j - 1]["role"] == "assistant" && messages[j - 1].contains("tool_calls") &&
                          messages[j - 1]["tool_calls"].is_array() && !messages[j - 1]["tool_calls"].empty();
    if (!answered) {
      return invalid_field(field + "[" + std::to_string(i) + "]",
                           "a tool message must follow an assistant message with tool_calls");
    }
  }
  return Status::ok();
}

// A row with neither messages nor prompt/completion: what it looks like, when we know.
template <typename J>
Status unknown_shape(const J& row) {
  if (row.contains("conversations")) {
    return invalid_field("messages",
                         "missing; this row looks like ShareGPT ({\"conversations\": [{\"from\", \"value\"}]}); "
                         "expected {\"messages\": [{\"role\", \"content\"}]}: rename conversations to messages, "
                         "from to role (human -> user, gpt -> assistant) and value to content");
  }
  if (row.contains("input") && (row.contains("preferred_output") || row.contains("non_preferred_output"))) {
    return invalid_field("messages",
                         "missing; this row looks like OpenAI's preference fine-tuning format (input, "
                         "preferred_output, non_preferred_output); expected a chat row {\"messages\": [...]} "
                         "ending with the assistant answer to train on");
  }
  if (row.contains("instruction") && row.contains("output")) {
    return invalid_field("messages",
                         "missing; this row looks like Alpaca (instruction, input, output); expected "
                         "{\"prompt\": \"...\", \"completion\": \"...\"} or {\"messages\": [...]}");
  }
  return invalid_field("messages", std::string("missing; ") + kChatShape);
}

template <typename J>
Status check_tools(const J& row) {
  if (!row.contains("tools") || row["tools"].is_null()) return Status::ok();
  const auto& tools = row["tools"];
  if (!tools.is_array()) return invalid_field("tools", "expected an array, got " + type_name(tools));
  for (size_t i = 0; i < tools.size(); ++i) {
    if (!tools[i].is_object()) {
      return invalid_field("tools[" + std::to_string(i) + "]", "expected an object, got " + type_name(tools[i]));
    }
  }
  return Status::ok();
}

template <typename J>
Result<RowKind> check_row_impl(const J& row) {
  if (!row.is_object()) return invalid_argument("expected a JSON object, got " + type_name(row));
  RowKind kind;
  if (row.contains("messages")) {
    const auto& messages = row["messages"];
    TRAINER_RETURN_IF_ERROR(check_conversation(messages, "messages"));
    const std::string last = messages.back()["role"].template get<std::string>();
    if (last != "assistant") {
      return invalid_field("messages",
                           "the conversation must end with an assistant message (the last is \"" + last + "\")");
    }
    kind = RowKind::kChat;
  } else if (row.contains("prompt") || row.contains("completion")) {
    if (!row.contains("prompt")) return invalid_field("prompt", "missing (prompt/completion rows need both)");
    if (!row.contains("completion")) return invalid_field("completion", "missing (prompt/completion rows need both)");
    const auto& p = row["prompt"];
    const auto& c = row["completion"];
    if (p.is_string() && c.is_string()) {
      kind = RowKind::kPromptCompletionText;
    } else if (p.is_array() && c.is_array()) {
      TRAINER_RETURN_IF_ERROR(check_conversation(p, "prompt"));
      TRAINER_RETURN_IF_ERROR(check_conversation(c, "completion"));
      const std::string last = c.back()["role"].template get<std::string>();
      if (last != "assistant") {
        return invalid_field("completion", "must end with an assistant message (the last is \"" + last + "\")");
      }
      kind = RowKind::kPromptCompletionMessages;
    } else {
      return invalid_field("prompt, completion", "must both be strings or both be message lists (got " +
                                                     type_name(p) + " and " + type_name(c) + ")");
    }
  } else {
    return unknown_shape(row);
  }
  TRAINER_RETURN_IF_ERROR(check_tools(row));
  return kind;
}

}  // namespace

Result<RowKind> check_row(const nlohmann::json& row) { return check_row_impl(row); }
Result<RowKind> check_row(const nlohmann::ordered_json& row) { return check_row_impl(row); }

Status Validation::status(const std::string& field) const {
  if (bad_lines == 0 && rows.empty()) {
    return invalid_field(field, std::string("no rows; a dataset is JSONL with one row per line: ") + kChatShape);
  }
  if (bad_lines == 0) return Status::ok();
  std::string msg;
  for (const auto& e : errors) {
    if (!msg.empty()) msg += "; ";
    // A syntax error's message starts with its column (validate_jsonl): "line 6, column 91: ...".
    const std::string what = e.status.describe();
    msg += "line " + std::to_string(e.line) + (what.rfind(kColumnPrefix, 0) == 0 ? ", " : ": ") + what;
  }
  if (bad_lines > 1) {
    msg += "; " + std::to_string(bad_lines) + " bad lines in all";
    if (bad_lines > static_cast<int64_t>(errors.size())) {
      msg += " (the first " + std::to_string(errors.size()) + " shown)";
    }
  }
  return invalid_field(field, msg);
}

Validation validate_jsonl(std::string_view text) {
  Validation out;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    ++line_no;
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) {
      if (end == text.size()) break;
      continue;
    }
    auto bad = [&](Status st) {
      ++out.bad_lines;
      if (static_cast<int>(out.errors.size()) < kMaxReportedLines) out.errors.push_back({line_no, std::move(st)});
    };
    JsonSyntaxError syntax;
    auto row = parse_json_or_error(line, &syntax);
    if (!row) {
      // One line parsed alone: the error's column is the column within the file's line. Its
      // message starts with it, and status() joins it to the line ("line 6, column 91: ...").
      bad(invalid_argument((syntax.column > 0 ? kColumnPrefix + std::to_string(syntax.column) + ": " : std::string()) +
                           "not valid JSON: " + syntax.reason));
    } else if (auto kind = check_row(*row); !kind.is_ok()) {
      bad(kind.status());
    } else {
      // Stored in the row's own key order: a chat template writes a tool schema's keys in that
      // order (`tojson`), as transformers does, so the order is part of what is trained.
      out.rows.push_back(nlohmann::ordered_json::parse(line).dump(-1, ' ', false,
                                                                 nlohmann::ordered_json::error_handler_t::replace));
    }
    if (end == text.size()) break;
  }
  return out;
}

}  // namespace trainer::dataset

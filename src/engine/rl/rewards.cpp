// Reward terms and RL rows (declared in rl/rewards.h).
#include "engine/rl/rewards.h"

#include <fstream>
#include <sstream>

#include "common/json_parse.h"
#include "grading/verdict.h"

namespace trainer::engine::rl {
namespace {

using json = nlohmann::json;

std::string trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(a, b - a + 1));
}

}  // namespace

std::optional<json> extract_json(std::string_view text) { return grading::extract_json(text); }

double json_label_match(std::string_view completion, std::string_view gold) {
  std::optional<json> want = extract_json(gold);
  if (!want) return trim(completion) == trim(gold) ? 1.0 : 0.0;
  std::optional<json> got = extract_json(completion);
  if (!got) return 0.0;
  if (!want->is_object()) return *got == *want ? 1.0 : 0.0;
  if (want->empty()) return got->is_object() && got->empty() ? 1.0 : 0.0;
  if (!got->is_object()) return 0.0;
  int matched = 0;
  for (auto it = want->begin(); it != want->end(); ++it) {
    auto g = got->find(it.key());
    if (g != got->end() && *g == it.value()) ++matched;
  }
  return static_cast<double>(matched) / static_cast<double>(want->size());
}

std::string last_user_text(const nlohmann::json& messages) {
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    if (it->is_object() && it->value("role", "") == "user" && it->contains("content") && (*it)["content"].is_string()) {
      return (*it)["content"].get<std::string>();
    }
  }
  return "";
}

Result<std::vector<RlRow>> read_rl_rows(const std::string& path, const std::string& field) {
  std::ifstream in(path);
  if (!in) return invalid_field(field, path + ": cannot be read");
  std::vector<RlRow> rows;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (trim(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(n);
    auto doc = parse_json(line, where);
    if (!doc.is_ok()) return invalid_field(field, doc.status().message());
    if (!doc->is_object() || !doc->contains("messages") || !(*doc)["messages"].is_array()) {
      return invalid_field(field, where + ": field 'messages': an RL row is a chat row with a messages list");
    }
    const json& msgs = (*doc)["messages"];
    if (msgs.size() < 2) {
      return invalid_field(field,
                           where + ": field 'messages': an RL row needs a prompt and a final assistant message (the gold answer)");
    }
    const json& last = msgs.back();
    if (!last.is_object() || last.value("role", "") != "assistant" || !last.contains("content") ||
        !last["content"].is_string()) {
      return invalid_field(field, where + ": field 'messages[" + std::to_string(msgs.size() - 1) +
                                                 "]': the final message must be the assistant's gold answer (role \"assistant\", string content)");
    }
    RlRow row;
    row.messages = json::array();
    for (size_t i = 0; i + 1 < msgs.size(); ++i) row.messages.push_back(msgs[i]);
    row.tools = doc->contains("tools") ? (*doc)["tools"] : json(nullptr);
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(line);  // parsed above
    row.chat_messages = nlohmann::ordered_json::array();
    for (size_t i = 0; i + 1 < msgs.size(); ++i) row.chat_messages.push_back(ordered["messages"][i]);
    row.chat_tools = ordered.contains("tools") ? ordered["tools"] : nlohmann::ordered_json(nullptr);
    row.gold = last["content"].get<std::string>();
    row.line = n;
    rows.push_back(std::move(row));
  }
  if (rows.empty()) return invalid_field(field, path + ": no row: each line must be a chat row ending with the assistant's gold answer");
  return rows;
}

}  // namespace trainer::engine::rl

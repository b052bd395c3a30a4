// OASST1 message trees (sessions.h): every assistant message is a candidate, the path from the
// tree's root prompt to it. A candidate through a deleted message is dropped ("deleted"), one
// through a message in another language than English is dropped ("non_english"); deleted wins
// when both hold.
#include "dataset/sessions.h"

namespace trainer::dataset {
namespace {

using json = nlohmann::json;

// Walks one message and its replies. `path` holds the conversation down to its parent; `deleted`
// and `foreign` say whether a message on it was deleted or not English. Errors name the field
// (`at`, "prompt.replies[1]").
Status walk(const json& m, const std::string& at, json& path, bool deleted, bool foreign, SessionCandidates& out) {
  if (!m.is_object()) return invalid_field(at, "expected a message object, got " + std::string(m.type_name()));
  const json* role = m.contains("role") ? &m["role"] : nullptr;
  if (role == nullptr || !role->is_string() || (*role != "prompter" && *role != "assistant")) {
    return invalid_field(at + ".role", "expected \"prompter\" or \"assistant\", got " +
                                           (role == nullptr ? std::string("nothing") : role->dump()));
  }
  const bool assistant = *role == "assistant";
  if (assistant == (path.size() % 2 == 0)) {
    return invalid_field(at + ".role", std::string("a ") + (assistant ? "assistant" : "prompter") +
                                           " message must answer a " + (assistant ? "prompter" : "assistant") +
                                           " message (a tree alternates, starting with the prompter)");
  }
  if (!m.contains("text") || !m["text"].is_string()) return invalid_field(at + ".text", "expected a string");
  if (m.contains("deleted") && !m["deleted"].is_boolean() && !m["deleted"].is_null()) {
    return invalid_field(at + ".deleted", "expected true or false, got " + m["deleted"].dump());
  }
  if (m.contains("lang") && !m["lang"].is_string() && !m["lang"].is_null()) {
    return invalid_field(at + ".lang", "expected a language code, got " + m["lang"].dump());
  }
  deleted = deleted || m.value("deleted", json(false)) == json(true);
  const json lang = m.value("lang", json(nullptr));
  foreign = foreign || (lang.is_string() && lang != "en");
  path.push_back({{"role", assistant ? "assistant" : "user"}, {"content", m["text"]}});
  if (assistant) {
    if (deleted) {
      ++out.dropped["deleted"];
    } else if (foreign) {
      ++out.dropped["non_english"];
    } else {
      out.candidates.push_back({{"messages", path}});
    }
  }
  if (m.contains("replies") && !m["replies"].is_null()) {
    const json& replies = m["replies"];
    if (!replies.is_array()) return invalid_field(at + ".replies", "expected an array of messages");
    for (size_t i = 0; i < replies.size(); ++i) {
      TRAINER_RETURN_IF_ERROR(walk(replies[i], at + ".replies[" + std::to_string(i) + "]", path, deleted, foreign, out));
    }
  }
  path.erase(path.size() - 1);
  return Status::ok();
}

}  // namespace

SessionCandidates read_oasst1(std::string_view text) {
  SessionCandidates out;
  for_each_json_line(text, out, [&](int64_t, const json& tree) -> Status {
    if (!tree.is_object() || !tree.contains("prompt")) {
      return invalid_field("prompt", "missing: an OASST1 message tree is {\"message_tree_id\", \"prompt\": {...}}");
    }
    // The line's candidates count only when the whole tree reads.
    SessionCandidates one;
    json path = json::array();
    TRAINER_RETURN_IF_ERROR(walk(tree["prompt"], "prompt", path, false, false, one));
    for (auto& c : one.candidates) out.candidates.push_back(std::move(c));
    for (const auto& [why, n] : one.dropped) out.dropped[why] += n;
    return Status::ok();
  });
  return out;
}

}  // namespace trainer::dataset

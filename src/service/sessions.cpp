// Sessions (sessions.h): raw conversation corpora by content hash.
#include "service/sessions.h"

#include <optional>

#include "common/sha256.h"
#include "dataset/sessions.h"

namespace trainer::service {

Result<std::pair<json, bool>> Sessions::create(const json& body) {
  if (!body.is_object()) return invalid_argument("the request body must be a JSON object {source, content}");
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"source", "content"}));
  const json source_name = body.value("source", json());
  std::optional<dataset::SessionSource> source;
  if (source_name.is_string()) source = dataset::session_source(source_name.get<std::string>());
  if (!source) {
    return invalid_field("source", "required: oasst1, otel or canonical" +
                                       (source_name.is_null() ? std::string() : ", got " + source_name.dump()));
  }
  if (!body.contains("content") || !body["content"].is_string() || body["content"].get<std::string>().empty()) {
    return invalid_field("content", "required: the session file's text");
  }
  const std::string& content = body["content"].get_ref<const std::string&>();
  const std::string hash = sha256_hex(content);
  const std::string key = key_of(hash);
  // The same bytes again: the session stored before, read no further.
  auto stored_before = [&]() -> Result<std::optional<json>> {
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> existing, core_.store->get_session(hash));
    if (existing && existing->value("source", std::string()) != source_name) {
      return field_status(StatusCode::kFailedPrecondition, "source",
                          "these bytes are session " + hash + ", stored with source " +
                              existing->value("source", std::string()) + ", not " + source_name.get<std::string>());
    }
    return existing;
  };
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> existing, stored_before());
  if (existing) return std::make_pair(*existing, false);
  dataset::SessionCandidates read = dataset::read_session(*source, content);
  TRAINER_RETURN_IF_ERROR(read.status("content"));
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(existing, stored_before());  // stored meanwhile
  if (existing) return std::make_pair(*existing, false);
  json dropped = json::object();
  for (const auto& [why, n] : read.dropped) dropped[why] = n;
  json doc = {{"hash", hash},
              {"source", source_name},
              {"candidates", static_cast<int64_t>(read.candidates.size())},
              {"dropped", dropped},
              {"bytes", static_cast<int64_t>(content.size())},
              {"key", key},
              {"createdAt", core_.now_rfc3339()}};
  // The bytes first: a committed row always has its file.
  TRAINER_RETURN_IF_ERROR(core_.storage->put(key, content));
  auto inserted = core_.store->insert_session(doc);
  if (!inserted.is_ok()) {
    (void)core_.storage->remove(key);
    return inserted.status();
  }
  return std::make_pair(doc, *inserted);
}

Result<json> Sessions::get(const std::string& hash) { return find(hash, "session"); }

Result<json> Sessions::find(const std::string& hash, const std::string& field) {
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> doc, core_.store->get_session(hash));
  if (!doc) {
    return field_status(StatusCode::kNotFound, field,
                        "no session '" + hash + "' (its full hash, as `trainer sessions create` printed it)");
  }
  return *doc;
}

Result<std::vector<json>> Sessions::candidates(const json& session) {
  const std::string hash = session.value("hash", std::string());
  TRAINER_ASSIGN_OR_RETURN(std::string bytes, core_.storage->get(key_of(hash)));
  auto source = dataset::session_source(session.value("source", std::string()));
  if (!source) return internal_error("session " + hash + " has no known source");
  dataset::SessionCandidates read = dataset::read_session(*source, bytes);
  return std::move(read.candidates);
}

}  // namespace trainer::service

// Sessions (docs/curations.md): a raw corpus of conversations (`trainer sessions create -f FILE
// --source oasst1|otel|canonical`), stored under the hash of its bytes in the data folder
// (sessions/HASH), read into candidate conversations by dataset/sessions.h. The same bytes again
// are the session already stored; nothing new is written. There is no list: the hash is the
// handle a curation names.
//
// Thread safety: every method may be called from any thread; create() takes the core's mu.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "service/service_core.h"

namespace trainer::service {

class Sessions {
 public:
  explicit Sessions(ServiceCore& core) : core_(core) {}

  // Service::create_session: body {source, content}; the session and whether it is new. A file
  // with bad lines is refused naming each line and field; one without any candidate says what
  // was dropped.
  Result<std::pair<json, bool>> create(const json& body);
  // Service::get_session: one session by its full hash.
  Result<json> get(const std::string& hash);

  // For the other parts:
  // The stored session `hash`; not_found naming `field` when there is none.
  Result<json> find(const std::string& hash, const std::string& field);
  // The candidate conversations of a stored session, read again from its stored bytes (the
  // readers are pure: the same bytes give the same candidates in the same order).
  Result<std::vector<json>> candidates(const json& session);

 private:
  static std::string key_of(const std::string& hash) { return "sessions/" + hash; }

  ServiceCore& core_;
};

}  // namespace trainer::service

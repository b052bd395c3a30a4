// Where trainerd itself calls a chat model by name (a curation's judge, a distillation's teacher):
// a judge of trainerd's configuration (`judges:`, docs/graders.md), or a model served at one of its
// open endpoints (as a run's model:NAME term names one). The name is resolved once, when the
// curation or distillation is created, into a stored target; the target is turned into a URL and
// headers when the calls are made.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "service/service_core.h"

namespace trainer::service {

struct ChatTarget {
  std::string label;    // how messages name it: "judge 'NAME'", "teacher 'NAME' (endpoint E)"
  std::string url;      // the chat completions URL
  std::string model;    // the request's `model`
  std::string ca_file;  // PEM CAs for https; "" = the system's store
  std::vector<std::pair<std::string, std::string>> headers;  // Authorization, when it has a key
  std::string proxy;    // a declared judge's outbound.proxy; "" (trainerd's own endpoints: always) = directly
};

// `name` resolved into a stored target: {declared: NAME} or {endpointId, model}. An unknown name
// is invalid_field(`field`), listing the declared judges. `role` ("judge", "teacher") words it.
Result<json> find_chat_target(ServiceCore& core, const std::string& name, const std::string& field,
                              const std::string& role);

// How a stored target is called now: a declared judge's URL, model, CA file and key (its
// apiKeyEnv read from trainerd's environment), or trainerd's own forwarding to the endpoint.
Result<ChatTarget> chat_target_of(ServiceCore& core, const json& target, const std::string& role);

}  // namespace trainer::service

// Resolving and calling a chat model by name from trainerd (chat_target.h).
#include "service/chat_target.h"

#include <cstdlib>

namespace trainer::service {

Result<json> find_chat_target(ServiceCore& core, const std::string& name, const std::string& field,
                              const std::string& role) {
  if (find_judge(core.options.config, name) != nullptr) return json{{"declared", name}};
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> open,
                           core.store->list_endpoints({"AWAITING_CAPACITY", "STARTING", "READY"}));
  for (const json& e : open) {
    for (const json& m : e.value("models", json::array())) {
      if (m.is_object() && m.value("name", std::string()) == name) {
        return json{{"endpointId", e.value("endpointId", std::string())}, {"model", name}};
      }
    }
  }
  std::string declared;
  for (const auto& j : core.options.config.judges) declared += (declared.empty() ? "" : ", ") + j.name;
  return invalid_field(field, "'" + name + "' is neither a judge of this trainerd (declared: " +
                                  (declared.empty() ? std::string("none") : declared) +
                                  ") nor a model served at one of its endpoints (`trainer endpoints list`)" +
                                  (role == "judge" ? std::string() : ", so it cannot be the " + role));
}

Result<ChatTarget> chat_target_of(ServiceCore& core, const json& target, const std::string& role) {
  ChatTarget t;
  if (target.contains("declared")) {
    const std::string name = target["declared"].get<std::string>();
    const JudgeConfig* c = find_judge(core.options.config, name);
    if (c == nullptr)
      return failed_precondition(role + " '" + name + "' is no longer declared in trainerd's configuration");
    std::string base = c->url;
    while (!base.empty() && base.back() == '/') base.pop_back();
    t.label = role + " '" + name + "'";
    t.url = base + "/v1/chat/completions";
    t.model = c->model.empty() ? c->name : c->model;
    t.ca_file = c->ca_file;
    t.proxy = c->proxy;
    if (!c->api_key_env.empty()) {
      const char* key = std::getenv(c->api_key_env.c_str());
      if (key == nullptr || *key == '\0') {
        return failed_precondition(role + " '" + name + "' declares apiKeyEnv " + c->api_key_env +
                                   ", which trainerd's environment does not set");
      }
      t.headers.push_back({"Authorization", std::string("Bearer ") + key});
    }
    return t;
  }
  const std::string endpoint = target.value("endpointId", std::string());
  t.label = role + " '" + target.value("model", std::string()) + "' (endpoint " + endpoint + ")";
  t.url = core.catalog_url + "/v1/endpoints/" + endpoint + "/v1/chat/completions";
  t.headers.push_back({"Authorization", "Bearer " + core.own_token});
  t.ca_file = core.job_catalog_ca_file();  // our own API: over TLS when trainerd serves it
  t.model = target.value("model", std::string());
  return t;
}

}  // namespace trainer::service

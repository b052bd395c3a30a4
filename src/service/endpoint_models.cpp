// The models of an endpoint (docs/serving.md, "Models of an endpoint"): a candidate attached to a
// READY endpoint of its base model (no new devices), detach (the last one takes the endpoint
// down), disable and enable, and the check of a forwarded request's model against them.
//
// The serving process loads or drops an adapter over its /v1/adapters routes; those calls run
// without the core's mu (loading an adapter takes a while), and the document is read again after.
#include <algorithm>
#include <string>

#include "common/http_client.h"
#include "common/json_parse.h"
#include "service/endpoints.h"
#include "service/serving_process.h"

namespace trainer::service {
namespace {

// How long the serving process may take to load or drop an adapter (seconds).
constexpr double kAdapterCallSeconds = 120;

bool is_adapter(const json& m) { return m.value("kind", std::string()) == "adapter"; }

std::string names_of(const json& models) {
  std::string out;
  for (const auto& m : models) out += (out.empty() ? "" : ", ") + m.value("name", std::string());
  return out;
}

// OpenAI's error shape, as the serving process itself answers.
ForwardedAnswer openai_error(int status, const std::string& code, const std::string& message) {
  const json body = {{"error", {{"message", message}, {"type", "invalid_request_error"}, {"param", "model"}, {"code", code}}}};
  return ForwardedAnswer{status, body.dump()};
}

// The serving process's error answer as a status: its message, the code its HTTP status means.
Status status_of_answer(const HttpResponse& answer, const std::string& what) {
  const json body = json::parse(answer.body, nullptr, false);
  std::string message = answer.body;
  if (body.is_object() && body["error"].is_object()) message = body["error"].value("message", answer.body);
  message = what + ": " + message;
  switch (answer.status) {
    case 400: return field_status(StatusCode::kInvalidArgument, "model", message);
    case 404: return field_status(StatusCode::kNotFound, "model", message);
    case 409:
      return field_status(message.find("already attached") != std::string::npos ? StatusCode::kAlreadyExists
                                                                                 : StatusCode::kFailedPrecondition,
                          "model", message);
    default: return unavailable(message + " (HTTP " + std::to_string(answer.status) + ")");
  }
}

}  // namespace

Status Endpoints::call_adapters(const json& doc, const std::string& method, const json& body,
                                const std::string& name) const {
  HttpRequest call = serving_call(doc["_job"], method, method == "DELETE" ? "/v1/adapters/" + name : "/v1/adapters",
                                  kAdapterCallSeconds);
  if (method == "POST") call.body = body.dump();
  const HttpResponse answer = http_call(call);
  const std::string id = doc.value("endpointId", std::string());
  if (answer.failure != HttpFailure::kNone) {
    return unavailable("endpoint " + id + "'s serving process did not answer: " + answer.detail);
  }
  if (answer.status >= 200 && answer.status < 300) return Status::ok();
  return status_of_answer(answer, "endpoint " + id + "'s serving process refused " + (method == "POST" ? "to attach '" : "to detach '") + name + "'");
}

Result<std::optional<json>> Endpoints::attach_to_served(std::unique_lock<std::mutex>& lock, const json& request) {
  const json& served = request["served"];
  const std::string name = served.value("name", std::string());
  const std::string base_hash = request["model"].value("baseModelHash", std::string());
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> ready, core_.store->list_endpoints({"READY"}));
  std::optional<json> chosen;
  for (auto& doc : ready) {
    upgrade(doc);
    if (doc["model"].value("baseModelHash", std::string()) != base_hash || doc["workload"]["id"] != request["workload"]["id"]) {
      continue;
    }
    const json& models = doc["models"];
    const bool has = std::any_of(models.begin(), models.end(), [&](const json& m) { return m.value("name", std::string()) == name; });
    if (has) return std::optional<json>(std::move(doc));  // already served there: nothing to do
    const std::string id = doc["endpointId"].get<std::string>();
    const auto adapters = std::count_if(models.begin(), models.end(), is_adapter) + attaching_[id];
    if (!chosen && adapters < kMaxAdaptersLoaded) chosen = std::move(doc);
  }
  if (!chosen) return std::optional<json>();
  const std::string id = (*chosen)["endpointId"].get<std::string>();
  // Where the process finds it: a folder on this host, or its URI in the artifact store.
  TRAINER_ASSIGN_OR_RETURN(std::string path, attach_path_locked(id, served));
  ++attaching_[id];
  lock.unlock();
  Status loaded = call_adapters(*chosen, "POST", {{"name", name}, {"path", path}}, name);
  lock.lock();
  if (--attaching_[id] == 0) attaching_.erase(id);
  // A process that had it already (trainerd stopped between its call and the write below) serves it.
  if (!loaded.is_ok() && loaded.code() != StatusCode::kAlreadyExists) return loaded;
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve(id));
  if (doc.value("phase", std::string()) != "READY") {
    return unavailable("endpoint " + id + " stopped serving while '" + name + "' was attached to it; create the endpoint again");
  }
  json entry = served;
  entry["attachedAt"] = core_.now_rfc3339();
  doc["models"].push_back(entry);
  TRAINER_RETURN_IF_ERROR(core_.store->put_endpoint(doc));
  return std::optional<json>(std::move(doc));
}

Result<size_t> Endpoints::attached_model(const json& doc, const std::string& ref) const {
  const json& models = doc["models"];
  const std::string id = doc.value("endpointId", std::string());
  for (size_t i = 0; i < models.size(); ++i) {
    if (models[i].value("name", std::string()) == ref) return i;
  }
  std::vector<size_t> found;
  for (size_t i = 0; i < models.size() && !ref.empty(); ++i) {
    for (const char* key : {"name", "runId", "modelId"}) {
      if (models[i].value(key, std::string()).rfind(ref, 0) == 0) {
        found.push_back(i);
        break;
      }
    }
  }
  if (found.size() == 1) return found.front();
  if (found.size() > 1) return invalid_field("model", "'" + ref + "' names several models of endpoint " + id + " (" + names_of(models) + ")");
  return field_status(StatusCode::kNotFound, "model",
                      "endpoint " + id + " does not serve '" + ref + "' (it serves: " + names_of(models) + ")");
}

Result<json> Endpoints::detach(const std::string& ref, const std::string& model) {
  std::unique_lock<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve(ref));
  const std::string id = doc["endpointId"].get<std::string>();
  const std::string phase = doc.value("phase", std::string());
  if (phase != "READY" && phase != "STARTING" && phase != "AWAITING_CAPACITY") {
    return field_status(StatusCode::kFailedPrecondition, "endpoint", "endpoint " + id + " is " + phase + "; it serves nothing to detach");
  }
  TRAINER_ASSIGN_OR_RETURN(size_t index, attached_model(doc, model));
  TRAINER_RETURN_IF_ERROR(refuse_if_judging(doc, doc["models"][index].value("name", std::string()), "detach it"));
  if (doc["models"].size() == 1) return take_down_locked(std::move(doc));
  const json entry = doc["models"][index];
  const std::string name = entry.value("name", std::string());
  if (is_adapter(entry) && phase == "READY") {
    lock.unlock();
    Status dropped = call_adapters(doc, "DELETE", json(), name);
    lock.lock();
    if (!dropped.is_ok() && dropped.code() != StatusCode::kNotFound) return dropped;
    TRAINER_ASSIGN_OR_RETURN(doc, resolve(id));
  }
  json& models = doc["models"];
  models.erase(std::remove_if(models.begin(), models.end(), [&](const json& m) { return m.value("name", std::string()) == name; }),
               models.end());
  if (models.empty()) return take_down_locked(std::move(doc));
  TRAINER_RETURN_IF_ERROR(core_.store->put_endpoint(doc));
  return get(id);
}

Result<json> Endpoints::set_enabled(const std::string& ref, const std::string& model, bool enabled) {
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve(ref));
  const std::string id = doc["endpointId"].get<std::string>();
  const std::string phase = doc.value("phase", std::string());
  if (phase == "DELETED" || phase == "FAILED" || phase == "DELETING") {
    return field_status(StatusCode::kFailedPrecondition, "endpoint", "endpoint " + id + " is " + phase);
  }
  TRAINER_ASSIGN_OR_RETURN(size_t index, attached_model(doc, model));
  if (!enabled) TRAINER_RETURN_IF_ERROR(refuse_if_judging(doc, doc["models"][index].value("name", std::string()), "disable it"));
  json& entry = doc["models"][index];
  if (entry.value("enabled", true) != enabled) {
    entry["enabled"] = enabled;
    TRAINER_RETURN_IF_ERROR(core_.store->put_endpoint(doc));
  }
  return get(id);
}

std::optional<ForwardedAnswer> Endpoints::refusal_for(const json& doc, json& request) const {
  const json& models = doc["models"];
  const std::string id = doc.value("endpointId", std::string());
  if (!request.contains("model")) {
    for (auto it = models.rbegin(); it != models.rend(); ++it) {
      if (it->value("enabled", true)) {
        request["model"] = it->value("name", std::string());
        return std::nullopt;
      }
    }
    return openai_error(409, "model_disabled", "every model of endpoint " + id + " is disabled (trainer endpoints enable " + id + " MODEL)");
  }
  if (!request["model"].is_string()) return std::nullopt;  // the serving process names the error
  const std::string name = request["model"].get<std::string>();
  for (const auto& m : models) {
    if (m.value("name", std::string()) != name) continue;
    if (m.value("enabled", true)) return std::nullopt;
    return openai_error(409, "model_disabled",
                        "model '" + name + "' of endpoint " + id + " is disabled (trainer endpoints enable " + id + " " + name + ")");
  }
  return openai_error(404, "model_not_found",
                      "endpoint " + id + " does not serve '" + name + "' (it serves: " + names_of(models) + ")");
}

}  // namespace trainer::service

// Endpoints: the requests (create, list, get, delete). The forwarding of a chat completion to a
// READY endpoint's serving process is endpoint_forwarding.cpp; the endpoint's life is its task's
// (endpoint_tasks.cpp).
#include "service/endpoints.h"

#include <algorithm>
#include <filesystem>

#include "common/http_client.h"
#include "common/json_parse.h"

namespace trainer::service {
namespace {

constexpr int kEndpointDevices = 1;
constexpr const char* kActivePhases[] = {"AWAITING_CAPACITY", "STARTING", "READY", "DELETING"};

bool ended(const std::string& phase) { return phase == "DELETED" || phase == "FAILED"; }

// An endpoint as users see it: without `_job` (its process's handle and port), with the direct
// address of its process while it is READY.
json shown(json doc) {
  if (doc.value("phase", std::string()) == "READY" && doc["_job"].is_object()) {
    doc["address"] = "http://127.0.0.1:" + std::to_string(doc["_job"].value("port", 0)) + "/v1";
  }
  doc.erase("_job");
  return doc;
}

}  // namespace

Endpoints::Endpoints(ServiceCore& core, Capacity& capacity, Hooks hooks)
    : core_(core),
      capacity_(capacity),
      hooks_(std::move(hooks)),
      tasks_(endpoint_phase_table(), [this](tasks::Step& s) { return step_task(s); }) {}

std::string Endpoints::dir_of(const std::string& id) const {
  return (std::filesystem::path(core_.options.data_dir) / "endpoints" / id).string();
}

Result<json> Endpoints::resolve(const std::string& ref) {
  if (!is_hex(ref)) {
    return field_status(StatusCode::kNotFound, "endpoint", "no endpoint with id '" + ref + "' (endpoint ids are lowercase hex)");
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<std::string> ids, core_.store->endpoint_ids_with_prefix(ref, 10));
  std::string id = ref;
  if (std::find(ids.begin(), ids.end(), ref) == ids.end()) {
    if (ids.size() > 1) return invalid_field("endpoint", "'" + ref + "' is an ambiguous id prefix");
    if (ids.empty()) return field_status(StatusCode::kNotFound, "endpoint", "no endpoint with id '" + ref + "'");
    id = ids.front();
  }
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> doc, core_.store->get_endpoint(id));
  if (!doc) return field_status(StatusCode::kNotFound, "endpoint", "no endpoint with id '" + ref + "'");
  return *doc;
}

// The served model: a base model (which needs a workload) or a candidate's adapter on its base
// model (which carries its own workload). Nothing is stored here.
Result<json> Endpoints::resolve_request(const json& body) {
  TRAINER_ASSIGN_OR_RETURN(std::optional<std::string> model_ref, optional_string(body, "model"));
  if (!model_ref || model_ref->empty()) {
    return invalid_field("model", "is required: a base model's name, a completed run's id or a registered model's id");
  }
  TRAINER_ASSIGN_OR_RETURN(std::optional<std::string> workload_ref, optional_string(body, "workload"));
  TRAINER_ASSIGN_OR_RETURN(json model, hooks_.resolve_model(*model_ref));
  const std::string kind = model.value("kind", std::string());
  const bool base = kind == "base" || kind == "registeredBase";
  std::optional<json> workload;
  if (workload_ref && !workload_ref->empty()) {
    TRAINER_ASSIGN_OR_RETURN(workload, hooks_.resolve_workload(*workload_ref, "workload"));
  }
  const std::string own = model.value("workloadId", std::string());
  if (!base && !own.empty()) {
    if (workload && (*workload)["id"] != own) {
      return invalid_field("workload", "model '" + *model_ref + "' belongs to another workload (" + own +
                                           "); leave workload out (a candidate carries its own)");
    }
    if (!workload) {
      TRAINER_ASSIGN_OR_RETURN(workload, hooks_.resolve_workload(own, "model"));
    }
  }
  if (!workload) {
    return invalid_field("workload", "is required: a base model carries no workload; name the workload its devices count against");
  }
  json served = json::array({{{"name", model.value("baseModel", std::string())}, {"kind", "base"}}});
  if (!base) {
    std::string adapter = model.value("adapterPath", std::string());
    const std::string uri = model.value("artifactUri", std::string());
    if (adapter.empty() && uri.rfind("file://", 0) == 0) adapter = uri.substr(7);
    if (adapter.empty()) {
      return field_status(StatusCode::kFailedPrecondition, "model",
                          "model '" + *model_ref + "' is stored at " + uri + "; endpoints serve adapters on this host's disk only for now");
    }
    model["servedAdapterPath"] = adapter;
    const std::string name = model.contains("runId") ? model["runId"].get<std::string>() : model.value("modelId", *model_ref);
    served.push_back({{"name", name}, {"kind", "adapter"}});
  }
  return json{{"model", model}, {"workload", {{"id", (*workload)["id"]}, {"name", (*workload)["name"]}}}, {"models", served}};
}

// A serving pool when the deployment declares one, else a CPU pool (a host without one).
const PoolConfig* Endpoints::serving_pool() const {
  for (const bool serving : {true, false}) {
    for (const auto& p : core_.options.config.pools) {
      if (p.serving == serving && (serving || p.accelerator == "cpu") && p.max_claim >= kEndpointDevices &&
          p.declared >= kEndpointDevices) {
        return &p;
      }
    }
  }
  return nullptr;
}

Result<json> Endpoints::info() const {
  const PoolConfig* pool = serving_pool();
  return json{{"maxAdapterRank", core_.options.config.limits.max_adapter_rank},
              {"maxAdaptersLoaded", kMaxAdaptersLoaded},
              {"devicesPerEndpoint", kEndpointDevices},
              {"deviceType", pool ? json(pool->accelerator) : json(nullptr)},
              {"pool", pool ? json(pool->name) : json(nullptr)},
              {"contextLimit", nullptr},  // each model's own (the serving process's `listening` line)
              {"idleTimeoutSeconds", nullptr},  // an endpoint serves until it is deleted
              {"toolCallParsers", json::array()},
              {"wholeWeightModels", false},
              {"streamingThroughTrainerd", false}};
}

Result<json> Endpoints::create(const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"model", "workload"}));
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json request, resolve_request(body));
  const PoolConfig* pool = serving_pool();
  if (!pool) {
    return field_status(StatusCode::kFailedPrecondition, "model",
                        "no pool of this deployment can hold an endpoint's device (declare a serving pool)");
  }
  const std::string id = random_hex(16);
  json doc = {{"endpointId", id},
              {"phase", "AWAITING_CAPACITY"},
              {"model", request["model"]},
              {"workload", request["workload"]},
              {"models", request["models"]},
              {"claim", {{"pool", pool->name}, {"devices", kEndpointDevices}}},
              {"createdAt", core_.now_rfc3339()}};
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->put_endpoint(doc));
    TRAINER_RETURN_IF_ERROR(core_.kernel->create("endpoint", id, "AWAITING_CAPACITY"));
    store::ClaimRow c;
    c.owner = id;
    c.kind = "SERVING";
    c.workload_id = doc["workload"]["id"].get<std::string>();
    c.pool = pool->name;
    c.devices = kEndpointDevices;
    c.state = "QUEUED";
    c.since = core_.now_rfc3339();
    TRAINER_RETURN_IF_ERROR(core_.store->insert_claim(c));
    return capacity_.admit_locked();
  }));
  return get(id);
}

Result<json> Endpoints::list(const std::string& phase) {
  std::vector<std::string> phases;
  if (phase == "active") {
    phases.assign(std::begin(kActivePhases), std::end(kActivePhases));
  } else if (!phase.empty()) {
    if (!endpoint_phase_table().find(phase)) {
      return invalid_field("phase", "'" + phase + "' is not an endpoint phase (AWAITING_CAPACITY, STARTING, READY, "
                                    "DELETING, DELETED, FAILED, or active)");
    }
    phases = {phase};
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> docs, core_.store->list_endpoints(phases));
  json out = json::array();
  for (auto& d : docs) out.push_back(shown(std::move(d)));
  return json{{"endpoints", out}};
}

Result<std::optional<store::ClaimRow>> Endpoints::claim_of(const std::string& id) {
  TRAINER_ASSIGN_OR_RETURN(std::vector<store::ClaimRow> claims, core_.store->list_claims());
  for (auto& c : claims) {
    if (c.owner == id) return std::optional<store::ClaimRow>(std::move(c));
  }
  return std::optional<store::ClaimRow>();
}

Result<json> Endpoints::get(const std::string& ref) {
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve(ref));
  TRAINER_ASSIGN_OR_RETURN(std::optional<store::ClaimRow> claim, claim_of(doc["endpointId"].get<std::string>()));
  if (claim) {
    doc["claim"] = {{"pool", claim->pool},   {"devices", claim->devices},        {"state", claim->state},
                    {"since", claim->since}, {"deviceIds", claim->device_ids}};
  }
  return shown(std::move(doc));
}

Result<json> Endpoints::remove(const std::string& ref) {
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve(ref));
  const std::string id = doc["endpointId"].get<std::string>();
  const std::string phase = doc.value("phase", std::string());
  if (ended(phase) || phase == "DELETING") {
    return field_status(StatusCode::kFailedPrecondition, "endpoint", "endpoint " + id + " is already " + phase);
  }
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    if (!doc["_job"].is_object()) return end_locked(doc, "DELETED", "");
    core_.backend->request_stop(backend::JobHandle{doc["_job"].value("handle", std::string())});
    doc["phase"] = "DELETING";
    doc["deleteRequestedAt"] = core_.now();
    TRAINER_RETURN_IF_ERROR(core_.store->put_endpoint(doc));
    return core_.kernel->move("endpoint", id, "DELETING");
  }));
  return shown(std::move(doc));
}

Result<bool> Endpoints::holds_claim(const std::string& owner) {
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> doc, core_.store->get_endpoint(owner));
  return doc.has_value() && !ended(doc->value("phase", std::string()));
}

}  // namespace trainer::service

// Endpoints: the requests (create, list, get, delete). The forwarding of a chat completion to a
// READY endpoint's serving process is endpoint_forwarding.cpp; the endpoint's life is its task's
// (endpoint_tasks.cpp).
#include "service/endpoints.h"

#include <algorithm>
#include <filesystem>

#include "common/http_client.h"
#include "common/json_parse.h"
#include "service/serving_process.h"
#include "service/workloads.h"

namespace trainer::service {
namespace {

constexpr int kEndpointDevices = 1;
constexpr const char* kActivePhases[] = {"AWAITING_CAPACITY", "STARTING", "READY", "DELETING"};

bool ended(const std::string& phase) { return phase == "DELETED" || phase == "FAILED"; }

// An endpoint as users see it: without `_job` (its process's handle, address and secret), with
// the direct address of its process while it is READY (on the node it runs on).
json shown(json doc) {
  if (doc.value("phase", std::string()) == "READY" && doc["_job"].is_object()) {
    doc["address"] = serving_origin(doc["_job"]) + "/v1";
  }
  doc.erase("_job");
  for (auto& m : doc["models"]) m.erase("_path");
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

void Endpoints::upgrade(json& doc) {
  json& models = doc["models"];
  if (!models.is_array()) models = json::array();
  const std::string kind = doc["model"].value("kind", std::string());
  const bool base = kind == "base" || kind == "registeredBase";
  if (!base && models.size() == 2 && models[0].value("kind", std::string()) == "base") models.erase(models.begin());
  for (auto& m : models) {
    if (!m.contains("enabled")) m["enabled"] = true;
    if (m.value("kind", std::string()) == "adapter" && !m.contains("_path")) {
      m["_path"] = doc["model"].value("servedAdapterPath", std::string());
    }
  }
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
  upgrade(*doc);
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
  TRAINER_RETURN_IF_ERROR(Workloads::check_takes_work(*workload, "workload"));
  json served = {{"name", model.value("baseModel", std::string())}, {"kind", "base"}, {"enabled", true}};
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
    served = {{"name", name}, {"kind", "adapter"}, {"enabled", true}, {"_path", adapter}};
    for (const char* key : {"runId", "modelId"}) {
      if (model.contains(key)) served[key] = model[key];
    }
  }
  return json{{"model", model}, {"workload", {{"id", (*workload)["id"]}, {"name", (*workload)["name"]}}}, {"served", served}};
}

// A serving pool when the deployment declares one, else a CPU pool (a host without one).
const PoolConfig* Endpoints::serving_pool() const {
  for (const bool serving : {true, false}) {
    for (const auto& p : core_.options.config.pools) {
      // Now, or once a capacity window still to come opens (the claim waits for it).
      if (p.serving == serving && (serving || p.accelerator == "cpu") && p.max_claim >= kEndpointDevices &&
          peak_from(p, core_.now()) >= kEndpointDevices) {
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
              {"toolCallParsers", json::array({"hermes", "llama3_json"})},  // src/job/tool_calls.h
              {"wholeWeightModels", false},
              {"streamingThroughTrainerd", true}};
}

Result<json> Endpoints::create(const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"model", "workload"}));
  std::unique_lock<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json request, resolve_request(body));
  if (request["served"]["kind"] == "adapter") {
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> attached, attach_to_served(lock, request));
    if (attached) {
      json out = shown(std::move(*attached));
      out["attachedModel"] = request["served"]["name"];
      return out;
    }
  }
  TRAINER_ASSIGN_OR_RETURN(std::string id, create_locked(request));
  return get(id);
}

Result<std::string> Endpoints::create_locked(const json& request) {
  // On nodes that share no folder with trainerd (a Ray backend's jobFolder), a serving process
  // reads its model and adapters from the artifact store, where trainerd stages them; without an
  // S3 store it could find neither. Refused by name rather than left STARTING.
  if (!core_.backend->shares_files() && !core_.artifact_store) {
    return field_status(StatusCode::kFailedPrecondition, "model",
                        "endpoints on nodes that share no folder with trainerd need an S3 artifact store: this "
                        "deployment's " + core_.backend->name() + " backend runs jobs in a folder of their own node "
                        "(compute.ray.jobFolder), and without artifactStore trainerd cannot stage the model there "
                        "(configure artifactStore, or leave jobFolder out)");
  }
  const PoolConfig* pool = serving_pool();
  if (!pool) {
    return field_status(StatusCode::kFailedPrecondition, "model",
                        "no pool of this deployment can hold an endpoint's device (declare a serving pool)");
  }
  TRAINER_RETURN_IF_ERROR(check_quota(request["workload"]));
  const std::string id = random_hex(16);
  json doc = {{"endpointId", id},
              {"phase", "AWAITING_CAPACITY"},
              {"model", request["model"]},
              {"workload", request["workload"]},
              {"models", json::array({request["served"]})},
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
  return id;
}

Status Endpoints::servable(const std::string& model) { return hooks_.resolve_model(model).status(); }

Result<json> Endpoints::judge_endpoint_locked(const std::string& model, const std::string& workload_id) {
  TRAINER_ASSIGN_OR_RETURN(json resolved, hooks_.resolve_model(model));
  const std::string kind = resolved.value("kind", std::string());
  json body = {{"model", model}};
  if (kind == "base" || kind == "registeredBase") body["workload"] = workload_id;  // a candidate has its own
  TRAINER_ASSIGN_OR_RETURN(json request, resolve_request(body));
  const std::string name = request["served"].value("name", std::string());
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> open, core_.store->list_endpoints({"AWAITING_CAPACITY", "STARTING", "READY"}));
  for (auto& doc : open) {
    upgrade(doc);
    for (const auto& m : doc["models"]) {
      if (m.value("name", std::string()) == name) return json{{"endpointId", doc["endpointId"]}, {"model", name}};
    }
  }
  TRAINER_ASSIGN_OR_RETURN(std::string id, create_locked(request));
  return json{{"endpointId", id}, {"model", name}};
}

Status Endpoints::refuse_if_judging(const json& doc, const std::string& model, const std::string& what) {
  const std::string id = doc.value("endpointId", std::string());
  for (const auto& m : doc["models"]) {
    const std::string name = m.value("name", std::string());
    if (!model.empty() && name != model) continue;
    TRAINER_ASSIGN_OR_RETURN(std::vector<std::string> users, hooks_.judge_users(id, name));
    if (users.empty()) continue;
    std::string named;
    for (const auto& u : users) named += (named.empty() ? "" : ", ") + u;
    return field_status(StatusCode::kFailedPrecondition, model.empty() ? "endpoint" : "model",
                        "cannot " + what + ": '" + name + "' of endpoint " + id + " is called by " + named +
                            " (a run's judge, a curation's judge or a distillation's teacher), which has not "
                            "ended (cancel it, or wait until it ends)");
  }
  return Status::ok();
}

// An endpoint is for trying a model now: one that its workload's quota cannot hold beside the
// devices the workload holds or waits for is refused rather than queued.
Status Endpoints::check_quota(const json& workload) {
  const std::string workload_id = workload["id"].get<std::string>();
  TRAINER_ASSIGN_OR_RETURN(json full, hooks_.resolve_workload(workload_id, "workload"));
  const int quota = full.value("gpuQuota", 0);
  TRAINER_ASSIGN_OR_RETURN(std::vector<store::ClaimRow> claims, core_.store->list_claims());
  int counted = 0;
  for (const auto& c : claims) {
    if (c.workload_id == workload_id) counted += c.devices;
  }
  if (counted + kEndpointDevices <= quota) return Status::ok();
  return field_status(StatusCode::kFailedPrecondition, "workload",
                      "workload " + workload.value("name", workload_id) + " holds or waits for " + std::to_string(counted) +
                          " of its quota of " + std::to_string(quota) + " devices; an endpoint needs " +
                          std::to_string(kEndpointDevices) + " more (raise its gpuQuota with PATCH /v1/workloads/" +
                          workload_id + ", or end some of its work)");
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
  for (auto& d : docs) {
    upgrade(d);
    out.push_back(shown(std::move(d)));
  }
  return json{{"endpoints", out}};
}

Result<std::optional<store::ClaimRow>> Endpoints::claim_of(const std::string& id) {
  return core_.store->get_claim(id);  // its own claim, not every claim (a queue of thousands)
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
  TRAINER_RETURN_IF_ERROR(refuse_if_judging(doc, "", "take it down"));
  if (doc["models"].size() > 1) {
    std::string names;
    for (const auto& m : doc["models"]) names += (names.empty() ? "" : ", ") + m.value("name", std::string());
    return field_status(StatusCode::kFailedPrecondition, "endpoint",
                        "endpoint " + id + " serves " + std::to_string(doc["models"].size()) + " models (" + names +
                            "); detach all but one first (trainer endpoints detach " + id + " MODEL)");
  }
  return take_down_locked(std::move(doc));
}

Result<json> Endpoints::take_down_locked(json doc) {
  const std::string id = doc["endpointId"].get<std::string>();
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

std::string Endpoints::metrics_text() {
  constexpr double kStatsSeconds = 0.5;
  std::vector<std::string> active;
  std::vector<EndpointMeters::KvBlocks> kv;
  auto docs = core_.store->list_endpoints(std::vector<std::string>(std::begin(kActivePhases), std::end(kActivePhases)));
  if (docs.is_ok()) {
    for (const auto& doc : *docs) {
      const std::string id = doc.value("endpointId", std::string());
      active.push_back(id);
      if (doc.value("phase", std::string()) != "READY" || !doc["_job"].is_object()) continue;
      const HttpResponse stats = http_call(serving_call(doc["_job"], "GET", "/v1/stats", kStatsSeconds));
      const json s = stats.status == 200 ? json::parse(stats.body, nullptr, false) : json();
      if (s.is_object()) kv.push_back({id, s.value("kv_blocks_used", 0L), s.value("kv_blocks_total", 0L), s.value("kv_blocks_cached", 0L)});
    }
  }
  return meters_.render(active, kv);
}

}  // namespace trainer::service

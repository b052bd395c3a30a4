// ModelRegistry (model_registry.h): registration of snapshot weights as models, in durable
// steps: a registration is a model record PENDING (with a `registration` hold on its source
// snapshot), then COPYING while its task's work copies the weights into the registry
// (registry/models/<id>, every file checked against the snapshot's manifest), then REGISTERED (the
// hold released) or FAILED (the hold kept until `snapshots release`). Each registration is a task
// of the kernel ("registration" kind); every step is committed before the next begins; after a
// restart the task's next step launches the copy again, and the copy goes to a key derived from
// the model id, so a copy finished before a crash is found and checked, never made twice.
//
// A completed run registers its final snapshot's weights this way (runs get shows modelId);
// `snapshots register` does it for an earlier snapshot. The id derives from the snapshot, so
// both name the same model for the same snapshot.
#include "service/model_registry.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "common/sha256.h"
#include "protocol/snapshot.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;
namespace tel = trainer::telemetry;

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

bool weights_committed(const json& snapshot) {
  const json kinds = snapshot.value("kinds", json::object());
  return kinds.contains(protocol::kWeightsKind) &&
         kinds[protocol::kWeightsKind].value("state", std::string()) == "committed";
}

// The snapshot's holds ([{holder: branch|pin|registration, runId?, modelId?, artifacts, since}],
// shared with branches and pins): a registration holds the weights it copies, by model id.
void add_registration_hold(json& snapshot, const std::string& model, const std::string& since) {
  json& holds = snapshot["holds"];
  if (!holds.is_array()) holds = json::array();
  for (const auto& h : holds) {
    if (h.value("holder", std::string()) == kRegistrationHold && h.value("modelId", std::string()) == model) return;
  }
  holds.push_back({{"holder", kRegistrationHold}, {"modelId", model}, {"artifacts", {protocol::kWeightsKind}},
                   {"since", since}});
}

void drop_registration_hold(json& snapshot, const std::string& model) {
  if (!snapshot.contains("holds") || !snapshot["holds"].is_array()) return;
  json kept = json::array();
  for (const auto& h : snapshot["holds"]) {
    if (h.value("holder", std::string()) != kRegistrationHold || h.value("modelId", std::string()) != model) {
      kept.push_back(h);
    }
  }
  snapshot["holds"] = kept;
}

void set_status(json& model, const std::string& status, const std::string& time) {
  model["status"] = status;
  if (!model["statusHistory"].is_array()) model["statusHistory"] = json::array();
  model["statusHistory"].push_back({{"status", status}, {"time", time}});
}

// A field of the run's resolved plan, or null.
// A registered model's cost: its run's (docs/registry.md): {deviceKind, deviceSeconds, gpuSeconds
// (deprecated: the device-seconds under their old name)}.
json model_cost_json(const json& run) {
  const json cost = run.value("cost", json::object());
  const double seconds = cost.value("deviceSeconds", cost.value("gpuSeconds", 0.0));
  return {{"deviceKind", cost.value("deviceKind", run_device_kind(run.value("plan", json::object())))},
          {"deviceSeconds", seconds},
          {"gpuSeconds", seconds}};
}

json plan_value(const RunRecord& run, const char* pointer) {
  const json plan = run.view.value("plan", json::object());
  const json::json_pointer p(pointer);
  return plan.contains(p) ? plan.at(p) : json(nullptr);
}

}  // namespace

std::string model_id(const std::string& kind, const std::vector<std::string>& parts) {
  std::string text = "trainer-model-v1\n" + kind + "\n";
  for (const auto& p : parts) text += p + "\n";
  return sha256_hex(text).substr(0, 16);
}

std::string model_key(const std::string& id) { return "registry/models/" + id; }

void ModelRegistry::registration_attempt(telemetry::ServiceStage stage, telemetry::ServiceOutcome outcome,
                                         std::optional<telemetry::ServiceFailureReason> reason) {
  core_.metrics.operation_attempt(
      {.operation = tel::ServiceOperation::kRegisterCandidate, .stage = stage, .outcome = outcome, .reason = reason});
}

Result<std::pair<json, bool>> ModelRegistry::start_registration_locked(json snapshot, const RunRecord& run,
                                                                      const json& folder_source) {
  const std::string sid = snapshot.value("snapshotId", std::string());
  const std::string id = folder_source.is_object() ? model_id("run", {run.id}) : model_id("snapshot", {sid});
  auto existing = core_.store->get_trained_model(id);
  if (!existing.is_ok()) return existing.status();
  const std::string t = core_.now_rfc3339();
  if (existing->has_value()) {
    json doc = **existing;
    if (doc.value("status", std::string()) != kModelFailed) return std::make_pair(doc, false);
    // Registering a FAILED registration again tries again, from PENDING, holding its source.
    doc["failureReason"] = nullptr;
    doc["_acceptedAt"] = core_.now();
    set_status(doc, kModelPending, t);
    if (!sid.empty()) {
      add_registration_hold(snapshot, id, t);
      TRAINER_RETURN_IF_ERROR(core_.store->update_snapshot(snapshot));
    }
    TRAINER_RETURN_IF_ERROR(core_.store->update_trained_model(doc));
    TRAINER_RETURN_IF_ERROR(core_.kernel->enter("registration", id, kModelPending));
    registration_attempt(tel::ServiceStage::kAccept, tel::ServiceOutcome::kSuccess);
    return std::make_pair(doc, false);
  }
  json base = {{"name", run.base_model}, {"id", nullptr}, {"contentHash", run.base_model_sha ? json(*run.base_model_sha) : json(nullptr)}};
  if (auto b = base_models_.resolve(run.base_model, "baseModel"); b.is_ok()) base["id"] = (*b)["id"];
  json workload = {{"id", run.workload_id}, {"name", run.workload_name}};
  if (auto w = core_.store->get_workload(run.workload_id); w.is_ok() && w->has_value()) {
    workload["name"] = (**w)["name"];
  }
  const json step = snapshot.value("savedStep", json(nullptr));
  const json model_name = plan_value(run, "/modelName");
  json doc = {
      {"modelId", id},
      {"name", model_name.is_string() ? model_name : json(run.base_model)},
      {"variant", kVariantAdapter},
      {"method", upper(run.method)},
      {"baseModel", base},
      {"workload", workload},
      {"source", folder_source.is_object()
                     ? folder_source
                     : json{{"kind", "snapshot"}, {"runId", run.id}, {"snapshotId", sid}, {"savedStep", step},
                            {"attempt", snapshot.value("attempt", json(nullptr))}}},
      {"config", {{"configName", run.view.value("configName", json(nullptr))},
                  {"settingsSha", run.view.value("settingsSha", json(nullptr))},
                  {"dataset", run.view.value("dataset", json(nullptr))}}},
      {"lineage", {{"baseModel", base}, {"runId", run.id}, {"parentRunId", run.view.value("parentRunId", json(nullptr))},
                   {"snapshotId", sid.empty() ? json(nullptr) : json(sid)}, {"savedStep", step}}},
      {"cost", model_cost_json(run.view)},
      {"adapterRank", plan_value(run, "/config/hyperparams/lora/rank")},
      {"targetModules", plan_value(run, "/config/hyperparams/lora/targetModules")},
      {"artifact", nullptr},
      {"servingModel", {{"variant", kVariantAdapter}, {"baseModel", run.base_model},
                        {"adapterRank", plan_value(run, "/config/hyperparams/lora/rank")}, {"ref", nullptr}}},
      {"status", kModelPending},
      {"failureReason", nullptr},
      {"statusHistory", json::array({{{"status", kModelPending}, {"time", t}}})},
      {"createdAt", t},
      {"registeredAt", nullptr},
      {"evaluations", json::array()},
      {"_acceptedAt", core_.now()}};  // seconds, for the operation's duration
  // The registration holds its source until its copy is durable.
  if (!sid.empty()) {
    add_registration_hold(snapshot, id, t);
    TRAINER_RETURN_IF_ERROR(core_.store->update_snapshot(snapshot));
  }
  TRAINER_RETURN_IF_ERROR(core_.store->insert_trained_model(doc));
  TRAINER_RETURN_IF_ERROR(core_.kernel->enter("registration", id, kModelPending));
  registration_attempt(tel::ServiceStage::kAccept, tel::ServiceOutcome::kSuccess);
  if (!sid.empty()) registration_attempt(tel::ServiceStage::kRetain, tel::ServiceOutcome::kSuccess);
  return std::make_pair(doc, true);
}

Status ModelRegistry::register_completed_run(RunRecord& run) {
  const json latest = run.view.value("latestSnapshot", json(nullptr));
  std::optional<json> snapshot;
  if (latest.is_object() && latest.contains("snapshotId") && latest["snapshotId"].is_string()) {
    auto snap = core_.store->get_snapshot(latest["snapshotId"].get<std::string>());
    if (!snap.is_ok()) return snap.status();
    if (snap->has_value() && weights_committed(**snap)) snapshot = **snap;
  }
  // Without a catalog (no final snapshot with weights) the job's adapter folder is the source.
  json source = snapshot ? json(nullptr) : json{{"kind", "run"}, {"runId", run.id}, {"path", run.view["adapterPath"]}};
  auto r = start_registration_locked(snapshot.value_or(json::object()), run, source);
  if (!r.is_ok()) return r.status();
  run.view["modelId"] = r->first["modelId"];
  return Status::ok();
}

Result<std::pair<json, bool>> ModelRegistry::register_snapshot(const std::string& snapshot_ref) {
  std::lock_guard<std::mutex> lock(core_.mu);
  auto sid = catalog_.resolve_id(snapshot_ref, "snapshot");
  if (!sid.is_ok()) return sid.status();
  auto snap = core_.store->get_snapshot(*sid);
  if (!snap.is_ok()) return snap.status();
  if (!snap->has_value() || (**snap).value("state", std::string()) != "committed") {
    return field_status(StatusCode::kNotFound, "snapshot", "no committed snapshot with id '" + snapshot_ref + "'");
  }
  if (!weights_committed(**snap)) {
    const json weights = (**snap)["kinds"].value(protocol::kWeightsKind, json(nullptr));
    return field_status(StatusCode::kFailedPrecondition, "snapshot",
                        "snapshot " + *sid +
                            (weights.is_object() ? "'s weights are " + weights.value("state", std::string("gone"))
                                                 : std::string(" holds only training state, which cannot be served")) +
                            "; register a snapshot with weights (ARTIFACTS in trainer runs snapshots RUN)");
  }
  auto run = core_.resolve_run((**snap).value("runId", std::string()), "snapshot");
  if (!run.is_ok()) return run.status();
  std::pair<json, bool> out;
  Status st = core_.store->transaction([&]() -> Status {
    auto r = start_registration_locked(**snap, *run, json(nullptr));
    if (!r.is_ok()) return r.status();
    out = std::move(*r);
    return Status::ok();
  });
  if (!st.is_ok()) return st;
  out.first = present_model(out.first);
  return out;
}

Result<json> ModelRegistry::snapshot_candidate(const std::string& snapshot_ref) {
  auto sid = catalog_.resolve_id(snapshot_ref, "snapshot");
  if (!sid.is_ok()) return sid.status();
  auto m = core_.store->get_trained_model(model_id("snapshot", {*sid}));
  if (!m.is_ok()) return m.status();
  if (!m->has_value()) {
    return field_status(StatusCode::kNotFound, "snapshot",
                        "snapshot " + *sid + " has no registration; register it with: trainer snapshots register " +
                            sid->substr(0, 12));
  }
  const json& doc = **m;
  return json{{"snapshotId", *sid},
              {"modelId", doc["modelId"]},
              {"status", doc["status"]},
              {"failureReason", doc.value("failureReason", json(nullptr))},
              {"statusHistory", doc.value("statusHistory", json::array())},
              {"artifact", doc.value("artifact", json(nullptr))},
              {"workload", doc.value("workload", json(nullptr))}};
}

// The kernel's "registration" kind: PENDING -> COPYING (the copy is long work off the driver) ->
// REGISTERED, or FAILED until it is registered again.
const tasks::PhaseTable& registration_phase_table() {
  static const tasks::PhaseTable table = *tasks::PhaseTable::make(
      "registration", {{kModelPending}, {kModelCopying}, {kModelRegistered, true}, {kModelFailed, false, false, true}},
      {{kModelPending, {kModelCopying, kModelFailed}},
       {kModelCopying, {kModelRegistered, kModelFailed}},
       {kModelFailed, {kModelPending}}});
  return table;
}

ModelRegistry::ModelRegistry(ServiceCore& core, BaseModels& base_models, Workloads& workloads,
                             SnapshotCatalog& catalog)
    : core_(core),
      base_models_(base_models),
      workloads_(workloads),
      catalog_(catalog),
      tasks_(registration_phase_table(), [this](tasks::Step& s) { return step_task(s); }) {}

// Registrations a trainerd before the task kernel left PENDING or COPYING get their task.
Status ModelRegistry::resume() {
  auto open = core_.store->list_trained_models("", "", {kModelPending, kModelCopying});
  if (!open.is_ok()) return open.status();
  std::lock_guard<std::mutex> lock(core_.mu);
  for (auto it = open->rbegin(); it != open->rend(); ++it) {  // oldest first
    const std::string id = it->value("modelId", std::string());
    TRAINER_ASSIGN_OR_RETURN(std::optional<store::TaskRow> task, core_.store->get_task("registration", id));
    if (!task) TRAINER_RETURN_IF_ERROR(core_.kernel->create("registration", id, it->value("status", std::string())));
  }
  return Status::ok();
}

Status ModelRegistry::step_task(tasks::Step& step) {
  const std::string id = step.task().id;
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_trained_model(id));
  if (!stored) return internal_error("registration " + id + " has a task but no model in the registry");
  json model = std::move(*stored);
  if (auto outcome = step.take_outcome()) {
    const Status copied = outcome->status();
    TRAINER_RETURN_IF_ERROR(record_registration_locked(model, copied));
    core_.notify();
    return core_.kernel->move("registration", id, copied.is_ok() ? kModelRegistered : kModelFailed);
  }
  if (step.working()) return Status::ok();
  if (model.value("status", std::string()) == kModelPending) {
    set_status(model, kModelCopying, core_.now_rfc3339());
    TRAINER_RETURN_IF_ERROR(core_.store->update_trained_model(model));
    TRAINER_RETURN_IF_ERROR(core_.kernel->move("registration", id, kModelCopying));
    core_.notify();
  }
  step.launch([this, model]() -> Result<json> {
    TRAINER_RETURN_IF_ERROR(copy_registration(model));
    return json::object();
  });
  return Status::ok();
}

// The copy, off the driver: every payload file of the weights, checked against its manifest.
Status ModelRegistry::copy_registration(const json& model) {
  const std::string id = model.value("modelId", std::string());
  const json source = model.value("source", json::object());
  const std::string sid = source.value("snapshotId", std::string());
  const std::string key = model_key(id);
  auto copy_folder = [&]() -> Status {
    const std::string path = source.value("path", std::string());
    Status published = core_.artifacts().publish_new(path, key);
    if (published.code() != StatusCode::kAlreadyExists) return published;
    // A copy made before a restart: it must hold the folder's files.
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file()) continue;
      auto mine = read_file(it->path().string());
      auto theirs = core_.artifacts().get(key + "/" + fs::relative(it->path(), path).generic_string());
      if (!mine.is_ok() || !theirs.is_ok() || *mine != *theirs) {
        return internal_error("the registry already holds a different copy under " + key);
      }
    }
    return ec ? internal_error("cannot read " + path + ": " + ec.message()) : Status::ok();
  };
  auto copy = [&]() -> Status {
    if (sid.empty()) return copy_folder();
    const std::string from = protocol::snapshot_key(sid, protocol::kWeightsKind);
    auto text = core_.artifacts().get(from + "/" + protocol::kManifestFile);
    if (!text.is_ok()) return text.status().with_context("reading the weights' manifest of snapshot " + sid);
    auto manifest = protocol::parse_manifest(*text);
    if (!manifest.is_ok()) return manifest.status().with_context("the weights' manifest of snapshot " + sid);
    const fs::path staging = fs::path(core_.options.data_dir) / "registry-staging" / (id + "-" + random_hex(8));
    StagingFolder cleanup(staging);
    for (const auto& f : manifest->files) {
      auto bytes = core_.artifacts().get(from + "/" + f.path);
      if (!bytes.is_ok()) return bytes.status().with_context("reading " + f.path + " of snapshot " + sid);
      if (sha256_hex(*bytes) != f.sha256) return internal_error(f.path + " of snapshot " + sid + " fails its digest");
      std::error_code ec;
      fs::create_directories((staging / "adapter" / f.path).parent_path(), ec);
      TRAINER_RETURN_IF_ERROR(write_file_atomic((staging / "adapter" / f.path).string(), *bytes));
    }
    Status published = core_.artifacts().publish_new((staging / "adapter").string(), key);
    if (published.code() != StatusCode::kAlreadyExists) return published;
    // A copy made before a restart: it must hold exactly the manifest's files.
    for (const auto& f : manifest->files) {
      auto bytes = core_.artifacts().get(key + "/" + f.path);
      if (!bytes.is_ok() || sha256_hex(*bytes) != f.sha256) {
        return internal_error("the registry already holds a different copy under " + key);
      }
    }
    return Status::ok();
  };
  Status copied = copy();
  registration_attempt(tel::ServiceStage::kExport, copied.is_ok() ? tel::ServiceOutcome::kSuccess : tel::ServiceOutcome::kFailure,
                       copied.is_ok() ? std::nullopt : std::optional(tel::ServiceFailureReason::kExport));
  const auto pause = core_.options.registration_pause;
  if (copied.is_ok() && pause.count() > 0) std::this_thread::sleep_for(pause);
  return copied;
}

// What the copy came to, recorded on the model (mu_ held, inside the step's transaction).
Status ModelRegistry::record_registration_locked(json model, const Status& copied) {
  const std::string id = model.value("modelId", std::string());
  const json source = model.value("source", json::object());
  const std::string sid = source.value("snapshotId", std::string());
  const std::string key = model_key(id);
  const std::string t = core_.now_rfc3339();
  const double accepted = model.value("_acceptedAt", core_.now());
  if (!copied.is_ok()) {
    // The hold stays: `snapshots release` drops it once someone has looked.
    model["failureReason"] = "copying the weights of " + (sid.empty() ? source.value("path", std::string()) : "snapshot " + sid) +
                             " failed: " + copied.message();
    set_status(model, kModelFailed, t);
    TRAINER_RETURN_IF_ERROR(core_.store->update_trained_model(model));
    std::fprintf(stderr, "trainerd: warning: registration of model %s failed: %s\n", id.c_str(),
                 model["failureReason"].get<std::string>().c_str());
    core_.metrics.operation_ended(tel::ServiceOperation::kRegisterCandidate, tel::ServiceOutcome::kFailure,
                                  core_.now() - accepted, tel::ServiceFailureReason::kExport);
    return Status::ok();
  }
  const std::string uri = core_.artifact_uri(key);
  model["artifact"] = {{"key", key}, {"uri", uri}};
  model["servingModel"]["ref"] = uri;
  model["registeredAt"] = t;
  if (auto run = core_.store->get_run(source.value("runId", std::string())); run.is_ok() && run->has_value()) {
    model["cost"] = model_cost_json(**run);
  }
  set_status(model, kModelRegistered, t);
  TRAINER_RETURN_IF_ERROR(core_.store->update_trained_model(model));
  registration_attempt(tel::ServiceStage::kRegister, tel::ServiceOutcome::kSuccess);
  core_.metrics.operation_ended(tel::ServiceOperation::kRegisterCandidate, tel::ServiceOutcome::kSuccess,
                                core_.now() - accepted);
  if (sid.empty()) return Status::ok();
  auto snap = core_.store->get_snapshot(sid);
  if (!snap.is_ok()) return snap.status();
  if (snap->has_value()) {
    json s = std::move(**snap);
    drop_registration_hold(s, id);
    TRAINER_RETURN_IF_ERROR(core_.store->update_snapshot(s));
    registration_attempt(tel::ServiceStage::kRelease, tel::ServiceOutcome::kSuccess);
  }
  return Status::ok();
}

}  // namespace trainer::service

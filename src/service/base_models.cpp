// Base models: the deployment's allowed list, selection, and preparation into the model cache
// (hash the folder, publish a copy under models/HASH through Storage).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/model_architectures.h"
#include "common/sha256.h"
#include "service/base_models.h"
#include "service/trainable_models.h"
#include "storage/content_hash.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

}  // namespace

Status check_trainable_model(const std::string& name, const std::string& folder, const std::string& field) {
  Status st = check_trainable_folder(folder, "base model '" + name + "'");
  if (st.is_ok()) return st;
  return field_status(StatusCode::kFailedPrecondition, field,
                      st.message() + "; choose a model of a supported architecture (trainer base-models list --all)");
}

BaseModels::BaseModels(ServiceCore& core)
    : core_(core), tasks_(base_model_phase_table(), [this](tasks::Step& s) { return step_task(s); }) {}

Result<json> BaseModels::list(bool all) {
  auto rows = core_.store->list_base_models();
  if (!rows.is_ok()) return rows.status();
  json out = json::array();
  std::set<std::string> selected;
  for (const auto& m : *rows) {
    selected.insert(m.value("name", std::string()));
    out.push_back(present(m));
  }
  if (all) {
    for (const auto& a : core_.options.config.base_models) {
      if (selected.count(a.name)) continue;
      out.push_back({{"name", a.name}, {"id", id_of(a.name)}, {"status", "allowed"}, {"path", a.path}});
    }
  }
  return json{{"baseModels", out}};
}

Result<json> BaseModels::get(const std::string& ref) {
  auto m = resolve(ref, "name");
  if (!m.is_ok()) return m.status();
  return present(*m);
}

Result<json> BaseModels::select(const std::string& name) {
  const AllowedBaseModel* allowed = find_allowed(name);
  if (!allowed) return field_status(StatusCode::kNotFound, "name", not_allowed_message(name));
  std::lock_guard<std::mutex> lock(core_.mu);
  auto existing = find_selected(allowed->name);
  if (!existing.is_ok()) return existing.status();
  if (existing->has_value() && (**existing)["status"] != "failed") return present(**existing);
  std::error_code ec;
  if (!fs::is_directory(allowed->path, ec)) {
    return field_status(StatusCode::kFailedPrecondition, "name",
                        "the folder of base model '" + allowed->name + "' (" + allowed->path +
                            ") does not exist on this host; ask the operator to fix the deployment configuration");
  }
  // A folder the engine cannot train is refused now, not when a run's job starts.
  TRAINER_RETURN_IF_ERROR(check_trainable_model(allowed->name, allowed->path, "name"));
  json doc = {{"name", allowed->name}, {"id", id_of(allowed->name)}, {"status", "preparing"},
              {"path", allowed->path}, {"selectedAt", core_.now_rfc3339()},       {"contentHash", nullptr},
              {"cacheKey", nullptr}};
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->put_base_model(doc));
    return core_.kernel->enter("base_model", allowed->name, "PREPARING");
  }));
  return doc;
}

std::string BaseModels::id_of(const std::string& name) { return sha256_hex(name).substr(0, 16); }

std::string BaseModels::cache_key(const std::string& content_hash) { return "models/" + content_hash; }

std::string BaseModels::cache_path(const std::string& content_hash) const {
  return content_hash.empty() ? std::string() : core_.storage->local_path(cache_key(content_hash));
}

std::string BaseModels::cache_path_of(const json& model) const {
  const json& hash = model.value("contentHash", json(nullptr));
  return hash.is_string() ? cache_path(hash.get<std::string>()) : std::string();
}

// A document as the API shows it: the storage key of the cache, not a folder of this host (a
// document an older trainerd stored may still name one).
json BaseModels::present(json model) {
  model.erase("cachePath");
  const json& hash = model.value("contentHash", json(nullptr));
  if (hash.is_string() && !model.contains("cacheKey")) model["cacheKey"] = cache_key(hash.get<std::string>());
  return model;
}

const AllowedBaseModel* BaseModels::find_allowed(const std::string& name) const {
  for (const auto& a : core_.options.config.base_models) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string BaseModels::not_allowed_message(const std::string& name) const {
  std::string allowed;
  for (const auto& a : core_.options.config.base_models) allowed += (allowed.empty() ? "" : ", ") + a.name;
  return "'" + name + "' is not one of the deployment's base models (allowed: " +
         (allowed.empty() ? "none configured" : allowed) + ")";
}

Result<std::optional<json>> BaseModels::find_selected(const std::string& name) {
  auto rows = core_.store->list_base_models();
  if (!rows.is_ok()) return rows.status();
  for (const auto& m : *rows) {
    if (m.value("name", std::string()) == name) return std::optional<json>(m);
  }
  return std::optional<json>();
}

// A selected base model by name, id or unique id prefix.
Result<json> BaseModels::resolve(const std::string& ref, const std::string& field) {
  auto rows = core_.store->list_base_models();
  if (!rows.is_ok()) return rows.status();
  std::vector<json> prefixed;
  for (const auto& m : *rows) {
    const std::string id = m.value("id", std::string());
    if (m.value("name", std::string()) == ref || id == ref) return m;
    if (ref.size() >= 4 && is_hex(ref) && id.rfind(ref, 0) == 0) prefixed.push_back(m);
  }
  if (prefixed.size() == 1) return prefixed[0];
  if (prefixed.size() > 1) return invalid_field(field, "'" + ref + "' matches more than one base model id");
  if (find_allowed(ref)) {
    return field_status(StatusCode::kFailedPrecondition, field,
                        "base model '" + ref + "' is allowed but not selected; select it first (trainer base-models select " +
                            ref + ")");
  }
  return field_status(StatusCode::kNotFound, field, not_allowed_message(ref));
}

// The kernel's "base_model" kind: a selected model is prepared (hashed and copied into the
// model cache) by long work off the driver; its step records what the work found.
const tasks::PhaseTable& base_model_phase_table() {
  static const tasks::PhaseTable table = *tasks::PhaseTable::make(
      "base_model", {{"PREPARING"}, {"READY", true}, {"FAILED", false, false, true}},
      {{"PREPARING", {"READY", "FAILED"}}, {"FAILED", {"PREPARING"}}});
  return table;
}

// Models a trainerd before the task kernel left preparing get their task.
Status BaseModels::resume() {
  auto rows = core_.store->list_base_models();
  if (!rows.is_ok()) return rows.status();
  std::lock_guard<std::mutex> lock(core_.mu);
  for (const auto& m : *rows) {
    if (m.value("status", std::string()) != "preparing") continue;
    const std::string name = m.value("name", std::string());
    TRAINER_ASSIGN_OR_RETURN(std::optional<store::TaskRow> task, core_.store->get_task("base_model", name));
    if (!task) TRAINER_RETURN_IF_ERROR(core_.kernel->create("base_model", name, "PREPARING"));
  }
  return Status::ok();
}

Status BaseModels::step_task(tasks::Step& step) {
  const std::string name = step.task().id;
  if (auto outcome = step.take_outcome()) {
    const json changes = outcome->is_ok() ? **outcome : json{{"status", "failed"}, {"failure", outcome->status().message()}};
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> current, find_selected(name));
    if (current) {
      current->update(changes);
      TRAINER_RETURN_IF_ERROR(core_.store->put_base_model(*current));
      core_.notify();
    }
    return core_.kernel->move("base_model", name, changes.value("status", std::string()) == "ready" ? "READY" : "FAILED");
  }
  if (!step.working()) step.launch([this, name] { return prepare(name); });
  return Status::ok();
}

// Hashes the folder's files, then publishes a copy into the model cache under that hash. Returns
// the changes to the model's document: ready with its hash and cache path, or failed and why.
Result<json> BaseModels::prepare(const std::string& name) {
  const AllowedBaseModel* allowed = find_allowed(name);
  if (!allowed) return json{{"status", "failed"}, {"failure", "no longer in the deployment configuration"}};
  auto hashed = storage::folder_content_hash(allowed->path);
  if (!hashed.is_ok()) return json{{"status", "failed"}, {"failure", hashed.status().message()}};
  const std::string hash = hashed->sha256;
  const std::string key = cache_key(hash);
  auto cached = core_.storage->exists(key);
  if (!cached.is_ok()) {
    return json{{"status", "failed"}, {"failure", "reading the model cache: " + cached.status().message()}};
  }
  if (!*cached) {
    Status st = core_.storage->publish(allowed->path, key);
    if (!st.is_ok()) return json{{"status", "failed"}, {"failure", "copying into the model cache: " + st.message()}};
  }
  return json{{"status", "ready"},
              {"contentHash", hash},
              {"sizeBytes", hashed->bytes},
              {"cacheKey", key},
              {"readyAt", core_.now_rfc3339()}};
}

}  // namespace trainer::service

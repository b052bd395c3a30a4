// Base models: the deployment's allowed list, selection, and preparation into the model cache
// (hash the folder, publish a copy under models/HASH through Storage).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/sha256.h"
#include "service/service_state.h"
#include "storage/content_hash.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

}  // namespace

Result<json> ServiceImpl::list_base_models(bool all) {
  auto rows = store_->list_base_models();
  if (!rows.is_ok()) return rows.status();
  json out = json::array();
  std::set<std::string> selected;
  for (const auto& m : *rows) {
    selected.insert(m.value("name", std::string()));
    out.push_back(m);
  }
  if (all) {
    for (const auto& a : opt_.config.base_models) {
      if (selected.count(a.name)) continue;
      out.push_back({{"name", a.name}, {"id", base_model_id(a.name)}, {"status", "allowed"}, {"path", a.path}});
    }
  }
  return json{{"baseModels", out}};
}

Result<json> ServiceImpl::get_base_model(const std::string& ref) { return resolve_base_model(ref, "name"); }

Result<json> ServiceImpl::select_base_model(const std::string& name) {
  const AllowedBaseModel* allowed = find_allowed(name);
  if (!allowed) return field_status(StatusCode::kNotFound, "name", not_allowed_message(name));
  std::lock_guard<std::mutex> lock(mu_);
  auto existing = find_selected(allowed->name);
  if (!existing.is_ok()) return existing.status();
  if (existing->has_value() && (**existing)["status"] != "failed") return **existing;
  std::error_code ec;
  if (!fs::is_directory(allowed->path, ec)) {
    return field_status(StatusCode::kFailedPrecondition, "name",
                        "the folder of base model '" + allowed->name + "' (" + allowed->path +
                            ") does not exist on this host; ask the operator to fix the deployment configuration");
  }
  json doc = {{"name", allowed->name}, {"id", base_model_id(allowed->name)}, {"status", "preparing"},
              {"path", allowed->path}, {"selectedAt", now_rfc3339()},       {"contentHash", nullptr},
              {"cachePath", nullptr}};
  TRAINER_RETURN_IF_ERROR(store_->put_base_model(doc));
  start_preparation(allowed->name);
  return doc;
}

std::string ServiceImpl::base_model_id(const std::string& name) { return sha256_hex(name).substr(0, 16); }

const AllowedBaseModel* ServiceImpl::find_allowed(const std::string& name) const {
  for (const auto& a : opt_.config.base_models) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string ServiceImpl::not_allowed_message(const std::string& name) const {
  std::string allowed;
  for (const auto& a : opt_.config.base_models) allowed += (allowed.empty() ? "" : ", ") + a.name;
  return "'" + name + "' is not one of the deployment's base models (allowed: " +
         (allowed.empty() ? "none configured" : allowed) + ")";
}

Result<std::optional<json>> ServiceImpl::find_selected(const std::string& name) {
  auto rows = store_->list_base_models();
  if (!rows.is_ok()) return rows.status();
  for (const auto& m : *rows) {
    if (m.value("name", std::string()) == name) return std::optional<json>(m);
  }
  return std::optional<json>();
}

// A selected base model by name, id or unique id prefix.
Result<json> ServiceImpl::resolve_base_model(const std::string& ref, const std::string& field) {
  auto rows = store_->list_base_models();
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

Status ServiceImpl::resume_base_models() {
  auto rows = store_->list_base_models();
  if (!rows.is_ok()) return rows.status();
  for (const auto& m : *rows) {
    if (m.value("status", std::string()) == "preparing") start_preparation(m.value("name", std::string()));
  }
  return Status::ok();
}

void ServiceImpl::start_preparation(const std::string& name) {
  std::lock_guard<std::mutex> lock(prep_mu_);
  // Nothing escapes the thread: an exception is logged and counted, and the model stays preparing
  // until the next start resumes it.
  preparers_.emplace_back([this, name] {
    try {
      prepare_base_model(name);
    } catch (const std::exception& e) {
      ++driver_errors_;
      std::fprintf(stderr, "trainerd: warning: preparing base model %s: %s\n", name.c_str(), e.what());
    }
  });
}

// Hashes the folder's files, then publishes a copy into the model cache under that hash.
void ServiceImpl::prepare_base_model(const std::string& name) {
  const AllowedBaseModel* allowed = find_allowed(name);
  auto finish = [&](const json& changes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto current = find_selected(name);
    if (!current.is_ok() || !current->has_value()) return;
    json doc = **current;
    doc.update(changes);
    (void)store_->put_base_model(doc);
    notify();
  };
  if (!allowed) {
    finish({{"status", "failed"}, {"failure", "no longer in the deployment configuration"}});
    return;
  }
  auto hashed = storage::folder_content_hash(allowed->path);
  if (!hashed.is_ok()) {
    finish({{"status", "failed"}, {"failure", hashed.status().message()}});
    return;
  }
  const std::string hash = hashed->sha256;
  const std::string key = "models/" + hash;
  auto cached = storage_->exists(key);
  if (!cached.is_ok()) {
    finish({{"status", "failed"}, {"failure", "reading the model cache: " + cached.status().message()}});
    return;
  }
  if (!*cached) {
    Status st = storage_->publish(allowed->path, key);
    if (!st.is_ok()) {
      finish({{"status", "failed"}, {"failure", "copying into the model cache: " + st.message()}});
      return;
    }
  }
  finish({{"status", "ready"},
          {"contentHash", hash},
          {"sizeBytes", hashed->bytes},
          {"cachePath", storage_->local_path(key)},
          {"readyAt", now_rfc3339()}});
}

}  // namespace trainer::service

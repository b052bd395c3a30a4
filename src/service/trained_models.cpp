// ModelRegistry (model_registry.h): registered models (BASE for baselines, ADAPTER for trained or
// imported LoRA adapters), their listing and lookup, and the import of a PEFT LoRA folder.
//
// Stored document (store.h's trained_models table), as `trained-models get` shows it:
// {modelId, variant: BASE|ADAPTER, method, baseModel: {name, id, contentHash}, workload: {id, name}
// | null, source: {kind: run|snapshot|import|baseModel, runId?, snapshotId?, savedStep?, path?},
// config: {configName, settingsSha} | null, lineage: {baseModel, runId, parentRunId, snapshotId,
// savedStep}, cost: {gpuSeconds}, adapterRank, artifact: {key, uri} | null, servingModel:
// {variant, baseModel, ref}, status: PENDING|COPYING|REGISTERED|FAILED, failureReason,
// statusHistory: [{status, time}], createdAt, registeredAt, evaluations: []}.
#include "service/model_registry.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/path_policy.h"
#include "common/sha256.h"
#include "service/adapter_check.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

std::string file_digest(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return sha256_hex(bytes);
}

// The adapter's folder from `ref`: a path on this host, or a file:// URI of one.
std::string local_folder(const std::string& ref) {
  const std::string scheme = "file://";
  return ref.rfind(scheme, 0) == 0 ? ref.substr(scheme.size()) : ref;
}

// An adapter's recorded base model matches `name` or its folders, by full text or final part.
bool same_base_model(const std::string& recorded, const std::vector<std::string>& known) {
  if (recorded.empty()) return true;
  const std::string tail = fs::path(recorded).filename().string();
  for (const auto& k : known) {
    if (k.empty()) continue;
    if (recorded == k || tail == fs::path(k).filename().string()) return true;
  }
  return false;
}

}  // namespace

json present_model(const json& doc) {
  json out = json::object();
  for (const auto& [k, v] : doc.items()) {
    if (!k.empty() && k[0] != '_') out[k] = v;
  }
  return out;
}

Result<json> ModelRegistry::resolve(const std::string& ref, const std::string& field) {
  if (ref.empty() || !is_hex(ref)) {
    return field_status(StatusCode::kNotFound, field, "no model with id '" + ref + "' (model ids are lowercase hex)");
  }
  auto ids = core_.store->trained_model_ids_with_prefix(ref, 10);
  if (!ids.is_ok()) return ids.status();
  std::string id;
  if (std::find(ids->begin(), ids->end(), ref) != ids->end()) {
    id = ref;
  } else if (ids->size() == 1) {
    id = ids->front();
  } else if (ids->size() > 1) {
    std::string c;
    for (const auto& i : *ids) c += (c.empty() ? "" : ", ") + i;
    return invalid_field(field, "'" + ref + "' is an ambiguous id prefix (candidates: " + c + ")");
  } else {
    return field_status(StatusCode::kNotFound, field,
                        "no model with id '" + ref + "'; list the registry with: trainer trained-models list");
  }
  auto doc = core_.store->get_trained_model(id);
  if (!doc.is_ok()) return doc.status();
  if (!doc->has_value()) return field_status(StatusCode::kNotFound, field, "no model with id '" + ref + "'");
  return **doc;
}

Result<json> ModelRegistry::list(const TrainedModelQuery& query) {
  std::string workload_id;
  if (!query.workload.empty()) {
    auto w = workloads_.resolve(query.workload, "workload");
    if (!w.is_ok()) return w.status();
    workload_id = (*w)["id"].get<std::string>();
  }
  std::string base_name;
  if (!query.base_model.empty()) {
    auto b = base_models_.resolve(query.base_model, "baseModel");
    if (!b.is_ok()) return b.status();
    base_name = (*b)["name"].get<std::string>();
  }
  auto rows = core_.store->list_trained_models(workload_id, base_name, {});
  if (!rows.is_ok()) return rows.status();
  json models = json::array();
  for (const auto& m : *rows) models.push_back(present_model(m));
  return json{{"models", models}};
}

Result<json> ModelRegistry::get(const std::string& ref) {
  auto m = resolve(ref, "model");
  if (!m.is_ok()) return m.status();
  return present_model(*m);
}

Result<json> ModelRegistry::registered_adapter(const std::string& ref) {
  auto m = resolve(ref, "model");
  if (!m.is_ok()) return m.status();
  const std::string id = m->value("modelId", std::string());
  if (m->value("variant", std::string()) == kVariantBase) {
    return field_status(StatusCode::kFailedPrecondition, "model",
                        "model " + id + " is a BASE model: it has no adapter to export or merge; its weights are the "
                        "base model's own folder");
  }
  if (m->value("status", std::string()) != kModelRegistered) {
    return field_status(StatusCode::kFailedPrecondition, "model",
                        "model " + id + " is " + m->value("status", std::string("unknown")) +
                            "; only a REGISTERED model's files can be exported (trainer trained-models get " + id + ")");
  }
  return *m;
}

Result<std::string> ModelRegistry::file(const std::string& ref, const std::string& name) {
  auto m = resolve(ref, "model");
  if (!m.is_ok()) return m.status();
  const std::string id = m->value("modelId", std::string());
  if (name != "adapter_config.json" && name != "adapter_model.safetensors") {
    return field_status(StatusCode::kNotFound, "file",
                        "model " + id + " has no file '" + name + "' (an adapter's folder holds adapter_config.json "
                        "and adapter_model.safetensors)");
  }
  m = registered_adapter(id);
  if (!m.is_ok()) return m.status();
  const json artifact = m->value("artifact", json::object());
  const json key = artifact.is_object() ? artifact.value("key", json(nullptr)) : json(nullptr);
  if (!key.is_string()) return internal_error("model " + id + " is REGISTERED but names no artifact key");
  auto bytes = core_.artifacts().get(key.get<std::string>() + "/" + name);
  if (!bytes.is_ok()) {
    return Status(bytes.status().code(), "model", "model " + id + ": " + name + ": " + bytes.status().message());
  }
  return *bytes;
}

Result<json> ModelRegistry::register_base_locked(const json& base_model, const std::string& field) {
  if (base_model.value("status", std::string()) != "ready") {
    const std::string name = base_model.value("name", std::string());
    return field_status(StatusCode::kFailedPrecondition, field,
                        "base model '" + name + "' is " + base_model.value("status", std::string("not selected")) +
                            "; wait until it is ready (trainer base-models select " + name + " --wait)");
  }
  const std::string hash = base_model.value("contentHash", std::string());
  const std::string id = model_id("baseModel", {base_model.value("name", std::string()), hash});
  auto existing = core_.store->get_trained_model(id);
  if (!existing.is_ok()) return existing.status();
  if (existing->has_value()) return **existing;
  const std::string t = core_.now_rfc3339();
  const json base = {{"name", base_model["name"]}, {"id", base_model["id"]}, {"contentHash", hash}};
  json doc = {{"modelId", id},
              {"variant", kVariantBase},
              {"method", nullptr},
              {"baseModel", base},
              {"workload", nullptr},
              {"source", {{"kind", "baseModel"}, {"revision", hash}}},
              {"config", nullptr},
              {"lineage", {{"baseModel", base}}},
              {"cost", {{"deviceKind", nullptr}, {"deviceSeconds", 0}, {"gpuSeconds", 0}}},
              {"adapterRank", nullptr},
              {"artifact", {{"key", nullptr}, {"uri", "file://" + base_models_.cache_path_of(base_model)}}},
              {"servingModel", {{"variant", kVariantBase}, {"baseModel", base_model["name"]}, {"revision", hash}}},
              {"status", kModelRegistered},
              {"failureReason", nullptr},
              {"statusHistory", json::array({{{"status", kModelRegistered}, {"time", t}}})},
              {"createdAt", t},
              {"registeredAt", t},
              {"evaluations", json::array()}};
  TRAINER_RETURN_IF_ERROR(core_.store->insert_trained_model(doc));
  return doc;
}

Result<std::pair<json, bool>> ModelRegistry::register_model(const json& descriptor) {
  TRAINER_RETURN_IF_ERROR(check_fields(descriptor, {"servingModel", "workload", "description"}));
  if (!descriptor.contains("servingModel") || !descriptor["servingModel"].is_object()) {
    return invalid_field("servingModel", "required: {variant: BASE|ADAPTER, baseModel, ...}");
  }
  const json& sm = descriptor["servingModel"];
  if (Status st = check_fields(sm, {"variant", "baseModel", "revision", "adapterRank", "ref"}); !st.is_ok()) {
    return st.with_field("servingModel");
  }
  auto variant = optional_string(sm, "variant");
  if (!variant.is_ok()) return variant.status().with_field("servingModel");
  if (!*variant || (**variant != kVariantBase && **variant != kVariantAdapter)) {
    return invalid_field("servingModel.variant", "'" + variant->value_or("") + "' is not a variant; use BASE or ADAPTER");
  }
  auto base_name = optional_string(sm, "baseModel");
  if (!base_name.is_ok()) return base_name.status().with_field("servingModel");
  if (!*base_name) return invalid_field("servingModel.baseModel", "required: one of the deployment's base models");
  const AllowedBaseModel* allowed = base_models_.find_allowed(**base_name);
  if (!allowed) return invalid_field("servingModel.baseModel", base_models_.not_allowed_message(**base_name));
  auto description = optional_string(descriptor, "description");
  if (!description.is_ok()) return description.status();
  auto workload_ref = optional_string(descriptor, "workload");
  if (!workload_ref.is_ok()) return workload_ref.status();
  if (**variant == kVariantBase) {
    if (*workload_ref) return invalid_field("workload", "a BASE model belongs to no workload; leave it out");
    return register_base_descriptor(sm, *allowed);
  }
  return import_adapter(sm, *allowed, description->value_or(""), *workload_ref);
}

Result<std::pair<json, bool>> ModelRegistry::register_base_descriptor(const json& sm, const AllowedBaseModel& allowed) {
  for (const char* f : {"adapterRank", "ref"}) {
    if (sm.contains(f)) return invalid_field(std::string("servingModel.") + f, "applies to ADAPTER models only");
  }
  std::lock_guard<std::mutex> lock(core_.mu);
  auto base = base_models_.resolve(allowed.name, "servingModel.baseModel");
  if (!base.is_ok()) {
    return field_status(StatusCode::kFailedPrecondition, "servingModel.baseModel",
                        "base model '" + allowed.name + "' is not selected; select it first (trainer base-models select " +
                            allowed.name + " --wait)");
  }
  auto revision = optional_string(sm, "revision");
  if (!revision.is_ok()) return revision.status().with_field("servingModel");
  const std::string hash = base->value("contentHash", json("")).is_string() ? (*base)["contentHash"].get<std::string>() : "";
  if (*revision && (revision->value().empty() || hash.rfind(**revision, 0) != 0)) {
    return invalid_field("servingModel.revision", "'" + **revision + "' is not the selected revision of '" +
                                                      allowed.name + "' (" + hash + ")");
  }
  auto id_before = core_.store->get_trained_model(model_id("baseModel", {allowed.name, hash}));
  if (!id_before.is_ok()) return id_before.status();
  auto doc = register_base_locked(*base, "servingModel.baseModel");
  if (!doc.is_ok()) return doc.status();
  return std::make_pair(present_model(*doc), !id_before->has_value());
}

Status ModelRegistry::publish_imported_adapter(const std::string& dir, const std::string& cache,
                                               const std::string& base_name, const std::string& id,
                                               const std::string& key) {
  const fs::path staging = fs::path(core_.options.data_dir) / "registry-staging" / (id + "-" + random_hex(8));
  std::error_code ec;
  fs::create_directories(staging / "adapter", ec);
  if (ec) return unavailable("cannot create " + staging.string() + ": " + ec.message());
  StagingFolder cleanup(staging);
  TRAINER_RETURN_IF_ERROR(write_file_atomic(
      (staging / "probe.jsonl").string(),
      R"({"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"ok"}]})" "\n"));
  auto loaded = core_.backend->run_tool({"score", "--model", cache, "--adapter", dir, "--data",
                                         (staging / "probe.jsonl").string(), "--max-seq-length", "64"},
                                        kAdapterLoadTimeoutSeconds);
  if (!loaded.is_ok()) {
    return invalid_field("servingModel.ref", "the adapter does not load on '" + base_name + "': " +
                                                 loaded.status().message());
  }
  for (const char* f : {kAdapterConfigFile, kAdapterWeightsFile}) {
    fs::copy_file(fs::path(dir) / f, staging / "adapter" / f, ec);
    if (ec) return unavailable("cannot copy " + (fs::path(dir) / f).string() + ": " + ec.message());
  }
  Status published = core_.artifacts().publish_new((staging / "adapter").string(), key);
  if (!published.is_ok() && published.code() != StatusCode::kAlreadyExists) return published;  // same id, same bytes
  return Status::ok();
}

Result<std::pair<json, bool>> ModelRegistry::import_adapter(const json& sm, const AllowedBaseModel& allowed,
                                                            const std::string& description,
                                                            const std::optional<std::string>& workload_ref) {
  if (sm.contains("revision")) return invalid_field("servingModel.revision", "applies to BASE models only");
  auto ref = optional_string(sm, "ref");
  if (!ref.is_ok()) return ref.status().with_field("servingModel");
  if (!*ref || ref->value().empty()) return invalid_field("servingModel.ref", "required: the adapter folder to import");
  const std::string dir = local_folder(**ref);
  // Within the folders requests may name (paths.allow): never a run's folder of this trainerd.
  TRAINER_RETURN_IF_ERROR(check_confined_path(core_.options.config.paths, dir, "servingModel.ref", PathKind::kFolder));
  json base;
  json workload = nullptr;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    auto b = base_models_.resolve(allowed.name, "servingModel.baseModel");
    if (!b.is_ok() || (*b).value("status", std::string()) != "ready") {
      return field_status(StatusCode::kFailedPrecondition, "servingModel.baseModel",
                          "base model '" + allowed.name + "' is not selected and ready; select it first "
                          "(trainer base-models select " + allowed.name + " --wait)");
    }
    base = *b;
    if (workload_ref) {
      auto w = workloads_.resolve(*workload_ref, "workload");
      if (!w.is_ok()) return w.status();
      workload = {{"id", (*w)["id"]}, {"name", (*w)["name"]}};
    }
  }
  const std::string cache = base_models_.cache_path_of(base);
  auto info = check_peft_adapter(dir, cache, core_.options.config.limits.max_adapter_rank, "servingModel.ref");
  if (!info.is_ok()) return info.status();
  // Its files too: a link inside an allowed folder may lead to another run's weights.
  for (const char* file : {kAdapterConfigFile, kAdapterWeightsFile}) {
    TRAINER_RETURN_IF_ERROR(check_confined_path(core_.options.config.paths, (fs::path(dir) / file).string(),
                                                "servingModel.ref", PathKind::kFile));
  }
  if (!same_base_model(info->base_model_name_or_path, {allowed.name, allowed.path, cache})) {
    return invalid_field("servingModel.baseModel", "the adapter was trained on '" + info->base_model_name_or_path +
                                                       "' (adapter_config.json base_model_name_or_path), not on '" +
                                                       allowed.name + "'");
  }
  if (sm.contains("adapterRank") &&
      (!sm["adapterRank"].is_number_integer() || sm["adapterRank"].get<int64_t>() != info->rank)) {
    return invalid_field("servingModel.adapterRank",
                         "is " + sm["adapterRank"].dump() + " but the adapter's rank r is " + std::to_string(info->rank));
  }
  const std::string config_digest = file_digest(fs::path(dir) / kAdapterConfigFile);
  const std::string weights_digest = file_digest(fs::path(dir) / kAdapterWeightsFile);
  const std::string id = model_id("import", {allowed.name, base.value("contentHash", std::string()),
                                             workload.is_object() ? workload["id"].get<std::string>() : "",
                                             config_digest, weights_digest});
  {
    auto existing = core_.store->get_trained_model(id);
    if (!existing.is_ok()) return existing.status();
    if (existing->has_value()) return std::make_pair(present_model(**existing), false);
  }
  const std::string key = model_key(id);
  TRAINER_RETURN_IF_ERROR(publish_imported_adapter(dir, cache, allowed.name, id, key));

  std::lock_guard<std::mutex> lock(core_.mu);
  auto existing = core_.store->get_trained_model(id);
  if (!existing.is_ok()) return existing.status();
  if (existing->has_value()) return std::make_pair(present_model(**existing), false);
  const std::string t = core_.now_rfc3339();
  const json base_ref = {{"name", base["name"]}, {"id", base["id"]}, {"contentHash", base["contentHash"]}};
  const std::string uri = core_.artifact_uri(key);
  json doc = {{"modelId", id},
              {"variant", kVariantAdapter},
              {"method", nullptr},
              {"baseModel", base_ref},
              {"workload", workload},
              {"description", description},
              {"source", {{"kind", "import"}, {"path", dir}, {"configDigest", config_digest},
                          {"weightsDigest", weights_digest}}},
              {"config", nullptr},
              {"lineage", {{"baseModel", base_ref}, {"importedFrom", dir}}},
              {"cost", {{"deviceKind", nullptr}, {"deviceSeconds", 0}, {"gpuSeconds", 0}}},
              {"adapterRank", info->rank},
              {"targetModules", info->target_modules},
              {"artifact", {{"key", key}, {"uri", uri}}},
              {"servingModel", {{"variant", kVariantAdapter}, {"baseModel", base["name"]}, {"adapterRank", info->rank},
                                {"ref", uri}}},
              {"status", kModelRegistered},
              {"failureReason", nullptr},
              {"statusHistory", json::array({{{"status", kModelRegistered}, {"time", t}}})},
              {"createdAt", t},
              {"registeredAt", t},
              {"evaluations", json::array()}};
  TRAINER_RETURN_IF_ERROR(core_.store->insert_trained_model(doc));
  return std::make_pair(present_model(doc), true);
}

}  // namespace trainer::service

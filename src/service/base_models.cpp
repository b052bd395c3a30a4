// Base models: the deployment's allowed list, selection, and preparation into the model cache
// (hash the folder, publish a copy under models/HASH through Storage).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

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
  json shown = present(*m);
  // The run shapes this deployment admits for it; an empty list with anyShape: every shape.
  const AllowedBaseModel* allowed = find_allowed(shown.value("name", std::string()));
  shown["admittedShapes"] = allowed ? shapes_to_json(allowed->shapes) : json::array();
  shown["anyShape"] = allowed && allowed->shapes.empty();
  shown["shapeCatalog"] = shape_catalog_name(core_.options.config.shape_catalog);
  return shown;
}

namespace {

std::string shape_text(const AdmittedShape& s) {
  return s.method + ", " + s.precision + ", " + std::to_string(s.gpus) + (s.gpus == 1 ? " gpu" : " gpus");
}

// How far `row` is from `want`: the fields that differ (method before precision before GPU count),
// then how many GPUs apart.
std::pair<int, int> shape_distance(const AdmittedShape& row, const AdmittedShape& want) {
  const int differing = (row.method != want.method ? 4 : 0) + (row.precision != want.precision ? 2 : 0) +
                        (row.gpus != want.gpus ? 1 : 0);
  return {differing, std::abs(row.gpus - want.gpus)};
}

}  // namespace

Status BaseModels::check_shape(const std::string& name, const AdmittedShape& shape, json& warnings) const {
  const AllowedBaseModel* allowed = find_allowed(name);
  if (!allowed || allowed->shapes.empty()) return Status::ok();
  const AdmittedShape* nearest = nullptr;
  for (const auto& row : allowed->shapes) {
    if (row.method == shape.method && row.precision == shape.precision && row.gpus == shape.gpus) return Status::ok();
    if (!nearest || shape_distance(row, shape) < shape_distance(*nearest, shape)) nearest = &row;
  }
  // The field to change first: the first that differs, in the order the distance weighs them.
  std::string field, change;
  if (nearest->method != shape.method) {
    field = "config.method", change = "method " + nearest->method;
  } else if (nearest->precision != shape.precision) {
    field = "config.model.precision", change = "precision " + nearest->precision;
  } else {
    field = "execution.gpus", change = "gpus " + std::to_string(nearest->gpus);
  }
  std::string rows;
  for (const auto& row : allowed->shapes) rows += (rows.empty() ? "" : "; ") + shape_text(row);
  const std::string message = "base model '" + name + "' is not admitted in the shape (" + shape_text(shape) +
                              ") on this deployment; the nearest admitted shape is (" + shape_text(*nearest) +
                              "): use " + change + " (admitted: " + rows + "; trainer base-models get " + name + ")";
  if (core_.options.config.shape_catalog == ShapeCatalog::kAdvisory) {
    warnings.push_back({{"field", field}, {"message", message + "; admitted anyway: the shape catalog is advisory"}});
    return Status::ok();
  }
  return field_status(StatusCode::kFailedPrecondition, field, message);
}

namespace {

constexpr double kBytesPerGib = 1024.0 * 1024.0 * 1024.0;

// One envelope row's measurements, gathered from completed runs.
struct Envelope {
  int runs = 0;
  std::optional<double> peak_device_gb;  // the largest device memory a run's process held at its peak
  std::string peak_run;                  // the run that held it
  std::vector<double> tokens_per_second;
  int max_seq_length = 0;                // the longest config.maxSeqLength measured
};

std::optional<double> number_at(const json& doc, std::initializer_list<const char*> path) {
  const json* at = &doc;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return std::nullopt;
    at = &(*at)[key];
  }
  return at->is_number() ? std::optional<double>(at->get<double>()) : std::nullopt;
}

// The device memory the run's process held at its peak, in GiB: the allocator's reserved peak and
// what lies outside the allocator (as a step's maxDeviceMemoryGb).
std::optional<double> peak_device_gb(const json& view) {
  auto reserved = number_at(view, {"memory", "reservedPeakBytes"});
  if (!reserved) return std::nullopt;
  const double outside = number_at(view, {"memory", "usage", "outsideAllocator"}).value_or(0.0);
  return (*reserved + outside) / kBytesPerGib;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

Result<json> BaseModels::envelopes() {
  // Keyed by (base model, method, precision, gpus), in that order.
  std::map<std::tuple<std::string, std::string, std::string, int>, Envelope> rows;
  for (const auto& m : core_.options.config.base_models) {
    for (const auto& s : m.shapes) rows[{m.name, s.method, s.precision, s.gpus}];
  }
  constexpr int64_t kPage = 500;
  for (int64_t offset = 0;; offset += kPage) {
    store::RunFilter filter;
    filter.phases = {"COMPLETED"};
    filter.limit = kPage;
    filter.offset = offset;
    TRAINER_ASSIGN_OR_RETURN(store::RunPage page, core_.store->list_runs(filter));
    for (const auto& doc : page.runs) {
      auto run = RunRecord::from_json(doc);
      if (!run.is_ok()) continue;  // a document this trainerd cannot read measures nothing
      const json& plan = run->view.value("plan", json::object());
      const json config = plan.value("config", json::object());
      const std::string precision = config.value("model", json::object()).value("precision", std::string("BF16"));
      const int gpus = plan.value("execution", json::object()).value("gpus", 1);
      Envelope& e = rows[{run->base_model, run->method, precision, gpus}];
      ++e.runs;
      if (auto gb = peak_device_gb(run->view); gb && (!e.peak_device_gb || *gb > *e.peak_device_gb)) {
        e.peak_device_gb = *gb;
        e.peak_run = run->id;
      }
      if (auto tps = number_at(run->view, {"latest", "tokensPerSecond"})) e.tokens_per_second.push_back(*tps);
      e.max_seq_length = std::max(e.max_seq_length, config.value("maxSeqLength", 0));
    }
    if (static_cast<int64_t>(page.runs.size()) < kPage) break;
  }
  json measurements = json::array();
  for (const auto& [key, e] : rows) {
    const auto& [model, method, precision, gpus] = key;
    const AllowedBaseModel* allowed = find_allowed(model);
    bool admitted = allowed && allowed->shapes.empty();
    if (allowed) {
      for (const auto& s : allowed->shapes) {
        admitted = admitted || (s.method == method && s.precision == precision && s.gpus == gpus);
      }
    }
    json row = {{"baseModel", model}, {"method", method}, {"precision", precision}, {"gpus", gpus},
                {"admitted", admitted}, {"runs", e.runs}};
    row["peakDeviceMemoryGb"] = e.peak_device_gb ? json(*e.peak_device_gb) : json(nullptr);
    row["peakRunId"] = e.peak_run.empty() ? json(nullptr) : json(e.peak_run);
    if (e.tokens_per_second.empty()) {
      row["tokensPerSecond"] = nullptr;
    } else {
      row["tokensPerSecond"] = {
          {"min", *std::min_element(e.tokens_per_second.begin(), e.tokens_per_second.end())},
          {"median", median(e.tokens_per_second)},
          {"max", *std::max_element(e.tokens_per_second.begin(), e.tokens_per_second.end())}};
    }
    row["maxSeqLength"] = e.max_seq_length > 0 ? json(e.max_seq_length) : json(nullptr);
    measurements.push_back(std::move(row));
  }
  return json{{"catalog", shape_catalog_name(core_.options.config.shape_catalog)}, {"measurements", measurements}};
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

// Datasets: content-addressed JSONL rows (validated by dataset/validator.h), movable names.
#include <chrono>
#include <regex>

#include "common/json_parse.h"
#include "common/sha256.h"
#include "dataset/validator.h"
#include "service/datasets.h"

namespace trainer::service {
namespace {

const std::regex kDatasetName("^[a-z0-9][a-z0-9._-]{0,127}$");
const std::regex kLooksLikeId("^[0-9a-f]{8,}$");

Status check_dataset_name(const std::string& name, const std::string& field = "name") {
  if (!std::regex_match(name, kDatasetName) || name.find("..") != std::string::npos) {
    return invalid_field(field, "'" + name +
                                     "' is not a valid dataset name: use 1-128 of a-z, 0-9, '.', '_' and '-', "
                                     "starting with a letter or digit, without '..'");
  }
  if (std::regex_match(name, kLooksLikeId)) {
    return invalid_field(field, "'" + name + "' looks like a content hash; choose a name that does not");
  }
  return Status::ok();
}

}  // namespace

Status Datasets::check_name(const std::string& name, const std::string& field) {
  return check_dataset_name(name, field);
}

std::string Datasets::key_of(const std::string& hash) { return "datasets/" + hash + ".jsonl"; }

std::string Datasets::local_path(const json& dataset) const {
  return core_.storage->local_path(key_of(dataset.value("hash", std::string())));
}

Result<std::pair<json, bool>> Datasets::register_rows(const std::optional<std::string>& name,
                                                            const std::string& rows, const StorageOwner* owner) {
  if (name) TRAINER_RETURN_IF_ERROR(check_dataset_name(*name));
  dataset::Validation checked = dataset::validate_jsonl(rows);
  if (!checked.ok()) return checked.status("rows");
  std::string text;
  for (const auto& r : checked.rows) text += r + "\n";
  const std::string hash = sha256_hex(text);
  const std::string key = key_of(hash);
  std::lock_guard<std::mutex> lock(core_.mu);
  auto existing = core_.store->get_dataset(hash);
  if (!existing.is_ok()) return existing.status();
  if (!existing->has_value()) {
    // New bytes: within their owner's storage quota, else nothing is stored.
    if (owner) {
      TRAINER_RETURN_IF_ERROR(check_storage_quota(*core_.store, *owner, static_cast<int64_t>(text.size()),
                                                  "this dataset", "rows"));
    }
    // The bytes first: a committed row always has its file.
    TRAINER_RETURN_IF_ERROR(core_.storage->put(key, text));
  }
  std::optional<std::string> moved_from;
  if (name) {
    auto before = core_.store->get_alias(*name);
    if (!before.is_ok()) return before.status();
    if (before->has_value() && **before != hash) moved_from = **before;
  }
  bool created = false;
  json doc = {{"hash", hash},
              {"rows", static_cast<int64_t>(checked.rows.size())},
              {"bytes", static_cast<int64_t>(text.size())},
              {"createdAt", core_.now_rfc3339()},
              {"key", key}};
  if (owner) doc["owner"] = owner_json(*owner);
  Status st = core_.store->transaction([&]() -> Status {
    auto ins = core_.store->insert_dataset(doc);
    if (!ins.is_ok()) return ins.status();
    created = *ins;
    if (name) TRAINER_RETURN_IF_ERROR(core_.store->set_alias(*name, hash));
    return Status::ok();
  });
  if (!st.is_ok()) {
    // Not registered (the store refused: its disk may be full): its bytes go too, unless an
    // earlier registration owns them.
    if (!existing->has_value()) (void)core_.storage->remove(key);
    return st;
  }
  auto stored = core_.store->get_dataset(hash);
  if (!stored.is_ok()) return stored.status();
  if (!stored->has_value()) return internal_error("dataset " + hash + " vanished after it was registered");
  auto out = present(**stored);
  if (!out.is_ok()) return out.status();
  if (moved_from) (*out)["movedFrom"] = *moved_from;
  return std::make_pair(*out, created);
}

Result<json> Datasets::name(const std::string& name, const std::string& ref) {
  TRAINER_RETURN_IF_ERROR(check_dataset_name(name));
  std::lock_guard<std::mutex> lock(core_.mu);
  auto d = resolve(ref, "dataset");
  if (!d.is_ok()) return d.status();
  const std::string hash = (*d)["hash"].get<std::string>();
  auto before = core_.store->get_alias(name);
  if (!before.is_ok()) return before.status();
  if (!before->has_value() || **before != hash) {
    TRAINER_RETURN_IF_ERROR(core_.store->transaction([&] { return core_.store->set_alias(name, hash); }));
  }
  auto stored = core_.store->get_dataset(hash);
  if (!stored.is_ok()) return stored.status();
  if (!stored->has_value()) return internal_error("dataset " + hash + " vanished while it was named");
  auto out = present(**stored);
  if (!out.is_ok()) return out.status();
  (*out)["name"] = name;  // the name just given (the dataset may hold others too: `names`)
  if (before->has_value()) (*out)["movedFrom"] = **before;
  return out;
}

Result<json> Datasets::list() {
  auto rows = core_.store->list_datasets();
  if (!rows.is_ok()) return rows.status();
  json out = json::array();
  for (const auto& d : *rows) {
    auto p = present(d);
    if (!p.is_ok()) return p.status();
    out.push_back(*p);
  }
  return json{{"datasets", out}};
}

Result<json> Datasets::get(const std::string& ref) {
  auto d = resolve(ref, "dataset");
  if (!d.is_ok()) return d.status();
  return present(*d);
}

Result<json> Datasets::measure(const std::string& ref, const std::string& base_model,
                                          std::optional<int> max_seq_length) {
  auto d = resolve(ref, "dataset");
  if (!d.is_ok()) return d.status();
  auto m = base_models_.resolve(base_model, "baseModel");
  if (!m.is_ok()) return m.status();
  if ((*m)["status"] != "ready") {
    return field_status(StatusCode::kFailedPrecondition, "baseModel",
                        "'" + base_model + "' is " + m->value("status", std::string("unknown")) +
                            "; wait until it is ready");
  }
  return measure_cached(*d, *m, max_seq_length);
}

Result<json> Datasets::measure_cached(const json& dataset, const json& model, std::optional<int> max_seq_length) {
  const std::string model_path = base_models_.cache_path_of(model);
  const std::string key = dataset.value("hash", std::string()) + '\n' + model_path + '\n' +
                          (max_seq_length ? std::to_string(*max_seq_length) : std::string("-"));
  // A failed measurement is remembered for a minute (real time): a job binary that cannot
  // measure is not asked again on every submission.
  const double real_now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  {
    std::lock_guard<std::mutex> lock(measured_mu_);
    auto it = measured_.find(key);
    if (it != measured_.end()) {
      if (!it->second.contains("_failedUntil")) return it->second;
      if (real_now < it->second["_failedUntil"].get<double>()) {
        return Status(static_cast<StatusCode>(it->second.value("_code", static_cast<int>(StatusCode::kInternal))),
                      it->second.value("_failure", std::string("measuring failed")));
      }
    }
  }
  auto remember = [&](json result) {
    std::lock_guard<std::mutex> lock(measured_mu_);
    if (measured_.size() >= kMeasuredCacheSize) measured_.clear();
    measured_[key] = std::move(result);
  };
  std::vector<std::string> args = {"analyze", "--model", model_path, "--data", local_path(dataset),
                                   "-o", "json"};
  if (max_seq_length) {
    args.push_back("--max-seq-length");
    args.push_back(std::to_string(*max_seq_length));
  }
  auto out = core_.backend->run_tool(args, 120);
  if (!out.is_ok()) {
    remember({{"_failedUntil", real_now + 60},
              {"_code", static_cast<int>(out.status().code())},
              {"_failure", out.status().message()}});
    return out.status();
  }
  auto result = parse_json(*out, "the output of trainer-job analyze");
  if (!result.is_ok() || !result->is_object()) {
    return internal_error("trainer-job analyze printed something other than a JSON object");
  }
  remember(*result);
  return *result;
}

Result<json> Datasets::present(const json& d) {
  auto names = core_.store->aliases_of(d.value("hash", std::string()));
  if (!names.is_ok()) return names.status();
  json out = json::object();
  for (const auto& [k, v] : d.items()) {
    if (!k.empty() && k[0] == '_') continue;
    if (k == "path") continue;  // a folder of the host an older trainerd stored it on
    out[k] = v;
  }
  out["key"] = key_of(d.value("hash", std::string()));
  out["names"] = *names;
  out["name"] = names->empty() ? json(nullptr) : json(names->front());
  return out;
}

// A dataset by alias, full hash or unique hash prefix.
Result<json> Datasets::resolve(const std::string& ref, const std::string& field) {
  if (ref.empty()) return invalid_field(field, "must not be empty");
  auto alias = core_.store->get_alias(ref);
  if (!alias.is_ok()) return alias.status();
  std::string hash = alias->value_or(ref);
  auto d = core_.store->get_dataset(hash);
  if (!d.is_ok()) return d.status();
  if (d->has_value()) return **d;
  if (is_hex(ref) && ref.size() >= 4) {
    auto matches = core_.store->datasets_with_prefix(ref);
    if (!matches.is_ok()) return matches.status();
    if (matches->size() == 1) return matches->front();
    if (matches->size() > 1) {
      std::string c;
      for (const auto& m : *matches) c += (c.empty() ? "" : ", ") + m.value("hash", std::string()).substr(0, 16);
      return invalid_field(field, "'" + ref + "' is an ambiguous hash prefix (candidates: " + c + ")");
    }
  }
  return field_status(StatusCode::kNotFound, field,
                      "no dataset named or hashed '" + ref + "'; register it first (trainer datasets create)");
}

}  // namespace trainer::service

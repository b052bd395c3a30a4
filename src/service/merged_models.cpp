// ModelRegistry (model_registry.h): an adapter merged into its base model's weights, for
// `trainer trained-models export --merged`.
//
// Where the merge runs: here, on trainerd's side, by `trainer-job merge` through the backend's
// run_tool (as an import's load check runs `trainer-job score`). trainerd has the base model's
// folder (its model cache, by the model's baseModel.contentHash) and the adapter (its artifact
// key); the CLI may be on another host with neither, so it only downloads the finished files, as
// the PEFT export does. The merged folder depends only on the model (a registered model's id
// derives from its content and its base revision), so it is made once into
// DATA/merged-models/ID (written beside, renamed in when complete) and served from there; an
// operator may delete that folder at any time to reclaim the space.
#include <algorithm>
#include <filesystem>
#include <system_error>

#include "common/files.h"
#include "service/adapter_check.h"
#include "service/model_registry.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

// A file name a merged folder may hold: one plain name, no path, not hidden.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name[0] != '.' && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

}  // namespace

Result<std::string> ModelRegistry::merged_folder(const json& model) {
  const std::string id = model.value("modelId", std::string());
  const fs::path root = fs::path(core_.options.data_dir) / "merged-models";
  const fs::path folder = root / id;
  std::lock_guard<std::mutex> lock(merge_mu_);
  std::error_code ec;
  if (fs::is_directory(folder, ec)) return folder.string();  // complete: renamed in only when finished

  const json base = model.value("baseModel", json::object());
  const std::string base_name = base.is_object() ? base.value("name", std::string()) : std::string();
  const std::string hash = base.is_object() && base.value("contentHash", json(nullptr)).is_string()
                               ? base["contentHash"].get<std::string>()
                               : std::string();
  const std::string cache = base_models_.cache_path(hash);
  if (cache.empty() || !fs::is_directory(cache, ec)) {
    return field_status(StatusCode::kFailedPrecondition, "model",
                        "model " + id + ": its base model '" + base_name + "' (revision " + hash.substr(0, 12) +
                            ") is not in this trainerd's model cache; select it (trainer base-models select " +
                            base_name + " --wait) and export again");
  }
  const json artifact = model.value("artifact", json::object());
  const json key = artifact.is_object() ? artifact.value("key", json(nullptr)) : json(nullptr);
  if (!key.is_string()) return internal_error("model " + id + " is REGISTERED but names no artifact key");

  const fs::path staging = fs::path(core_.options.data_dir) / "registry-staging" / (id + "-merge-" + random_hex(8));
  fs::create_directories(staging / "adapter", ec);
  if (ec) return unavailable("cannot create " + staging.string() + ": " + ec.message());
  StagingFolder cleanup(staging);
  for (const char* f : {kAdapterConfigFile, kAdapterWeightsFile}) {
    auto bytes = core_.artifacts().get(key.get<std::string>() + "/" + f);
    if (!bytes.is_ok()) return Status(bytes.status().code(), "model", "model " + id + ": " + f + ": " + bytes.status().message());
    TRAINER_RETURN_IF_ERROR(write_file_atomic((staging / "adapter" / f).string(), *bytes));
  }
  const fs::path merged = staging / "merged";
  auto out = core_.backend->run_tool({"merge", "--model", cache, "--adapter", (staging / "adapter").string(), "--output",
                                      merged.string()},
                                     kMergeTimeoutSeconds);
  if (!out.is_ok()) {
    return Status(out.status().code(), "model",
                  "model " + id + ": merging the adapter into base model '" + base_name + "' failed: " +
                      out.status().message());
  }
  fs::create_directories(root, ec);
  if (ec) return unavailable("cannot create " + root.string() + ": " + ec.message());
  fs::rename(merged, folder, ec);
  if (ec) return unavailable("cannot move the merged model into " + folder.string() + ": " + ec.message());
  TRAINER_RETURN_IF_ERROR(sync_folder(root));
  return folder.string();
}

Result<json> ModelRegistry::merged(const std::string& ref) {
  auto m = registered_adapter(ref);
  if (!m.is_ok()) return m.status();
  auto folder = merged_folder(*m);
  if (!folder.is_ok()) return folder.status();
  json files = json::array();
  std::error_code ec;
  std::vector<fs::directory_entry> entries;
  for (const auto& entry : fs::directory_iterator(*folder, ec)) entries.push_back(entry);
  if (ec) return unavailable("cannot list " + *folder + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  for (const auto& entry : entries) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !plain_file_name(name)) continue;
    files.push_back({{"name", name}, {"bytes", entry.file_size()}});
  }
  return json{{"modelId", (*m)["modelId"]}, {"format", "hf"}, {"baseModel", m->value("baseModel", json(nullptr))},
              {"files", files}};
}

Result<std::string> ModelRegistry::merged_file(const std::string& ref, const std::string& name) {
  auto m = registered_adapter(ref);
  if (!m.is_ok()) return m.status();
  const std::string id = m->value("modelId", std::string());
  auto folder = merged_folder(*m);
  if (!folder.is_ok()) return folder.status();
  const fs::path path = fs::path(*folder) / name;
  std::error_code ec;
  if (!plain_file_name(name) || !fs::is_regular_file(path, ec)) {
    return field_status(StatusCode::kNotFound, "file",
                        "model " + id + "'s merged folder has no file '" + name +
                            "' (GET /v1/trained-models/" + id + "/merged lists them)");
  }
  return read_file(path.string());
}

}  // namespace trainer::service

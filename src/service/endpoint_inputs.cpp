// An endpoint's inputs on a cluster (docs/serving.md, "Where the process runs"): with an S3
// artifact store and a cluster backend, the serving process reads its base model and adapters
// from the store, not from trainerd's data folder. trainerd stages them as it stages a job's
// inputs (input_staging.h: the model under inputs/models/SHA, each adapter folder under its own
// content hash; staged once, reused), names their s3:// URIs in the process's spec or in the
// attach call, and the process fetches each into its node's input cache (job/input_fetch.h).
#include <filesystem>

#include "common/files.h"
#include "service/endpoints.h"
#include "service/input_staging.h"

namespace trainer::service {

namespace fs = std::filesystem;

bool Endpoints::stages_inputs() const { return core_.artifact_store != nullptr && core_.backend->name() != "local"; }

Result<std::string> Endpoints::adapter_folder(const std::string& id, const std::string& name, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  // A cluster run's adapter: its final snapshot's weights, by storage key in the artifact store.
  const fs::path local = fs::path(dir_of(id)) / "adapters" / name;
  std::error_code ec;
  fs::create_directories(local, ec);
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
    auto bytes = core_.artifacts().get(path + "/" + file);
    if (!bytes.is_ok()) {
      return Status(bytes.status().code(), "model '" + name + "': " + core_.artifact_uri(path) + "/" + file + ": " +
                                               bytes.status().message());
    }
    TRAINER_RETURN_IF_ERROR(write_file_atomic((local / file).string(), *bytes));
  }
  return local.string();
}

Status Endpoints::stage_spec_locked(const json& doc, json& spec) {
  const std::string id = doc.value("endpointId", std::string());
  if (spec.contains("adapter")) {
    for (auto& [name, path] : spec["adapter"].items()) {
      TRAINER_ASSIGN_OR_RETURN(std::string folder, adapter_folder(id, name, path.get<std::string>()));
      path = folder;
    }
  }
  if (!stages_inputs()) return Status::ok();
  return stage_serving_inputs(*core_.artifact_store, core_.options.config.artifact_store.uri,
                              doc["model"].value("baseModelHash", std::string()), spec)
      .status();
}

Result<std::string> Endpoints::attach_path_locked(const std::string& id, const json& served) {
  const std::string name = served.value("name", std::string());
  TRAINER_ASSIGN_OR_RETURN(std::string folder, adapter_folder(id, name, served.value("_path", std::string())));
  if (!stages_inputs()) return folder;
  auto uri = stage_adapter_folder(*core_.artifact_store, core_.options.config.artifact_store.uri, "adapter " + name, folder);
  if (!uri.is_ok()) {
    return Status(uri.status().code(), "model '" + name + "': could not stage its adapter for endpoint " + id + ": " +
                                           uri.status().message());
  }
  return *uri;
}

}  // namespace trainer::service

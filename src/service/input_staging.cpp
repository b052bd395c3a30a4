// Staging a cluster job's inputs in the artifact store (declared in service/input_staging.h).
#include "service/input_staging.h"

#include <cstdio>
#include <filesystem>
#include <vector>

#include "protocol/inputs.h"
#include "storage/content_hash.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Publishes the local file or folder `source` under `key` unless a committed artifact is there.
// Returns whether it uploaded.
Result<bool> stage_one(storage::Storage& store, const std::string& source, const std::string& key) {
  TRAINER_ASSIGN_OR_RETURN(bool there, store.exists(key));
  if (there) return false;
  Status st = store.publish_new(source, key);
  // Another trainerd (or an earlier try that lost its answer) staged the same content first:
  // the key is content-addressed, so what is there is what this call would have written.
  if (st.code() == StatusCode::kAlreadyExists) return false;
  TRAINER_RETURN_IF_ERROR(st);
  return true;
}

// (field, local source, key) of each input, and the field to rewrite to its URI.
struct Input {
  std::string field;
  std::string source;
  std::string key;
  json* target;
};

// The base model folder `target` names, by its content hash.
Result<Input> model_input(const std::string& model_sha, json& doc) {
  if (!protocol::is_content_hash(model_sha)) {
    return failed_precondition("baseModel: the model's content hash '" + model_sha + "' is not known");
  }
  return Input{"baseModel", doc.value("baseModel", std::string()), protocol::model_input_key(model_sha),
               &doc["baseModel"]};
}

// A dataset file of the dataset store (SHA.jsonl), by the hash its name carries.
Result<Input> dataset_input(const std::string& field, json& target) {
  const std::string path = target.is_string() ? target.get<std::string>() : std::string();
  const std::string sha = fs::path(path).stem().string();  // the dataset store names files SHA.jsonl
  if (!protocol::is_content_hash(sha)) {
    return failed_precondition(field + ": " + path + " is not a content-addressed dataset file (SHA.jsonl)");
  }
  return Input{field, path, protocol::dataset_input_key(sha), &target};
}

// A folder (an adapter's) by its own content hash, staged as a model folder is.
Result<Input> folder_input(const std::string& field, const std::string& folder, json& target) {
  auto hashed = storage::folder_content_hash(folder);
  if (!hashed.is_ok()) return Status(hashed.status().code(), field + " " + folder + ": " + hashed.status().message());
  return Input{field, folder, protocol::model_input_key(hashed->sha256), &target};
}

Result<StagedInputs> stage_all(storage::Storage& store, const std::string& root_uri, const std::vector<Input>& inputs) {
  StagedInputs out;
  for (const Input& in : inputs) {
    const std::string uri = root_uri + "/" + in.key;
    auto uploaded = stage_one(store, in.source, in.key);
    if (!uploaded.is_ok()) {
      return Status(uploaded.status().code(), in.field + " (" + uri + "): staging it in the artifact store " +
                                                  store.describe() + " failed: " + uploaded.status().message());
    }
    if (*uploaded) {
      ++out.uploaded;
      std::fprintf(stderr, "trainerd: staged input %s (%s) in %s\n", in.key.c_str(), in.field.c_str(),
                   store.describe().c_str());
    } else {
      ++out.reused;
    }
    *in.target = uri;
  }
  return out;
}

}  // namespace

Result<StagedInputs> stage_job_inputs(storage::Storage& store, const std::string& root_uri,
                                      const std::string& model_sha, json& job_plan) {
  std::vector<Input> inputs;
  TRAINER_ASSIGN_OR_RETURN(Input model, model_input(model_sha, job_plan));
  inputs.push_back(std::move(model));
  json& config = job_plan["config"];
  for (const char* field : {"dataset", "validationDataset"}) {
    if (!config.contains(field) || !config[field].is_string()) continue;
    TRAINER_ASSIGN_OR_RETURN(Input d, dataset_input(std::string("config.") + field, config[field]));
    inputs.push_back(std::move(d));
  }
  return stage_all(store, root_uri, inputs);
}

Result<StagedInputs> stage_evaluation_inputs(storage::Storage& store, const std::string& root_uri,
                                             const std::string& model_sha, json& spec) {
  std::vector<Input> inputs;
  TRAINER_ASSIGN_OR_RETURN(Input model, model_input(model_sha, spec));
  inputs.push_back(std::move(model));
  TRAINER_ASSIGN_OR_RETURN(Input d, dataset_input("dataset", spec["dataset"]));
  inputs.push_back(std::move(d));
  if (spec.contains("adapter") && spec["adapter"].is_string()) {
    TRAINER_ASSIGN_OR_RETURN(Input a, folder_input("adapter", spec["adapter"].get<std::string>(), spec["adapter"]));
    inputs.push_back(std::move(a));
  }
  return stage_all(store, root_uri, inputs);
}

Result<StagedInputs> stage_serving_inputs(storage::Storage& store, const std::string& root_uri,
                                          const std::string& model_sha, json& spec) {
  if (!protocol::is_content_hash(model_sha)) {
    return failed_precondition("model: the model's content hash '" + model_sha + "' is not known");
  }
  std::vector<Input> inputs = {
      {"model", spec.value("model", std::string()), protocol::model_input_key(model_sha), &spec["model"]}};
  if (spec.contains("adapter") && spec["adapter"].is_object()) {
    for (auto& [name, dir] : spec["adapter"].items()) {
      if (!dir.is_string()) return invalid_argument("adapter." + name + ": not a folder's path");
      TRAINER_ASSIGN_OR_RETURN(Input a, folder_input("adapter " + name, dir.get<std::string>(), dir));
      inputs.push_back(std::move(a));
    }
  }
  return stage_all(store, root_uri, inputs);
}

Result<std::string> stage_adapter_folder(storage::Storage& store, const std::string& root_uri, const std::string& field,
                                         const std::string& folder) {
  json uri = folder;
  TRAINER_ASSIGN_OR_RETURN(Input a, folder_input(field, folder, uri));
  TRAINER_RETURN_IF_ERROR(stage_all(store, root_uri, {a}).status());
  return uri.get<std::string>();
}

}  // namespace trainer::service

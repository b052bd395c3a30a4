// Staging a cluster job's inputs in the artifact store (declared in service/input_staging.h).
#include "service/input_staging.h"

#include <cstdio>
#include <filesystem>
#include <vector>

#include "protocol/inputs.h"

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

}  // namespace

Result<StagedInputs> stage_job_inputs(storage::Storage& store, const std::string& root_uri,
                                      const std::string& model_sha, json& job_plan) {
  StagedInputs out;
  // (field, local source, key) of each input.
  struct Input {
    std::string field;
    std::string source;
    std::string key;
    json* target;
  };
  std::vector<Input> inputs;
  if (!protocol::is_content_hash(model_sha)) {
    return failed_precondition("baseModel: the model's content hash '" + model_sha + "' is not known");
  }
  inputs.push_back({"baseModel", job_plan.value("baseModel", std::string()), protocol::model_input_key(model_sha),
                    &job_plan["baseModel"]});
  json& config = job_plan["config"];
  for (const char* field : {"dataset", "validationDataset"}) {
    if (!config.contains(field) || !config[field].is_string()) continue;
    const std::string path = config[field].get<std::string>();
    const std::string sha = fs::path(path).stem().string();  // the dataset store names files SHA.jsonl
    if (!protocol::is_content_hash(sha)) {
      return failed_precondition(std::string("config.") + field + ": " + path +
                                 " is not a content-addressed dataset file (SHA.jsonl)");
    }
    inputs.push_back({std::string("config.") + field, path, protocol::dataset_input_key(sha), &config[field]});
  }
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

}  // namespace trainer::service

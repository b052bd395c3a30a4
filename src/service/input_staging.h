// A cluster job's inputs, staged in the S3 artifact store before the job is submitted
// (docs/api.md, "Artifact store"): the base model folder under inputs/models/SHA and each dataset
// file under inputs/datasets/SHA.jsonl (protocol/inputs.h). The job fetches them into a cache on
// its node (job/input_fetch.h), so a Ray or Slurm node needs no path into trainerd's data folder.
//
// Staged once: an input whose committed object (a folder's commit object) is already in the store
// is not uploaded again. A folder is published with the storage layer's conditional folder publish,
// its commit object last, so a half-written upload never counts as staged.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "storage/storage.h"

namespace trainer::service {

struct StagedInputs {
  int uploaded = 0;  // inputs this call uploaded
  int reused = 0;    // inputs already in the store
};

// Stages the inputs `job_plan` names (baseModel: the model cache folder whose content hash is
// `model_sha`; config.dataset and config.validationDataset: dataset files named SHA.jsonl) in
// `store`, whose URI is `root_uri` ("s3://BUCKET[/PREFIX]"), and rewrites those fields to the
// inputs' URIs (root_uri + "/" + key). Fails naming the store and the input. Each upload is
// logged on stderr ("trainerd: staged input ...").
Result<StagedInputs> stage_job_inputs(storage::Storage& store, const std::string& root_uri,
                                      const std::string& model_sha, nlohmann::json& job_plan);

// The same for an evaluation job's spec (job/cmd_evaluate.cpp): its baseModel (content hash
// `model_sha`), its dataset file and its adapter folder (when it names one; staged as a folder
// under its own content hash).
Result<StagedInputs> stage_evaluation_inputs(storage::Storage& store, const std::string& root_uri,
                                             const std::string& model_sha, nlohmann::json& spec);

// The same for an endpoint's serving process (job/cmd_serve.cpp): its spec's `model` (the base
// model's cache folder, content hash `model_sha`) and each folder of its `adapter` object
// ({NAME: DIR}, each under its own content hash, as an evaluation's adapter).
Result<StagedInputs> stage_serving_inputs(storage::Storage& store, const std::string& root_uri,
                                          const std::string& model_sha, nlohmann::json& spec);

// One adapter folder staged under its content hash (an adapter attached to a running serving
// process): its URI. Errors name `field`.
Result<std::string> stage_adapter_folder(storage::Storage& store, const std::string& root_uri, const std::string& field,
                                         const std::string& folder);

}  // namespace trainer::service

// The deployment's artifact store as jobs reach it (config.h's ArtifactStoreConfig): checked
// once at trainerd's start, and turned into the environment each job gets.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "service/config.h"
#include "storage/storage.h"

namespace trainer::service {

// Connects with the keys from trainerd's environment (the variables the config names); fails
// naming a missing variable, or the store's refusal (a wrong key answers 403).
Result<std::unique_ptr<storage::Storage>> open_artifact_store(const ArtifactStoreConfig& config);

// TRAINER_S3_ENDPOINT, AWS_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the job, and
// TRAINER_INPUT_CACHE when the configuration names one.
std::vector<std::pair<std::string, std::string>> artifact_store_job_env(const ArtifactStoreConfig& config);

}  // namespace trainer::service

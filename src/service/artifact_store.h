// The deployment's artifact store as jobs reach it (config.h's ArtifactStoreConfig): checked
// once at trainerd's start, and turned into the environment each job gets.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "protocol/job_request.h"
#include "service/config.h"
#include "storage/storage.h"

namespace trainer::service {

// Connects with the keys from trainerd's environment (the variables the config names); fails
// naming a missing variable, or the store's refusal (a wrong key answers 403).
Result<std::unique_ptr<storage::Storage>> open_artifact_store(const ArtifactStoreConfig& config);

// How a job reaches the store: its endpoint and region, trainerd's keys (from the variables the
// config names) and the node's input cache. The job request carries it (protocol/job_request.h).
protocol::StoreAccess artifact_store_access(const ArtifactStoreConfig& config);

}  // namespace trainer::service

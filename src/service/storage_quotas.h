// Storage quotas of uploads (docs/security.md, "Storage quotas"): the bytes of datasets and
// bundles a workload uploaded, counted from the store's records, against its quota: the
// workload's `storageQuotaBytes`, else the deployment's `quotas.storageBytes`. An upload that
// names no workload counts against the shared catalog, under the deployment's quota.
//
// A record counts when it carries `owner: {workloadId}` (an upload through the API names its
// owner; "" for the shared catalog); datasets a curation or distillation registers and records of
// an older trainerd carry none and count against no one. Rows already stored (the same content
// hash) add nothing.
//
// Thread safety: call with the core's mu held, so that a check and the insert it admits are one
// step for this replica.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "store/store.h"

namespace trainer::service {

// Whose upload: a workload, or (workload_id "") the shared catalog.
struct StorageOwner {
  std::string workload_id;    // "" = the shared catalog
  std::string workload_name;  // for messages
  int64_t quota_bytes = 0;    // 0 = no limit
};

// The owner a workload document (nullptr: the shared catalog) stands for under the deployment's
// default quota.
StorageOwner storage_owner(const nlohmann::json* workload, int64_t default_quota_bytes);

// `owner: {workloadId}` as a stored record carries it.
nlohmann::json owner_json(const StorageOwner& owner);

// The bytes the store's datasets and bundle versions owned by `workload_id` hold.
Result<int64_t> stored_bytes(store::Store& store, const std::string& workload_id);

// Ok when `adding` bytes more keep `owner` within its quota; else failed_precondition (409) on
// `field`, naming the quota, the bytes stored and the upload's size. Nothing is stored.
Status check_storage_quota(store::Store& store, const StorageOwner& owner, int64_t adding, const std::string& what,
                           const std::string& field);

// {usedBytes, quotaBytes (null: no limit)} for `workloads get`.
Result<nlohmann::json> storage_use_json(store::Store& store, const StorageOwner& owner);

}  // namespace trainer::service

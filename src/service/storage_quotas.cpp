// Storage quotas of uploads (declared in service/storage_quotas.h).
#include "service/storage_quotas.h"

#include "service/util.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;

// Whether a stored record is `workload_id`'s upload.
bool owned_by(const json& record, const std::string& workload_id) {
  if (!record.contains("owner") || !record["owner"].is_object()) return false;
  const json& id = record["owner"].value("workloadId", json());
  return id.is_string() && id.get<std::string>() == workload_id;
}

int64_t bytes_of(const json& record) {
  const json& b = record.value("bytes", json());
  return b.is_number_integer() ? b.get<int64_t>() : 0;
}

std::string owner_text(const StorageOwner& owner) {
  return owner.workload_id.empty() ? std::string("the shared catalog (uploads naming no workload)")
                                   : "workload '" + owner.workload_name + "'";
}

}  // namespace

StorageOwner storage_owner(const json* workload, int64_t default_quota_bytes) {
  StorageOwner owner;
  owner.quota_bytes = default_quota_bytes;
  if (workload == nullptr) return owner;
  owner.workload_id = workload->value("id", std::string());
  owner.workload_name = workload->value("name", std::string());
  const json& own = workload->value("storageQuotaBytes", json());
  if (own.is_number_integer()) owner.quota_bytes = own.get<int64_t>();
  return owner;
}

json owner_json(const StorageOwner& owner) { return {{"workloadId", owner.workload_id}}; }

Result<int64_t> stored_bytes(store::Store& store, const std::string& workload_id) {
  int64_t total = 0;
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> datasets, store.list_datasets());
  for (const json& d : datasets) {
    if (owned_by(d, workload_id)) total += bytes_of(d);
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> bundles, store.list_bundle_versions());
  for (const json& b : bundles) {
    if (owned_by(b, workload_id)) total += bytes_of(b);
  }
  return total;
}

Status check_storage_quota(store::Store& store, const StorageOwner& owner, int64_t adding, const std::string& what,
                           const std::string& field) {
  if (owner.quota_bytes <= 0) return Status::ok();
  TRAINER_ASSIGN_OR_RETURN(int64_t used, stored_bytes(store, owner.workload_id));
  if (used + adding <= owner.quota_bytes) return Status::ok();
  const std::string setting = owner.workload_id.empty() ? "quotas.storageBytes of trainerd's configuration"
                                                        : "its storageQuotaBytes (PATCH /v1/workloads/" + owner.workload_name + ")";
  return field_status(StatusCode::kFailedPrecondition, field,
                      owner_text(owner) + " stores " + std::to_string(used) + " bytes of datasets and bundles; " +
                          what + " of " + std::to_string(adding) + " bytes would pass its storage quota of " +
                          std::to_string(owner.quota_bytes) + " bytes; nothing was stored. Ask an admin to raise " +
                          setting);
}

Result<json> storage_use_json(store::Store& store, const StorageOwner& owner) {
  TRAINER_ASSIGN_OR_RETURN(int64_t used, stored_bytes(store, owner.workload_id));
  return json{{"usedBytes", used}, {"quotaBytes", owner.quota_bytes > 0 ? json(owner.quota_bytes) : json(nullptr)}};
}

}  // namespace trainer::service

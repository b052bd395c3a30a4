// The API's uploads, datasets and bundles, each counted against its owner's storage quota
// (service/storage_quotas.h); ServiceImpl's side of register_dataset, register_bundle and
// workload_storage.
#include "service/service_state.h"

namespace trainer::service {

Result<StorageOwner> ServiceImpl::storage_owner_of(const std::optional<std::string>& workload,
                                                   const std::string& field) {
  const int64_t fallback = opt_.config.default_storage_quota_bytes;
  if (!workload) return storage_owner(nullptr, fallback);
  TRAINER_ASSIGN_OR_RETURN(json w, workloads_.resolve(*workload, field));
  return storage_owner(&w, fallback);
}

Result<std::pair<json, bool>> ServiceImpl::register_dataset(const std::optional<std::string>& name,
                                                            const std::string& rows,
                                                            const std::optional<std::string>& workload) {
  TRAINER_ASSIGN_OR_RETURN(StorageOwner owner, storage_owner_of(workload, "workload"));
  return datasets_.register_rows(name, rows, &owner);
}

Result<std::pair<json, bool>> ServiceImpl::register_bundle(const json& body) {
  std::optional<std::string> workload;
  if (body.is_object() && body.contains("workload") && !body["workload"].is_null()) {
    if (!body["workload"].is_string()) return invalid_field("workload", "must be a workload's name or id");
    workload = body["workload"].get<std::string>();
  }
  TRAINER_ASSIGN_OR_RETURN(StorageOwner owner, storage_owner_of(workload, "workload"));
  return bundles_.register_version(body, &owner);
}

Result<json> ServiceImpl::workload_storage(const std::string& ref) {
  TRAINER_ASSIGN_OR_RETURN(StorageOwner owner, storage_owner_of(ref, "workload"));
  return storage_use_json(*store_, owner);
}

}  // namespace trainer::service

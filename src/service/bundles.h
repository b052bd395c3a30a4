// Scoring bundles (docs/graders.md, "Registered bundles"): a Python package folder's files,
// stored content-addressed under data_dir/bundles/SHA/, versioned per name (1, 2, ...). A plan's
// bundle:NAME[:VERSION]#MODULE[:FUNCTION] term is resolved at submission to the stored folder.
//
// Thread safety: every method may be called from any thread; register_version() takes the core's mu.
#pragma once

#include <string>
#include <utility>

#include "service/service_core.h"
#include "service/storage_quotas.h"

namespace trainer::plan {
struct Plan;
}

namespace trainer::service {

class Bundles {
 public:
  explicit Bundles(ServiceCore& core) : core_(core) {}

  // Service::register_bundle, list_bundles, get_bundle.
  // With `owner`, a new version is checked against its storage quota and recorded as its
  // (storage_quotas.h); the body's `workload` names it (ServiceImpl::register_bundle).
  Result<std::pair<json, bool>> register_version(const json& body, const StorageOwner* owner = nullptr);
  Result<json> list();
  Result<json> get(const std::string& ref);

  // For runs and evaluations:
  // The stored version `ref` names (NAME, NAME:VERSION, a hash prefix); errors name `field`.
  Result<json> resolve(const std::string& ref, const std::string& field);
  // `kind` with a registered bundle's reference (bundle:REFERENCE#MODULE[:FUNCTION]) resolved to
  // the stored folder of the version it names; other kinds and path forms as they are.
  Result<std::string> resolve_kind(const std::string& kind, const std::string& field);
  // Rewrites the plan's bundle:REFERENCE#MODULE[:FUNCTION] terms to the stored folder of the
  // version they name (bundle:/DATA/bundles/SHA#MODULE[:FUNCTION]); path forms are left alone.
  Status resolve_terms(plan::Plan& plan);

 private:
  ServiceCore& core_;
};

}  // namespace trainer::service

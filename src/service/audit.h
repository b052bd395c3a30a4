// The audit log (docs/security.md, "Audit log"): what the API records of every write request
// (who, what, when, from where, and how it was answered), kept in the store so that every
// replica on it appends to and answers from the same log. Bodies are never recorded.
//
// Thread safety: every method may be called from any thread; appends go to the store without the
// core's mu (an entry is one row, written on its own).
#pragma once

#include <string>
#include <vector>

#include "service/service_core.h"
#include "service/workloads.h"

namespace trainer::service {

class AuditLog {
 public:
  // The most entries one listing answers.
  static constexpr int64_t kMaxListed = 10000;

  AuditLog(ServiceCore& core, Workloads& workloads);

  // Service::record_audit: appends `entry` stamped with "at" (now, RFC 3339); a "workload" that
  // names a known workload (by name or id) is recorded as its id, with "workloadName".
  Status record(json entry);
  // Service::list_audit: see there.
  Result<std::vector<json>> list(const std::string& since, const std::string& token,
                                 const std::string& workload, int64_t limit);

 private:
  ServiceCore& core_;
  Workloads& workloads_;
};

}  // namespace trainer::service

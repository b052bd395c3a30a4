// The audit log (docs/security.md, "Audit log"): what the API records of every write request
// (who, what, when, from where, and how it was answered), kept in the store so that every
// replica on it appends to and answers from the same log. Bodies are never recorded.
//
// Thread safety: every method may be called from any thread; appends go to the store without the
// core's mu (an entry is one row, written on its own).
#pragma once

#include <atomic>
#include <cstdint>
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
  // names a known workload (by name or id) is recorded as its id, with "workloadName". A store
  // that refuses it is counted (trainer_audit_write_failures_total) and answered; the caller
  // logs it (the request itself has been answered already).
  Status record(json entry);
  // The audit log's own series for /metrics (Prometheus text): trainer_audit_write_failures_total.
  std::string metrics_text() const;
  // Service::list_audit: see there.
  Result<std::vector<json>> list(const std::string& since, const std::string& token,
                                 const std::string& workload, int64_t limit);

 private:
  ServiceCore& core_;
  Workloads& workloads_;
  std::atomic<int64_t> write_failures_{0};  // entries the store refused since start
};

}  // namespace trainer::service

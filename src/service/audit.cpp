// The audit log (audit.h).
#include "service/audit.h"

#include <algorithm>

#include "common/utc_time.h"
#include "service/util.h"

namespace trainer::service {

AuditLog::AuditLog(ServiceCore& core, Workloads& workloads) : core_(core), workloads_(workloads) {}

Status AuditLog::record(json entry) {
  const double at = core_.now();
  entry["at"] = rfc3339(at);
  const std::string workload = entry.value("workload", std::string());
  if (!workload.empty()) {
    if (auto w = workloads_.get(workload); w.is_ok()) {
      entry["workload"] = w->value("id", workload);
      entry["workloadName"] = w->value("name", std::string());
    }
  }
  Status st = core_.store->append_audit(at, entry);
  if (!st.is_ok()) write_failures_.fetch_add(1);
  return st;
}

std::string AuditLog::metrics_text() const {
  return "# HELP trainer_audit_write_failures_total Audit log entries the store refused to record since trainerd "
         "started (each also logged as a warning).\n"
         "# TYPE trainer_audit_write_failures_total counter\n"
         "trainer_audit_write_failures_total " +
         std::to_string(write_failures_.load()) + "\n";
}

Result<std::vector<json>> AuditLog::list(const std::string& since, const std::string& token,
                                         const std::string& workload, int64_t limit) {
  store::AuditQuery query;
  if (!since.empty()) {
    auto when = parse_utc_time(since);
    if (!when)
      return invalid_field("since",
                           "must be an RFC 3339 time such as 2026-12-05T14:00:00Z, got '" + since + "'");
    query.since = *when;
  }
  if (limit < 1 || limit > kMaxListed) {
    return invalid_field("limit",
                         "must be 1 to " + std::to_string(kMaxListed) + ", got " + std::to_string(limit));
  }
  query.limit = limit;
  query.token = token;
  query.workload = workload;
  if (!workload.empty()) {
    if (auto w = workloads_.get(workload); w.is_ok()) query.workload = w->value("id", workload);
  }
  TRAINER_ASSIGN_OR_RETURN(auto entries, core_.store->list_audit(query));
  std::reverse(entries.begin(), entries.end());  // oldest first, as a log reads
  return entries;
}

}  // namespace trainer::service

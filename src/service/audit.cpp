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
  return core_.store->append_audit(at, entry);
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

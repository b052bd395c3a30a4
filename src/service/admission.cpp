#include "service/admission.h"

#include <set>

namespace trainer::service {

AdmissionResult admit(const AdmissionInput& input) {
  std::map<std::string, int> granted;  // devices granted per pool
  std::map<std::string, int> held;     // devices held per workload
  for (const auto& c : input.claims) {
    if (!c.granted) continue;
    granted[c.pool] += c.devices;
    held[c.workload_id] += c.devices;
  }
  auto quota_of = [&](const std::string& workload) {
    auto it = input.quotas.find(workload);
    return it == input.quotas.end() ? input.default_quota : it->second;
  };
  AdmissionResult out;
  std::set<std::string> blocked;  // pools whose queue waits behind a claim that did not fit
  for (const auto& c : input.claims) {
    if (c.granted) continue;
    auto pool = input.pools.find(c.pool);
    const bool admissible = pool != input.pools.end() && c.devices <= pool->second.max_claim &&
                            c.devices <= pool->second.declared;
    if (!admissible || blocked.count(c.pool) || held[c.workload_id] + c.devices > quota_of(c.workload_id)) {
      out.queued.push_back(c.owner);
      continue;
    }
    if (granted[c.pool] + c.devices <= pool->second.declared) {
      out.granted.push_back(c.owner);
      granted[c.pool] += c.devices;
      held[c.workload_id] += c.devices;
    } else {
      blocked.insert(c.pool);
      out.queued.push_back(c.owner);
    }
  }
  return out;
}

}  // namespace trainer::service

#include "service/admission.h"

#include <set>

namespace trainer::service {

std::vector<int> pool_device_ids(const AdmissionPool& pool) {
  if (!pool.device_ids.empty()) return pool.device_ids;
  std::vector<int> ids;
  for (int i = 0; i < pool.declared; ++i) ids.push_back(i);
  return ids;
}

namespace {

// The lowest `n` indices of `pool` not in `taken` (fewer when the pool has fewer free), which
// are then taken.
std::vector<int> take_lowest(const AdmissionPool* pool, std::set<int>& taken, int n) {
  std::vector<int> out;
  if (pool == nullptr) return out;
  for (int id : pool_device_ids(*pool)) {
    if (static_cast<int>(out.size()) == n) break;
    if (taken.insert(id).second) out.push_back(id);
  }
  return out;
}

}  // namespace

AdmissionResult admit(const AdmissionInput& input) {
  std::map<std::string, int> granted;            // devices granted per pool
  std::map<std::string, int> held;               // devices held per workload
  std::map<std::string, std::set<int>> taken;    // device indices held per pool
  for (const auto& c : input.claims) {
    if (!c.granted) continue;
    granted[c.pool] += c.devices;
    held[c.workload_id] += c.devices;
    taken[c.pool].insert(c.device_ids.begin(), c.device_ids.end());
  }
  auto pool_of = [&](const std::string& name) -> const AdmissionPool* {
    auto it = input.pools.find(name);
    return it == input.pools.end() ? nullptr : &it->second;
  };
  AdmissionResult out;
  // Granted claims without indices (granted before placement existed) are placed first.
  for (const auto& c : input.claims) {
    if (c.granted && c.device_ids.empty() && c.devices > 0) {
      auto ids = take_lowest(pool_of(c.pool), taken[c.pool], c.devices);
      if (!ids.empty()) out.placed[c.owner] = std::move(ids);
    }
  }
  auto quota_of = [&](const std::string& workload) {
    auto it = input.quotas.find(workload);
    return it == input.quotas.end() ? input.default_quota : it->second;
  };
  std::set<std::string> blocked;  // pools whose queue waits behind a claim that did not fit
  for (const auto& c : input.claims) {
    if (c.granted) continue;
    const AdmissionPool* pool = pool_of(c.pool);
    const bool admissible = pool != nullptr && c.devices <= pool->max_claim && c.devices <= pool->declared;
    if (!admissible || blocked.count(c.pool) || held[c.workload_id] + c.devices > quota_of(c.workload_id)) {
      out.queued.push_back(c.owner);
      continue;
    }
    // Free means both: within the declared count, and enough indices no granted claim holds
    // (a pool whose declared size shrank under its claims has fewer free indices than it says).
    const size_t free_ids = pool_device_ids(*pool).size() - [&] {
      size_t n = 0;
      for (int id : pool_device_ids(*pool)) n += taken[c.pool].count(id);
      return n;
    }();
    if (granted[c.pool] + c.devices <= pool->declared && static_cast<size_t>(c.devices) <= free_ids) {
      out.granted.push_back(c.owner);
      out.placed[c.owner] = take_lowest(pool, taken[c.pool], c.devices);
      granted[c.pool] += c.devices;
      held[c.workload_id] += c.devices;
    } else {
      blocked.insert(c.pool);
      out.queued.push_back(c.owner);
    }
  }
  return out;
}

std::set<std::string> pools_with_room(const AdmissionInput& input) {
  std::map<std::string, int> granted;          // devices granted per pool
  std::map<std::string, std::set<int>> taken;  // device indices held per pool
  for (const auto& c : input.claims) {
    if (!c.granted) continue;
    granted[c.pool] += c.devices;
    taken[c.pool].insert(c.device_ids.begin(), c.device_ids.end());
  }
  std::set<std::string> out;
  for (const auto& [name, pool] : input.pools) {
    if (granted[name] >= pool.declared) continue;
    // A granted claim not yet placed takes indices too (admit() places it first): counting them
    // free may name a pool that grants nothing, never leave out one that grants.
    for (int id : pool_device_ids(pool)) {
      if (!taken[name].count(id)) {
        out.insert(name);
        break;
      }
    }
  }
  return out;
}

}  // namespace trainer::service

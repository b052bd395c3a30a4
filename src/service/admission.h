// Admission: which queued claims get their devices, and which devices. A pure function of the
// claims, the pools' capacity and the workloads' quotas; the service applies its answer to the
// store.
//
// Rules, in queue order (the order claims were made):
//   - a claim is granted when its pool has the devices free (declared - granted) and its
//     workload's quota (devices held across pools) leaves room for it;
//   - a claim that does not fit its pool holds back the claims queued after it on that pool
//     (no overtaking: FIFO per pool); pools do not hold each other back (a CPU pool and a GPU
//     pool admit independently);
//   - a claim over its workload's quota waits without holding back others;
//   - a claim on a pool the configuration does not declare, larger than the pool's max_claim,
//     or larger than what the pool declares now (a claim waiting for a capacity window to open)
//     is not granted now: it stays queued and holds back nothing.
//
// The caller states each pool as it is now: declared and device_ids include the capacity
// windows open now (config.h, declared_at and device_ids_at). A granted claim may hold indices
// the pool no longer lists (a window's, after it closed): they stay its own and still count
// against the pool's declared size (admission never grants past DECLARED).
//
// Placement: a granted claim holds specific device indices of its pool (the pool's listed
// indices, or 0..declared-1), the lowest ones no other granted claim of the pool holds. Two
// granted claims never share an index. A claim granted before placement existed (granted, no
// indices) is placed first, in queue order, so that what it holds is known from then on.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace trainer::service {

struct AdmissionClaim {
  std::string owner;            // run id
  std::string workload_id;      // whose quota it counts against
  std::string pool;             // pool name
  int devices = 0;              // devices it holds or waits for
  bool granted = false;         // true: holds them already
  std::vector<int> device_ids = {};  // granted: the device indices it holds (empty: not yet placed)
};

struct AdmissionPool {
  int declared = 0;             // devices admitted against now
  int max_claim = 0;            // largest single claim it accepts
  std::vector<int> device_ids = {};  // the pool's device indices now; empty = 0..declared-1
};

struct AdmissionInput {
  std::vector<AdmissionClaim> claims;          // every claim, in queue order
  std::map<std::string, AdmissionPool> pools;  // by name
  std::map<std::string, int> quotas;           // devices a workload may hold, by workload id
  int default_quota = 0;                       // for a workload absent from `quotas`
};

struct AdmissionResult {
  std::vector<std::string> granted;  // owners granted now, in queue order
  std::vector<std::string> queued;   // owners still waiting, in queue order
  // The device indices of every claim granted now, and of every granted claim that had none.
  std::map<std::string, std::vector<int>> placed;
};

AdmissionResult admit(const AdmissionInput& input);

// The pools where a queued claim may be granted now, from the granted claims of `input` (its
// queued claims are ignored): those with a free device, within the declared count and an index no
// granted claim holds. Every claim asks for at least one device, so a pool not named here grants
// none of its queued claims: admission reads only the queued claims of these pools, and admit()
// over the granted claims and those grants the same as over every claim.
std::set<std::string> pools_with_room(const AdmissionInput& input);

// The device indices of `pool` (its listed ones, or 0..declared-1).
std::vector<int> pool_device_ids(const AdmissionPool& pool);

}  // namespace trainer::service

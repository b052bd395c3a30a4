// Admission: which queued claims get their devices. A pure function of the claims, the pools'
// capacity and the workloads' quotas; the service applies its answer to the store.
//
// Rules, in queue order (the order claims were made):
//   - a claim is granted when its pool has the devices free (declared - granted) and its
//     workload's quota (devices held across pools) leaves room for it;
//   - a claim that does not fit its pool holds back the claims queued after it on that pool
//     (no overtaking: FIFO per pool); pools do not hold each other back (a CPU pool and a GPU
//     pool admit independently);
//   - a claim over its workload's quota waits without holding back others;
//   - a claim on a pool the configuration does not declare, or larger than the pool's
//     max_claim, can never be granted: it stays queued and holds back nothing.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace trainer::service {

struct AdmissionClaim {
  std::string owner;        // run id
  std::string workload_id;  // whose quota it counts against
  std::string pool;         // pool name
  int devices = 0;          // devices it holds or waits for
  bool granted = false;     // true: holds them already
};

struct AdmissionPool {
  int declared = 0;   // devices admitted against
  int max_claim = 0;  // largest single claim it accepts
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
};

AdmissionResult admit(const AdmissionInput& input);

}  // namespace trainer::service

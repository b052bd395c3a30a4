// Admission applied to the store: the claims and quotas read, admission.h decides, the grants
// written, each grant and release recorded in the claims' history (store::ClaimHoldRow) in the
// same transaction. Called with the core's mu held, inside a store transaction.
#include "service/admission.h"
#include "service/capacity.h"

#include <set>

namespace trainer::service {

Status Capacity::admit_locked() {
  // In the caller's transaction (or one of its own when the caller has none): other replicas'
  // admissions wait at the lock until it ends, then read its grants.
  return core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->lock_admission());
    return admit_under_lock();
  });
}

Status Capacity::admit_under_lock() {
  // The granted claims first: a pool without a free device grants none of its queued claims
  // (admission.h, pools_with_room()), so only the queued claims of the others are read. With a
  // thousand runs queued behind a full pool, a pass reads the few granted claims and nothing else.
  auto granted = core_.store->list_claims_in("GRANTED", {});
  if (!granted.is_ok()) return granted.status();
  AdmissionInput input;
  input.default_quota = core_.options.config.default_workload_quota;
  // The pools as they are now: their capacity windows open now included.
  const double t = core_.now();
  for (const auto& p : core_.options.config.pools) {
    input.pools[p.name] = AdmissionPool{declared_at(p, t), p.max_claim, device_ids_at(p, t)};
  }
  for (const auto& c : *granted) {
    input.claims.push_back(AdmissionClaim{c.owner, c.workload_id, c.pool, c.devices, true, c.device_ids});
  }
  const std::set<std::string> room = pools_with_room(input);
  std::vector<store::ClaimRow> claims = std::move(*granted);
  if (!room.empty()) {
    auto queued = core_.store->list_claims_in("QUEUED", std::vector<std::string>(room.begin(), room.end()));
    if (!queued.is_ok()) return queued.status();
    for (auto& c : *queued) {
      input.claims.push_back(AdmissionClaim{c.owner, c.workload_id, c.pool, c.devices, false, c.device_ids});
      claims.push_back(std::move(c));
    }
    auto workloads = core_.store->list_workloads();
    if (!workloads.is_ok()) return workloads.status();
    for (const auto& w : *workloads) {
      if (w.contains("gpuQuota") && w["gpuQuota"].is_number_integer()) {
        input.quotas[w.value("id", std::string())] = w["gpuQuota"].get<int>();
      }
    }
  }
  std::map<std::string, store::ClaimRow*> by_owner;
  for (auto& c : claims) by_owner[c.owner] = &c;
  const AdmissionResult result = admit(input);
  for (const auto& owner : result.granted) {
    store::ClaimRow& c = *by_owner[owner];
    c.state = "GRANTED";
    c.since = rfc3339(t);
    c.device_ids = result.placed.at(owner);
    TRAINER_RETURN_IF_ERROR(core_.store->update_claim(c));
    store::ClaimHoldRow hold{.seq = 0,
                             .owner = c.owner,
                             .kind = c.kind,
                             .workload_id = c.workload_id,
                             .pool = c.pool,
                             .devices = c.devices,
                             .granted_at = t,
                             .released_at = std::nullopt};
    TRAINER_RETURN_IF_ERROR(core_.store->insert_claim_hold(hold));
    // Its owner waits idle for this grant (a phase that waits for its claim): due now, whichever
    // replica holds its lease.
    TRAINER_RETURN_IF_ERROR(core_.kernel->wake_claim_owner(c.owner));
  }
  // Claims granted before placement existed: their indices, written once.
  for (const auto& [owner, ids] : result.placed) {
    store::ClaimRow& c = *by_owner[owner];
    if (c.state != "GRANTED" || !c.device_ids.empty()) continue;
    c.device_ids = ids;
    TRAINER_RETURN_IF_ERROR(core_.store->update_claim(c));
  }
  return Status::ok();
}

Status Capacity::release_claim(const std::string& owner) {
  // The admission lock before the claim's row (docs/durability.md, "Lock order"): an admission of
  // another replica holding it may be granting this very claim.
  return core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->lock_admission());
    TRAINER_RETURN_IF_ERROR(core_.store->delete_claim(owner));
    return core_.store->end_claim_holds(owner, core_.now());
  });
}

}  // namespace trainer::service

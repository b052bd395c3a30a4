// Admission applied to the store: the claims and quotas read, admission.h decides, the grants
// written, each grant and release recorded in the claims' history (store::ClaimHoldRow) in the
// same transaction. Called with the core's mu held, inside a store transaction.
#include "service/admission.h"
#include "service/capacity.h"

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
  auto claims = core_.store->list_claims();
  if (!claims.is_ok()) return claims.status();
  auto workloads = core_.store->list_workloads();
  if (!workloads.is_ok()) return workloads.status();
  AdmissionInput input;
  input.default_quota = core_.options.config.default_workload_quota;
  // The pools as they are now: their capacity windows open now included.
  const double t = core_.now();
  for (const auto& p : core_.options.config.pools) {
    input.pools[p.name] = AdmissionPool{declared_at(p, t), p.max_claim, device_ids_at(p, t)};
  }
  for (const auto& w : *workloads) {
    if (w.contains("gpuQuota") && w["gpuQuota"].is_number_integer()) {
      input.quotas[w.value("id", std::string())] = w["gpuQuota"].get<int>();
    }
  }
  std::map<std::string, store::ClaimRow*> by_owner;
  for (auto& c : *claims) {
    input.claims.push_back(
        AdmissionClaim{c.owner, c.workload_id, c.pool, c.devices, c.state == "GRANTED", c.device_ids});
    by_owner[c.owner] = &c;
  }
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

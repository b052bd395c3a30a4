// Evaluations admitted like runs: each one claims a device of the pool a one-device run would
// take, counted against its workload's quota, and waits QUEUED until admission grants it. The
// claim is released when it ends; its cost is the device time it held.
#include <algorithm>

#include "service/service_state.h"

namespace trainer::service {
namespace {

constexpr int kEvaluationDevices = 1;

}  // namespace

Result<std::optional<store::ClaimRow>> ServiceImpl::evaluation_claim(const std::string& id) {
  auto claims = claims_by_owner();
  if (!claims.is_ok()) return claims.status();
  auto it = claims->find(id);
  if (it == claims->end()) return std::optional<store::ClaimRow>();
  return std::optional<store::ClaimRow>(it->second);
}

// Makes the evaluation's claim (once), applies admission, and starts its job when granted.
Status ServiceImpl::queue_evaluation_locked(json& doc) {
  const std::string id = doc["evaluationId"].get<std::string>();
  auto existing = evaluation_claim(id);
  if (!existing.is_ok()) return existing.status();
  if (!*existing) {
    auto pool = choose_pool(kEvaluationDevices, kEvaluationDevices);
    if (!pool.is_ok()) return pool.status();
    store::ClaimRow c;
    c.owner = id;
    c.kind = "EVALUATION";
    c.workload_id = doc["workload"].is_object() ? doc["workload"].value("id", std::string()) : "";
    c.pool = (*pool)->name;
    c.devices = kEvaluationDevices;
    c.state = "QUEUED";
    c.since = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->insert_claim(c));
    doc["claim"] = {{"pool", c.pool}, {"devices", c.devices}};
    TRAINER_RETURN_IF_ERROR(store_->put_evaluation(doc));
  }
  TRAINER_RETURN_IF_ERROR(capacity_.admit_locked());
  auto claim = evaluation_claim(id);
  if (!claim.is_ok()) return claim.status();
  if (*claim && (*claim)->state == "GRANTED") return launch_evaluation_locked(doc, **claim);
  return Status::ok();
}

// The driver's turn for evaluations, after its admission pass: the queued ones whose claims were
// granted start; one without a claim (lost with an old store) claims again.
Status ServiceImpl::drive_evaluations_locked() {
  auto queued = store_->list_evaluations({"QUEUED"});
  if (!queued.is_ok()) return queued.status();
  if (queued->empty()) return Status::ok();
  auto claims = claims_by_owner();
  if (!claims.is_ok()) return claims.status();
  for (json& doc : *queued) {
    if (doc.value("cancelRequested", false)) continue;
    auto it = claims->find(doc["evaluationId"].get<std::string>());
    if (it == claims->end()) {
      TRAINER_RETURN_IF_ERROR(queue_evaluation_locked(doc));
    } else if (it->second.state == "GRANTED") {
      TRAINER_RETURN_IF_ERROR(launch_evaluation_locked(doc, it->second));
    }
  }
  return Status::ok();
}

// An open evaluation's claim as admission sees it now: {pool, devices, state, since}.
Status ServiceImpl::show_claim_state(json* doc) {
  const std::string phase = doc->value("phase", std::string());
  if (phase != "QUEUED" && phase != "RUNNING") return Status::ok();
  auto claim = evaluation_claim((*doc)["evaluationId"].get<std::string>());
  if (!claim.is_ok()) return claim.status();
  if (!*claim) return Status::ok();
  (*doc)["claim"] = {{"pool", (*claim)->pool},
                     {"devices", (*claim)->devices},
                     {"state", (*claim)->state},
                     {"since", (*claim)->since},
                     {"deviceIds", (*claim)->device_ids}};
  return Status::ok();
}

Status ServiceImpl::release_evaluation_claim_locked(const std::string& id) {
  TRAINER_RETURN_IF_ERROR(store_->delete_claim(id));
  return capacity_.admit_locked();
}

// What an ended evaluation cost: the device time its claim held while its job ran. A CPU
// pool's device is a slot, not a GPU: its time is device time, not GPU time.
json ServiceImpl::evaluation_cost(const json& doc, double ended) const {
  const double seconds = std::max(0.0, ended - doc.value("startedAtSeconds", ended));
  const json claim = doc.value("claim", json::object());
  const std::string pool_name = claim.value("pool", std::string());
  const int devices = claim.value("devices", kEvaluationDevices);
  const PoolConfig* pool = capacity_.pool_named(pool_name);
  const bool gpu = pool && pool->accelerator != "cpu";
  return json{{"seconds", seconds},
              {"pool", pool_name.empty() ? json(nullptr) : json(pool_name)},
              {"devices", devices},
              {"deviceSeconds", seconds * devices},
              {"gpuSeconds", gpu ? seconds * devices : 0.0}};
}

// The job's environment and device count from its granted claim: a GPU pool's devices are
// CUDA devices (CUDA_VISIBLE_DEVICES), a CPU pool's are slots.
void ServiceImpl::evaluation_devices(const store::ClaimRow& claim, json* spec,
                                     std::vector<std::pair<std::string, std::string>>* env) const {
  const PoolConfig* pool = capacity_.pool_named(claim.pool);
  if (!pool || pool->accelerator == "cpu") return;
  (*spec)["gpus"] = claim.devices;
  std::string visible;
  for (int d : claim.device_ids) visible += (visible.empty() ? "" : ",") + std::to_string(d);
  if (!visible.empty()) env->emplace_back("CUDA_VISIBLE_DEVICES", visible);
}

}  // namespace trainer::service

// Evaluations admitted like runs: each one claims a device of the pool a one-device run would
// take, counted against its workload's quota, and waits QUEUED until admission grants it. The
// claim is released when it ends; its cost is the device time it held.
#include <algorithm>
#include <filesystem>

#include "service/artifact_store.h"
#include "service/evaluations.h"
#include "service/lost_attempts.h"

namespace trainer::service {
namespace {

constexpr int kEvaluationDevices = 1;

}  // namespace

Result<std::optional<store::ClaimRow>> Evaluations::evaluation_claim(const std::string& id) {
  return core_.store->get_claim(id);  // its own claim, not every claim (a queue of thousands)
}

// Makes the evaluation's claim (once) and applies admission; the evaluation's task launches its
// job once the claim is granted.
Status Evaluations::claim_evaluation_locked(json& doc) {
  const std::string id = doc["evaluationId"].get<std::string>();
  auto existing = evaluation_claim(id);
  if (!existing.is_ok()) return existing.status();
  if (!*existing) {
    auto pool = capacity_.choose_pool(kEvaluationDevices, kEvaluationDevices);
    if (!pool.is_ok()) return pool.status();
    store::ClaimRow c;
    c.owner = id;
    c.kind = "EVALUATION";
    c.workload_id = doc["workload"].is_object() ? doc["workload"].value("id", std::string()) : "";
    c.pool = (*pool)->name;
    c.devices = kEvaluationDevices;
    c.state = "QUEUED";
    c.since = core_.now_rfc3339();
    TRAINER_RETURN_IF_ERROR(core_.store->insert_claim(c));
    doc["claim"] = {{"pool", c.pool}, {"devices", c.devices}};
    TRAINER_RETURN_IF_ERROR(core_.store->put_evaluation(doc));
  }
  return capacity_.admit_locked();
}

// An open evaluation's claim as admission sees it now: {pool, devices, state, since}.
Status Evaluations::show_claim_state(json* doc) {
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

Status Evaluations::release_evaluation_claim_locked(const std::string& id) {
  TRAINER_RETURN_IF_ERROR(capacity_.release_claim(id));
  return capacity_.admit_locked();
}

// What an ended evaluation cost: the device time its claim held while its job ran. A CPU
// pool's device is a slot, not a GPU: its time is device time, not GPU time.
json Evaluations::evaluation_cost(const json& doc, double ended) const {
  const double seconds = std::max(0.0, ended - doc.value("startedAtSeconds", ended));
  const json claim = doc.value("claim", json::object());
  const std::string pool_name = claim.value("pool", std::string());
  const int devices = claim.value("devices", kEvaluationDevices);
  const PoolConfig* pool = capacity_.pool_named(pool_name);
  const bool gpu = pool && pool->accelerator != "cpu";
  return json{{"seconds", seconds},
              {"deviceKind", gpu ? "GPU" : "CPU"},
              {"pool", pool_name.empty() ? json(nullptr) : json(pool_name)},
              {"devices", devices},
              {"deviceSeconds", seconds * devices},
              {"gpuSeconds", gpu ? seconds * devices : 0.0}};
}

// The job request of an evaluation's attempt on its granted claim (kind evaluate: trainer-job
// evaluate --spec SPEC). A GPU pool's devices are the job's GPUs (the spec's `gpus`); a CPU
// pool's are slots.
backend::JobSpec Evaluations::evaluation_job_spec(const json& doc, const store::ClaimRow& claim, int64_t attempt,
                                                  json* spec) const {
  const std::string id = doc["evaluationId"].get<std::string>();
  const std::filesystem::path dir = evaluation_dir(id);
  const PoolConfig* pool = capacity_.pool_named(claim.pool);
  const bool gpu_pool = pool && pool->accelerator != "cpu";
  backend::JobSpec job;
  job.kind = protocol::JobKind::kEvaluate;
  job.run_id = id;
  job.attempt = attempt;
  if (doc["workload"].is_object()) job.identity.workload = doc["workload"].value("name", std::string());
  job.identity.base_model = doc["model"].value("baseModel", std::string());
  job.identity.profile = pool ? pool->accelerator : "";
  job.plan_path = (dir / "spec.json").string();
  job.output_dir = (dir / "output").string();
  job.events_path = (dir / ("events-" + std::to_string(attempt) + ".jsonl")).string();
  job.log_path = (dir / "job.log").string();
  job.catalog_url = core_.job_catalog_urls();  // where it reports its events and log (job_reports.cpp)
  job.catalog_ca_file = core_.job_catalog_ca_file();
  // A cluster job fetches its inputs from the S3 store (stage_evaluation_inputs()).
  if (const ArtifactStoreConfig& store = core_.options.config.artifact_store; !store.uri.empty()) {
    job.artifact_root = store.uri;
    job.store = artifact_store_access(store);
  }
  job.job_id = id + "-" + std::to_string(attempt);
  job.gpus = gpu_pool ? claim.devices : 0;
  job.cpus = 1;
  job.device_ids = claim.device_ids;
  // Its heartbeat: a job silent past limits.jobSilenceSeconds is stopped as hung (evaluation_tasks.cpp).
  job.heartbeat_seconds = heartbeat_seconds_for(core_.options.config.limits.job_silence_seconds);
  if (gpu_pool) (*spec)["gpus"] = claim.devices;
  return job;
}

}  // namespace trainer::service

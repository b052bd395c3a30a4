// The model registry (docs/registry.md): registered models, BASE for baselines and ADAPTER for
// trained or imported LoRA adapters, with their lineage and cost; their listing and lookup; the
// import of a PEFT LoRA folder (trained_models.cpp); and the registration of snapshot weights in
// durable steps, each a task of the kernel's "registration" kind: PENDING (a registration hold on
// the source snapshot), COPYING while its work copies the weights into the registry, then
// REGISTERED (the hold released) or FAILED until registered again (registration.cpp). The names
// and helpers its files share with the rest of src/service are in registry.h.
//
// Thread safety: every method may be called from any thread; register_model(), register_snapshot()
// and resume() take the core's mu; the *_locked methods, register_completed_run() and step_task()
// run with it held, inside a store transaction; list(), get(), resolve() and snapshot_candidate()
// only read the store.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "service/base_models.h"
#include "service/registry.h"
#include "service/service_core.h"
#include "service/snapshot_catalog.h"
#include "service/workloads.h"

namespace trainer::service {

// The registration's phase table (the task kernel's "registration" kind): PENDING, COPYING, then
// REGISTERED, or FAILED until registered again.
const tasks::PhaseTable& registration_phase_table();

class ModelRegistry {
 public:
  ModelRegistry(ServiceCore& core, BaseModels& base_models, Workloads& workloads, SnapshotCatalog& catalog);
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // Service::register_trained_model, list_trained_models, get_trained_model (trained_models.cpp).
  Result<std::pair<json, bool>> register_model(const json& descriptor);
  Result<json> list(const TrainedModelQuery& query);
  Result<json> get(const std::string& ref);
  // Service::trained_model_file (trained_models.cpp): one file of an adapter's PEFT folder.
  Result<std::string> file(const std::string& ref, const std::string& name);
  // Service::merged_trained_model, merged_trained_model_file (merged_models.cpp): the adapter
  // merged into its base model's weights, a Hugging Face model folder made once by
  // `trainer-job merge` (Backend::run_tool) into DATA/merged-models/ID and served file by file.
  Result<json> merged(const std::string& ref);
  Result<std::string> merged_file(const std::string& ref, const std::string& name);
  // Service::register_snapshot, snapshot_candidate (registration.cpp).
  Result<std::pair<json, bool>> register_snapshot(const std::string& snapshot_ref);
  Result<json> snapshot_candidate(const std::string& snapshot_ref);

  // The kernel's "registration" kind, added by ServiceImpl after the run kind.
  tasks::TaskKind& task_kind() { return tasks_; }
  // start(): PENDING and COPYING models of an older store get their task.
  Status resume();

  // For the other parts:
  // A registered model (its stored document) by id or unique id prefix; errors name `field`.
  Result<json> resolve(const std::string& ref, const std::string& field);
  // The BASE model of a selected, ready base model, registered when new; mu held.
  Result<json> register_base_locked(const json& base_model, const std::string& field);
  // Starts the registration of a committed snapshot's weights (PENDING, a registration hold on
  // the snapshot); the existing model when there is one. `folder_source` ({kind: run, runId,
  // path}), when not null, registers a run's adapter folder instead (a run without a final
  // snapshot; `snapshot` is then unused). mu held, inside a store transaction.
  Result<std::pair<json, bool>> start_registration_locked(json snapshot, const RunRecord& run,
                                                          const json& folder_source);
  // finalize(): registers the final snapshot's weights of a completed run (its adapter folder when
  // it has none); sets run.view.modelId. mu held, inside the run's transaction.
  Status register_completed_run(RunRecord& run);

 private:
  // `register_model`'s two variants: a BASE model of a selected base model, and the import of a
  // PEFT LoRA folder (checked, loaded once by the engine, copied to artifact storage).
  Result<std::pair<json, bool>> register_base_descriptor(const json& serving_model, const AllowedBaseModel& allowed);
  Result<std::pair<json, bool>> import_adapter(const json& serving_model, const AllowedBaseModel& allowed,
                                               const std::string& description,
                                               const std::optional<std::string>& workload_ref);
  // The engine loads the adapter folder `dir` onto the base model at `cache` and scores one row;
  // then its two files are published under `key`.
  Status publish_imported_adapter(const std::string& dir, const std::string& cache, const std::string& base_name,
                                  const std::string& id, const std::string& key);

  // A REGISTERED ADAPTER model's document by id or prefix; FailedPrecondition naming what it is
  // otherwise (a BASE model, a model not yet REGISTERED).
  Result<json> registered_adapter(const std::string& ref);
  // The merged folder of the REGISTERED ADAPTER `model`, made when missing; its path.
  Result<std::string> merged_folder(const json& model);

  // One step of a registration (the kernel's "registration" kind; mu held).
  Status step_task(tasks::Step& step);
  // One attempt of a register_candidate operation's stage (service telemetry).
  void registration_attempt(telemetry::ServiceStage stage, telemetry::ServiceOutcome outcome,
                            std::optional<telemetry::ServiceFailureReason> reason = std::nullopt);
  // Copies one registration's weights into the registry (the task's work, off the driver).
  Status copy_registration(const json& model);
  // What the copy came to, on the model: REGISTERED (hold released) or FAILED (mu held).
  Status record_registration_locked(json model, const Status& copied);

  ServiceCore& core_;
  BaseModels& base_models_;
  Workloads& workloads_;
  SnapshotCatalog& catalog_;
  tasks::FunctionKind tasks_;
  // Serialises merges (not core_.mu: a merge takes minutes on a large model): a second request
  // for a model being merged waits, then finds its folder.
  std::mutex merge_mu_;
};

}  // namespace trainer::service

// Evaluations (docs/evaluations.md): a model answers a dataset's prompts and a grader scores the
// answers. What is evaluated with what, and the evaluation's record (evaluations.cpp); its claim
// on a device, admitted like a run's, and its cost (evaluation_admission.cpp); each evaluation a
// task of the kernel's "evaluation" kind, QUEUED, RUNNING, then COMPLETED, FAILED or CANCELLED,
// its job `trainer-job evaluate` started through the backend and followed through the job
// protocol's events (evaluation_tasks.cpp).
//
// Thread safety: every public method may be called from any thread and takes the core's mu where
// it changes an evaluation; methods named *_locked need it held (service_core.h).
#pragma once

#include <optional>
#include <string>

#include "service/base_models.h"
#include "service/bundles.h"
#include "service/capacity.h"
#include "service/datasets.h"
#include "service/model_registry.h"
#include "service/service_core.h"
#include "service/workloads.h"

namespace trainer::service {

// The evaluation's phase table (the kernel's "evaluation" kind): QUEUED, RUNNING, then
// COMPLETED, FAILED or CANCELLED.
const tasks::PhaseTable& evaluation_phase_table();

class Evaluations {
 public:
  Evaluations(ServiceCore& core, BaseModels& base_models, Datasets& datasets, Bundles& bundles, Capacity& capacity,
              Workloads& workloads, ModelRegistry& registry);

  // Service::start_evaluation, list_evaluations, get_evaluation, evaluation_report,
  // evaluation_rows, cancel_evaluation, annotate_evaluation.
  Result<json> start(const json& body);
  Result<json> list(const EvaluationListQuery& query);
  Result<json> get(const std::string& ref);
  Result<json> report(const std::string& ref);
  Result<json> rows(const std::string& ref, int64_t limit, int64_t offset);
  Result<json> cancel(const std::string& ref);
  Result<json> annotate(const std::string& ref, const json& body);

  // For the other parts:
  // start() with mu held, in its own transaction or inside the caller's (a comparison's step).
  Result<json> start_locked(const json& body);
  // cancel() of evaluation `id` with core_.mu held (a pipeline's cancel); ok when it already ended.
  Status cancel_locked(const std::string& id);
  // What `model` names: a registered model, a completed run's adapter on its base model, or a
  // ready base model, in that order: {ref, kind, baseModel, baseModelHash, adapterPath?,
  // artifactKey?, artifactUri?, runId?, modelId?, workloadId?}; errors name "model".
  Result<json> resolve_model(const std::string& ref);
  // start(): open evaluations of an older store get their task.
  Status resume(std::string* summary);
  // The kernel's "evaluation" kind, added by ServiceImpl.
  tasks::TaskKind& task_kind() { return tasks_; }

 private:
  std::string evaluation_dir(const std::string& id) const;
  Result<json> resolve_evaluation(const std::string& ref, const std::string& field);
  Result<json> evaluated_registered_model(const std::string& ref, const json& model);
  // The adapter folder an evaluation's job reads (a registered model's copy fetched into `dir`).
  Result<std::string> evaluation_adapter(const json& model, const std::string& dir);
  void record_model_evaluation(const json& evaluation);  // mu held: lists it on its registered model
  // mu held: writes its spec, starts its job on the devices of its granted claim, moves it RUNNING.
  Status launch_evaluation_locked(json& doc, const store::ClaimRow& claim);

  // evaluation_admission.cpp; mu held for the *_locked.
  Result<std::optional<store::ClaimRow>> evaluation_claim(const std::string& id);
  Status claim_evaluation_locked(json& doc);  // claims once, admits
  Status release_evaluation_claim_locked(const std::string& id);
  Status show_claim_state(json* doc);  // an open evaluation's claim as admission sees it now
  json evaluation_cost(const json& doc, double ended) const;
  // The job request of attempt `attempt` of an evaluation's job on its granted claim; sets the
  // spec's `gpus` for a GPU pool.
  backend::JobSpec evaluation_job_spec(const json& doc, const store::ClaimRow& claim, int64_t attempt, json* spec) const;

  // evaluation_tasks.cpp; mu held.
  Status step_evaluation_task(tasks::Step& step);  // the kernel's "evaluation" kind
  Status follow_evaluation_locked(json& doc);      // RUNNING: its job's events, its end
  Status next_evaluation_attempt_locked(json& doc);  // RUNNING, its attempt lost: the next one
  void watch_evaluation_silence(json& doc, const backend::JobHandle& handle);  // RUNNING: stops a hung job
  void close_evaluation_attempt(json& doc, const std::string& cause, std::optional<int> exit_code,
                                const std::string& reason = "");
  Status end_evaluation_locked(json& doc, const std::string& phase, const std::string& failure = "");
  Status cancel_evaluation_locked(json& doc);

  ServiceCore& core_;
  BaseModels& base_models_;
  Datasets& datasets_;
  Bundles& bundles_;
  Capacity& capacity_;
  Workloads& workloads_;
  ModelRegistry& registry_;
  tasks::FunctionKind tasks_;
};

}  // namespace trainer::service

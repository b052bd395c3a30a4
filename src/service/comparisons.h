// Comparisons (docs/comparisons.md): a source snapshot scored against candidate and branch models
// under one contract pinned at create time (the dataset's content hash, the grader, the
// completion-token ceiling). create() resolves the request, starts the source's registration and
// commits the comparison (comparisons.cpp); each comparison is then a task of the kernel's
// "comparison" kind, which starts one evaluation per target whose model is registered and records
// the outcome (comparison_steps.cpp).
//
// Thread safety: every public method may be called from any thread; create() and the step take
// the core's mu (service_core.h).
#pragma once

#include <string>
#include <utility>

#include "service/datasets.h"
#include "service/evaluations.h"
#include "service/model_registry.h"
#include "service/service_core.h"
#include "service/snapshot_catalog.h"

namespace trainer::service {

// The comparison's phase table (the kernel's "comparison" kind): PREPARING, RUNNING, then
// COMPLETED, PARTIAL or FAILED.
const tasks::PhaseTable& comparison_phase_table();

class Comparisons {
 public:
  Comparisons(ServiceCore& core, Datasets& datasets, SnapshotCatalog& catalog, ModelRegistry& registry,
              Evaluations& evaluations);

  // Service::create_comparison, get_comparison, list_comparisons.
  Result<std::pair<json, bool>> create(const json& body);
  Result<json> get(const std::string& ref);
  Result<json> list(const ComparisonListQuery& query);

  // For the other parts:
  // start(): open comparisons of an older store get their task.
  Status resume();
  // The kernel's "comparison" kind, added by ServiceImpl.
  tasks::TaskKind& task_kind() { return tasks_; }

 private:
  Result<json> resolve_comparison(const std::string& ref, const std::string& field);
  // The targets of a create request, resolved (mu held): [{target, kind, runId?, modelId?,
  // status, failure?}]; `fan` gets one {parentRunId, seen} per --all-branches parent.
  Result<json> comparison_targets_locked(const json& body, const json& source_snapshot, json& fan);
  // One step of a comparison (mu held, inside the step's transaction): starts the evaluations of
  // targets whose model is registered, reads the ended ones, and ends it once every target has
  // an outcome.
  Status step_comparison_task(tasks::Step& step);
  Status step_comparison_target_locked(const json& doc, size_t index, json& target);
  // A comparison as `comparisons get` shows it: the stored one plus config differences and spend.
  json present_comparison(const json& doc);

  ServiceCore& core_;
  Datasets& datasets_;
  SnapshotCatalog& catalog_;
  ModelRegistry& registry_;
  Evaluations& evaluations_;
  tasks::FunctionKind tasks_;
};

}  // namespace trainer::service

// Dataset analyses (docs/api.md, "Dataset analyses"): a dataset's token lengths under a base
// model's tokenizer and chat template, measured in the background (`trainer datasets analyze`),
// where `datasets measure` (Datasets::measure) waits for the answer. Each analysis is a task of
// the kernel's "dataset_analysis" kind: PENDING, then RUNNING while `trainer-job analyze` runs off
// the driver (Backend::run_tool), then COMPLETED with the measurement or FAILED naming why. Work a
// stopped trainerd had in flight is started again as the next attempt (at most kMaxAttempts).
//
// Thread safety: every public method may be called from any thread; create() and the step take
// the core's mu (service_core.h).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "service/base_models.h"
#include "service/datasets.h"
#include "service/service_core.h"

namespace trainer::service {

// The analysis' phase table (the kernel's "dataset_analysis" kind): PENDING, RUNNING, then
// COMPLETED or FAILED.
const tasks::PhaseTable& dataset_analysis_phase_table();

class DatasetAnalyses {
 public:
  // The attempts of one analysis: a trainerd that stopped while one ran starts the next.
  static constexpr int kMaxAttempts = 3;
  // One attempt's limit, seconds (a large dataset on a slow tokenizer).
  static constexpr int kAttemptSeconds = 3600;

  DatasetAnalyses(ServiceCore& core, Datasets& datasets, BaseModels& base_models);

  // Service::analyze_dataset: body {baseModel, maxSeqLength?} for the dataset `ref`; the new
  // analysis (201), or the open or completed one of the same dataset, model and length (200).
  Result<std::pair<json, bool>> create(const std::string& ref, const json& body);
  // Service::list_dataset_analyses: {analyses: [...]} of the dataset `ref`, newest first.
  Result<json> list(const std::string& ref);
  // Service::get_dataset_analysis: one analysis of the dataset `ref` by its id.
  Result<json> get(const std::string& ref, const std::string& id);

  // For the other parts:
  // The kernel's "dataset_analysis" kind, added by ServiceImpl.
  tasks::TaskKind& task_kind() { return tasks_; }

 private:
  // One step of an analysis (mu held, inside the step's transaction): records the outcome of the
  // attempt that ended, or launches the next attempt (`trainer-job analyze` off the driver).
  Status step_task(tasks::Step& step);
  // The stored document as the API shows it (no bookkeeping).
  static json present(const json& analysis);

  ServiceCore& core_;
  Datasets& datasets_;
  BaseModels& base_models_;
  tasks::FunctionKind tasks_;
};

}  // namespace trainer::service

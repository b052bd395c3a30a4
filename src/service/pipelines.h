// Pipelines (docs/pipelines.md): stages in one submission, each a run, an evaluation, a curation or
// a distillation linked to the pipeline, later stages taking earlier outputs as `@NAME` (pipeline_plan.h). Each pipeline is
// a task of the kernel's "pipeline" kind: RUNNING while its stages run one after the other,
// INTERRUPTED (idle) when a stage's run or evaluation ended without completing, until
// `pipelines resume` starts that stage again; COMPLETED, FAILED (a gate's mean score below its
// minimum) or CANCELLED. A stage's run or evaluation is created, and its id recorded on the stage,
// in the one transaction of the step that starts it: a restarted trainerd finds the id and follows
// that run, never starting a stage twice.
//
// Thread safety: every public method may be called from any thread; they and the step take the
// core's mu (service_core.h).
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "service/curations.h"
#include "service/datasets.h"
#include "service/distillations.h"
#include "service/evaluations.h"
#include "service/pipeline_plan.h"
#include "service/service_core.h"

namespace trainer::service {

// The pipeline's phase table (the kernel's "pipeline" kind).
const tasks::PhaseTable& pipeline_phase_table();

class Pipelines {
 public:
  // What the runs' owner (ServiceImpl) does for a train stage.
  struct Hooks {
    // A dry run of run plan `plan` ({plan, warnings?}), or why it would be refused; no lock held.
    std::function<Result<json>(const json& plan)> dry_run;
    // Starts the run of `plan` as stage `stage` of pipeline `pipeline_id` (mu held, inside the
    // step's transaction): the run as `runs get` shows it.
    std::function<Result<json>(const json& plan, const std::string& pipeline_id, const std::string& stage)> start_run_locked;
    // Cancels run `id` (mu held).
    std::function<Result<json>(const std::string& id)> cancel_run_locked;
  };

  Pipelines(ServiceCore& core, Datasets& datasets, Evaluations& evaluations, Curations& curations,
            Distillations& distillations, Hooks hooks);

  // Service::start_pipeline: the plan checked (every stage, before anything is spent), then the
  // new pipeline (true), or with `dry_run` each stage's resolution (false).
  Result<std::pair<json, bool>> start(const json& plan, bool dry_run, bool show_resolved);
  Result<json> list(const std::string& phase);  // {pipelines: [...]} newest first; "open" = unfinished
  Result<json> get(const std::string& ref);
  Result<json> resume(const std::string& ref);  // {resumed, pipeline}
  Result<json> cancel(const std::string& ref);
  Result<json> annotate(const std::string& ref, const json& body);  // {description}

  // For the other parts:
  // The kernel's "pipeline" kind, added by ServiceImpl.
  tasks::TaskKind& task_kind() { return tasks_; }
  // The active-pipelines gauge from the store (start(), and after every change of phase).
  void refresh_active();

 private:
  Result<json> resolve_locked(const std::string& ref);
  // Checks one stage beyond its shape (names that resolve now); with `dry_run`, its resolution.
  Result<json> check_stage(const pipeline::Stage& stage, size_t index, bool show_resolved);
  Status step_task(tasks::Step& step);
  // Starts stage `i` of `doc` (mu held, in the step's transaction): its run, evaluation,
  // curation or distillation, its id.
  Status start_stage_locked(json& doc, size_t i);
  // Reads the outcome of stage `i`'s run, evaluation, curation or distillation; true when it ended.
  Result<bool> follow_stage_locked(json& doc, size_t i);
  void stage_ended(json& stage, bool success);
  Status end_locked(json& doc, const std::string& phase);
  static json present(const json& doc);

  ServiceCore& core_;
  Datasets& datasets_;
  Evaluations& evaluations_;
  Curations& curations_;
  Distillations& distillations_;
  Hooks hooks_;
  tasks::FunctionKind tasks_;
};

}  // namespace trainer::service

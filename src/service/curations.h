// Curations (docs/curations.md): a judge scores every candidate conversation of some sessions
// once, and those at or above a threshold are registered as a new version of a dataset (the
// dataset's name moves to the new rows). Each curation is a task of the kernel's "curation"
// kind: PENDING, JUDGING while the judging runs off the driver (a few calls at a time, each score
// stored as it arrives), then COMPLETED with the registered dataset, or FAILED naming why. A
// trainerd that stopped mid-way resumes at the next unjudged candidate: a stored score is never
// asked for again. Idempotent by curationId; not cancellable (it runs to its end).
//
// Thread safety: every public method may be called from any thread; apply() and the step take
// the core's mu; the judging work takes it only to register the dataset.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "service/curation_judge.h"
#include "service/datasets.h"
#include "service/service_core.h"
#include "service/sessions.h"

namespace trainer::service {

// The curation's phase table (the kernel's "curation" kind): PENDING, JUDGING, then COMPLETED or
// FAILED.
const tasks::PhaseTable& curation_phase_table();

class Curations {
 public:
  // Judge calls in flight at once, per curation.
  static constexpr int kConcurrency = 4;
  // Candidates in a row without a verdict (after their retries) that fail the curation.
  static constexpr int kMaxConsecutiveFailures = 20;

  Curations(ServiceCore& core, Sessions& sessions, Datasets& datasets)
      : core_(core), sessions_(sessions), datasets_(datasets),
        tasks_(curation_phase_table(), [this](tasks::Step& s) { return step_task(s); }) {}

  // Service::apply_curation: body {curationId, sessionHashes, source, threshold, dataset,
  // systemPrompt?, judge, graderInstructions?}; the new curation (true), or the one of that id
  // when the request is the same (false). The same id with another request is refused, naming it.
  Result<std::pair<json, bool>> apply(const json& body);
  // apply() with mu held, inside the caller's transaction when it has one (a pipeline's curate
  // stage starts its curation in the step that records its id).
  Result<std::pair<json, bool>> apply_locked(const json& body);
  // A request without its curationId checked as apply() would check it (its fields, its
  // sessions, its judge), creating nothing: a pipeline's curate stage at submission.
  Status check(const json& body);
  // Service::get_curation: one curation by its id, with its progress and rejections.
  Result<json> get(const std::string& id);
  // Service::list_curations: {curations: [...]} newest first (without their rejections).
  Result<json> list();

  // For the other parts:
  // The kernel's "curation" kind, added by ServiceImpl.
  tasks::TaskKind& task_kind() { return tasks_; }

 private:
  // The request checked and with its defaults: what idempotency compares.
  Result<json> check_request(const json& body);
  // The document of a new curation `id` of checked request `request`: its sessions found (of its
  // source) and counted, its judge found.
  Result<json> new_document(const std::string& id, const json& request);
  // How the judge named by the request is reached: a judge of trainerd's configuration, or a model
  // served at one of its endpoints ({endpointId, model}).
  Result<json> find_judge_target(const std::string& name);
  Result<CurationJudge> judge_of(const json& doc);
  // One step (mu held, inside the step's transaction): records the judging's outcome, or
  // launches it.
  Status step_task(tasks::Step& step);
  // The judging and the registration, off the driver: every unjudged candidate asked, each
  // score stored; then the accepted ones registered as the dataset's new version.
  Result<json> judge_and_register(const json& doc);
  // The stored document with its live progress; `rejections` lists each rejected candidate.
  Result<json> present(const json& doc, bool rejections);

  ServiceCore& core_;
  Sessions& sessions_;
  Datasets& datasets_;
  tasks::FunctionKind tasks_;
};

}  // namespace trainer::service

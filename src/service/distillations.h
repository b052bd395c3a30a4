// Distillations (docs/distillations.md): a teacher (a judge of trainerd's configuration, or a model
// served at one of its endpoints) answers every decision of a dataset's rows (each assistant turn,
// from the messages before it and the row's tools), and the accepted answers, in place of the
// source's turns, are registered as a new version of a dataset. Each distillation is a task of the
// kernel's "distillation" kind: PENDING, SMOKE_TEST (the smoke decisions, which must pass), then
// DISTILLING (the rest, a chunk at a time, each chunk stored when complete), ASSEMBLING (the rows
// registered through Datasets), COMPLETED; or FAILED, or CANCELLED; PAUSED waits idle for a
// resume. A pause takes effect after the chunk in flight; a trainerd that stopped resumes at the
// next unstored chunk, so a crash loses at most one chunk's answers.
//
// Thread safety: every public method may be called from any thread; requests and the step take the
// core's mu; the work off the driver takes it only to register the dataset.
#pragma once

#include <string>
#include <vector>

#include "service/chat_target.h"
#include "service/datasets.h"
#include "service/service_core.h"
#include "service/workloads.h"

namespace trainer::service {

// The distillation's phase table (the kernel's "distillation" kind).
const tasks::PhaseTable& distillation_phase_table();

class Distillations {
 public:
  // The default smoke pass: the first this many decisions, all but one accepted.
  static constexpr size_t kSmokeDecisions = 16;
  // Decisions per stored chunk: what a pause waits for, and a crash may lose.
  static constexpr size_t kChunkDecisions = 32;
  // Decisions in a row without an answer (after their retries) that fail the distillation.
  static constexpr int kMaxConsecutiveFailures = 20;
  // --replicas at most (concurrent teacher calls).
  static constexpr int kMaxReplicas = 64;

  Distillations(ServiceCore& core, Datasets& datasets, Workloads& workloads)
      : core_(core),
        datasets_(datasets),
        workloads_(workloads),
        tasks_(distillation_phase_table(), [this](tasks::Step& s) { return step_task(s); }) {}

  // Service::create_distillation: body {workload, teacher, from, to, replicas?, maxTokens?,
  // temperature?, topP?, seed?, instructions?, smoke?: ["ROW:MSG", ...]}; every check made before
  // anything is stored.
  Result<json> create(const json& body);
  // Service::get_distillation and friends: `ref` is a distillation id or an unambiguous prefix.
  Result<json> get(const std::string& ref);
  Result<json> list();  // {distillations: [...]} newest first
  // {rejections: [{row, message, reason, chunk}]}, at most `limit` (0 = all), in decision order.
  Result<json> rejections(const std::string& ref, int64_t limit);
  Result<json> pause(const std::string& ref);
  Result<json> resume(const std::string& ref);
  Result<json> cancel(const std::string& ref);

  // For a pipeline's distill stage (mu held, inside the step's transaction):
  // The request checked as create() checks it, creating nothing (at the pipeline's submission);
  // with `source_later` its `from` is an earlier stage's output, not made yet: its name and rows
  // are checked when the distillation is created.
  Status check(const json& body, bool source_later);
  // create() under the id `id` (12 hex digits, derived from the pipeline, stage and attempt); the
  // distillation of that id when one is stored already, so a repeated step starts nothing twice.
  Result<json> create_locked(const json& body, const std::string& id);
  // cancel() of the distillation `id`.
  Result<json> cancel_locked(const std::string& id);

  // For the other parts:
  // The kernel's "distillation" kind, added by ServiceImpl.
  tasks::TaskKind& task_kind() { return tasks_; }

 private:
  // The stored document of `ref` (an id or an unambiguous prefix); not_found naming `distillation`.
  Result<json> find(const std::string& ref);
  // One step (mu held, inside the step's transaction): takes the work's outcome and moves the
  // phase, or launches the work of the phase it is in.
  Status step_task(tasks::Step& step);
  // The works off the driver, one per phase: answer the smoke chunk and judge it; answer every
  // other chunk (stopping early for a pause or a cancel: {stopped: PHASE}); assemble and register.
  Result<json> run_smoke(const json& doc);
  Result<json> run_rest(const json& doc);
  Result<json> assemble(const json& doc);
  // Answers the decisions of chunk `chunk` and stores them as one chunk; {stopped: PHASE} when the
  // distillation was cancelled meanwhile (nothing stored).
  Result<json> answer_chunk(const json& doc, const std::vector<json>& rows,
                            const std::vector<json>& decisions, int64_t chunk);
  // Every check of a create request; the document to store, without its id (check()'s
  // `source_later`: the source's checks left out, and the document not to be stored).
  Result<json> check_request(const json& body, bool source_later = false);
  // Stores a new distillation's document and its task (mu held).
  Result<json> store_new_locked(json doc);
  // A pause, resume or cancel request: the phase it may come from checked, the document and task
  // moved; request_locked() with mu held, of a distillation's full id.
  Result<json> request(const std::string& ref, const std::string& what);
  Result<json> request_locked(const std::string& id, const std::string& what);
  // The stored document with its progress from the stored chunks.
  Result<json> present(const json& doc);

  ServiceCore& core_;
  Datasets& datasets_;
  Workloads& workloads_;
  tasks::FunctionKind tasks_;
};

}  // namespace trainer::service

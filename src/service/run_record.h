// The typed run record: what the service stores for one run, and how it reads it back.
//
// The stored document is the run as the API shows it (docs/api.md, "Run") plus the service's
// bookkeeping under "_" (never shown). from_json() validates every field the service reads, so
// a damaged document is a Status naming the field, never an exception in the driver.
// Internal to src/service.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "common/status.h"
#include "service/phases.h"

namespace trainer::service {

// How the job of the current attempt said it ended (its last outcome event), if it did.
enum class JobOutcome { kNone, kCompleted, kFailed, kCancelled, kPaused };

// The job of the current attempt, as the driver follows it.
struct JobRecord {
  backend::JobHandle handle;         // the backend's opaque handle, stored as it is
  double started_at = 0;             // wall seconds when it was started (or adopted)
  std::string events_path;           // the job's events file
  std::string log_path;              // its stdout and stderr
  std::string output_dir;            // its --output folder
  std::string job_id;                // the attempt's id to the API (its posts); "" = an older job, file only
  // The lease fence the job was started under (its TRAINER_LAUNCH_FENCE): only a job carrying it
  // may train (Service::confirm_job_start). 0 = unknown (a job adopted from a backend that cannot
  // tell, or recorded before fences): its job's start is not checked.
  int64_t launch_fence = 0;
  int64_t seq = 0;                   // events applied (job_event_source.h's cursor)
  int64_t offset = 0;                // bytes of the events file already applied; -1 once read from the store
  std::optional<double> ended_at;    // wall seconds; set once its time is settled into the cost
  std::optional<double> end_guess;   // a job that ended while trainerd was down: its last sign of life
  std::optional<int> exit_code;      // how it exited, when known
  std::optional<double> heard_at;    // wall seconds when trainerd last read an event of it (its heartbeat too)
  std::optional<double> hung_at;     // wall seconds when trainerd stopped it for its silence (hung)
};

struct RunRecord {
  // ---- what the service decides on (also in the public document)
  std::string id;                              // runId: lowercase hex
  std::string workload_id;                     // workload.id (runs keep it across renames)
  std::string workload_name;                   // workload.name when the run was submitted
  std::string base_model;                      // the base model's user-facing name
  std::string method = "sft";                  // "sft" | "grpo" | "gspo"
  Phase phase = Phase::kSizingDataset;
  int attempt = 1;                             // 1-based
  std::optional<std::string> outcome;          // "COMPLETED" | "FAILED" | "CANCELLED" once ended
  std::optional<std::string> failure_reason;   // FAILED: why, for a person
  // The rest of the public document (plan, progress, latest, cost, phaseHistory, ...), kept as
  // the API shows it; to_json() writes the typed fields above over it.
  nlohmann::json view = nlohmann::json::object();

  // ---- bookkeeping (stored under "_", never shown)
  std::string request;                         // the submitted plan's text (submissionId replays)
  std::string pool;                            // pool the run claims devices from
  int devices = 1;                             // devices it claims
  double created_at = 0;                       // wall seconds at submission
  double entered_at = 0;                       // wall seconds when it entered its phase
  std::string dataset_key;                     // the training rows' storage key (datasets/HASH.jsonl)
  std::optional<std::string> validation_key;   // the validation rows' storage key
  int64_t rows = 0;                            // rows of the training dataset
  double accumulated_seconds = 0;              // device-seconds of ended attempts
  std::optional<std::string> base_model_sha;   // the base model's content hash, once ready (its
                                               // cache: BaseModels::cache_key)
  std::optional<JobRecord> job;                // the current attempt's job, once started
  JobOutcome job_outcome = JobOutcome::kNone;
  std::string job_reason;                      // kFailed: the job's reason
  std::optional<std::string> adapter_dir;      // kCompleted: where the job wrote the adapter
  nlohmann::json job_settings_sha;             // the job's settings hash (resolved event), or null
  // The engine's reports (job events engine_config and engine_runtime; `runs engine-config` and
  // `runs engine-runtime`): null until the job writes them. Each carries the attempt that wrote
  // it; a new attempt's engine_runtime starts afresh.
  nlohmann::json engine_config;                // {engine, config, attempt}
  nlohmann::json engine_runtime;               // {engine, attempt, rolloutEngine, trainer, model, memory}
  bool cancel_requested = false;
  std::optional<double> stop_sent_at;          // wall seconds when the stop request went out
  bool kill_sent = false;
  std::optional<Phase> failed_in;              // the phase a failed run failed in
  std::optional<Phase> terminal;               // the terminal phase CLEANING_UP leads to
  std::optional<int64_t> paused_step;          // kPaused: the step the job saved at
  std::optional<std::string> paused_snapshot;  // kPaused: the snapshot it committed
  bool paused_by_plan = false;                 // kPaused: at the plan's pauseAtStep
  std::optional<std::string> resume_from;      // the snapshot the current attempt restores, if any
  // The first attempt of the current stretch (the submission's, or a resume's): execution.
  // maxAttempts bounds the attempts from it on (attempts.cpp).
  int attempt_base = 1;
  std::optional<double> next_attempt_at;       // SUBMITTING after a lost attempt: not before this (wall seconds)
  // The run's trace (run_traces.h): 32 and 16 hex digits, set at submission; "" = a run an older
  // trainerd submitted, not traced. Every attempt joins it.
  std::string trace_id;
  std::string root_span_id;
  // A child run's parent's trace (its root span), which the child's root span links to; "" = none.
  std::string link_trace_id;
  std::string link_span_id;

  // The stored document.
  nlohmann::json to_json() const;
  // The document as the API shows it (no bookkeeping).
  nlohmann::json public_json() const;
  // Reads a stored document; a missing or mistyped field is invalid_field naming it.
  static Result<RunRecord> from_json(const nlohmann::json& doc);
};

// Parses and validates a stored run document's text (bounded nesting). Errors name the run.
Result<RunRecord> parse_run_record(const std::string& text, const std::string& id);

const char* job_outcome_name(JobOutcome outcome);

}  // namespace trainer::service

// The run phases: exactly the run.phase values of the specification (telemetry/registry.yaml,
// akka.optimize.training.run.phase), in lifecycle order.
// One table; names, order and meanings are read from here everywhere in the service.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "service/tasks/phase_table.h"

namespace trainer::service {

enum class Phase {
  kSizingDataset,   // reading the registered dataset's manifest: how much the run trains on
  kWaitingForBaseModel,  // waiting for the base model to finish preparing into the model cache
  kDeployingGrader,    // deploying the evaluation model or grader (runs with a judge; none in round 1)
  kWaitingForGrader,     // waiting for the grader endpoint to be healthy (runs with a judge)
  kWaitingForDevices,    // the run's claim is QUEUED: waiting for devices before the job is submitted
  kSubmitting,         // writing the resolved plan and starting the job on the backend
  kQueued,             // the job is submitted and waiting to be scheduled (not yet preparing)
  kPreparing,          // the job reads and tokenises its data, before its first step
  kTraining,           // the job trains
  kPausing,            // stopping the job and releasing devices on the way to PAUSED
  kPaused,             // suspended, devices released, awaiting resumption
  kFinalizing,         // registering the trained adapter and recording final metrics
  kCleaningUp,         // stopping the job and releasing its devices before a terminal phase
  kCompleted,          // terminal: trained, adapter produced
  kFailed,             // terminal: failed
  kCancelled,          // terminal: cancelled by a request
};

inline constexpr int kPhaseCount = 16;

const char* phase_name(Phase p);
std::optional<Phase> parse_phase(std::string_view name);
inline bool is_terminal(Phase p) {
  return p == Phase::kCompleted || p == Phase::kFailed || p == Phase::kCancelled;
}
// Every phase, in order.
Phase phase_at(int index);

// The run's phase table (the task kernel's "run" kind): every phase above, which transitions
// between them the service makes, which hold a claim, and that PAUSED waits idle for a resume.
const tasks::PhaseTable& run_phase_table();

}  // namespace trainer::service

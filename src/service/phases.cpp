#include "service/phases.h"

#include <cstdlib>
#include <cstdio>

namespace trainer::service {
namespace {
const char* const kNames[kPhaseCount] = {
    "SIZING_DATASET", "WAITING_FOR_BASE_MODEL", "DEPLOYING_GRADER", "WAITING_FOR_GRADER",
    "WAITING_FOR_DEVICES",  "SUBMITTING",          "QUEUED",           "PREPARING",
    "TRAINING",          "PAUSING",             "PAUSED",           "FINALIZING",
    "CLEANING_UP",       "COMPLETED",           "FAILED",           "CANCELLED",
};
}  // namespace

const char* phase_name(Phase p) { return kNames[static_cast<int>(p)]; }

std::optional<Phase> parse_phase(std::string_view name) {
  for (int i = 0; i < kPhaseCount; ++i) {
    if (name == kNames[i]) return static_cast<Phase>(i);
  }
  return std::nullopt;
}

Phase phase_at(int index) { return static_cast<Phase>(index); }

namespace {

// The run's transitions, forward: where each phase leads when it goes well. Every open phase may
// also end: CLEANING_UP (stopping a job), FAILED or CANCELLED (nothing to stop), and every phase
// before FINALIZING may pause (PAUSING; --checkpoint latest needs no job).
std::vector<tasks::Transition> run_transitions() {
  using P = Phase;
  const std::vector<std::pair<P, std::vector<P>>> forward = {
      {P::kSizingDataset, {P::kWaitingForBaseModel, P::kDeployingGrader, P::kWaitingForDevices, P::kSubmitting}},
      {P::kWaitingForBaseModel, {P::kDeployingGrader, P::kWaitingForDevices, P::kSubmitting}},
      {P::kDeployingGrader, {P::kWaitingForGrader}},
      {P::kWaitingForGrader, {P::kWaitingForDevices, P::kSubmitting}},
      {P::kWaitingForDevices, {P::kSubmitting}},
      {P::kSubmitting, {P::kQueued}},
      // SUBMITTING again: a job that ended without an outcome gets a new attempt (attempts.cpp).
      {P::kQueued, {P::kPreparing, P::kTraining, P::kFinalizing, P::kSubmitting}},
      {P::kPreparing, {P::kTraining, P::kFinalizing, P::kSubmitting}},
      {P::kTraining, {P::kFinalizing, P::kSubmitting}},
      {P::kPausing, {P::kPaused, P::kFinalizing}},
      {P::kPaused, {P::kWaitingForDevices, P::kSubmitting}},
      {P::kFinalizing, {P::kCompleted}},
      {P::kCleaningUp, {P::kCompleted}},
  };
  std::vector<tasks::Transition> out;
  for (const auto& [from, to] : forward) {
    tasks::Transition t{phase_name(from), {}};
    for (P p : to) t.to.push_back(phase_name(p));
    if (from != P::kCleaningUp) t.to.push_back(phase_name(P::kCleaningUp));
    t.to.push_back(phase_name(P::kFailed));
    t.to.push_back(phase_name(P::kCancelled));
    if (from < P::kPausing) t.to.push_back(phase_name(P::kPausing));
    out.push_back(std::move(t));
  }
  return out;
}

tasks::PhaseTable make_run_table() {
  std::vector<tasks::PhaseSpec> phases;
  for (int i = 0; i < kPhaseCount; ++i) {
    const Phase p = phase_at(i);
    // A run holds (or waits for) its claim from WAITING_FOR_DEVICES until it pauses or ends.
    const bool holds = p >= Phase::kWaitingForDevices && p != Phase::kPaused && !is_terminal(p);
    // WAITING_FOR_DEVICES has nothing to do until admission grants its claim (which wakes it).
    phases.push_back({phase_name(p), is_terminal(p), holds, p == Phase::kPaused, p == Phase::kWaitingForDevices});
  }
  auto table = tasks::PhaseTable::make("run", std::move(phases), run_transitions());
  if (!table.is_ok()) {  // a broken table is a programming error: no trainerd may start with it
    std::fprintf(stderr, "trainerd: %s\n", table.status().to_string().c_str());
    std::abort();
  }
  return std::move(*table);
}

}  // namespace

const tasks::PhaseTable& run_phase_table() {
  static const tasks::PhaseTable table = make_run_table();
  return table;
}

}  // namespace trainer::service

#include "service/phases.h"

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

}  // namespace trainer::service

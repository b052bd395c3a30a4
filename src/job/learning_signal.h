// An RL run that cannot learn, said while it trains (issue 30): when every group of a step's
// completions got one reward (no spread within any group, so every advantage is 0 and the
// update moves nothing) for kFlatSteps steps in a row, the job writes one `warning` event naming
// the likely cause. trainerd keeps it in the run's `warnings`; `runs get` and the live line of
// `runs wait` show it.
//
// Thread safety: one thread (the engine's event callback).
#pragma once

#include <cstdint>
#include <optional>

#include "protocol/job_protocol.h"

namespace trainer::job {

class LearningSignalWatch {
 public:
  static constexpr int kFlatSteps = 3;

  // The warning to write after this step's event, once per job; nullopt otherwise (and always
  // for a step without RL figures).
  std::optional<protocol::Warning> observe(const protocol::Step& step);

 private:
  int flat_steps_ = 0;
  bool warned_ = false;
};

}  // namespace trainer::job

// One training step's operator profile, for the engine's benchmarks (bench/engine/profile_step.py):
// with TRAINER_PROFILE_STEP=N in its environment, a job records step N (1-based) with libtorch's
// profiler and writes each operator's calls, self and total seconds, grouped by name and input
// shapes, to TRAINER_PROFILE_OUT (default: profile-step-N.json in the working folder). Off unless
// asked for; the step itself is unchanged (only slower by the recording). Internal to the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace trainer::engine::train {

class StepProfile {
 public:
  // Reads TRAINER_PROFILE_STEP / TRAINER_PROFILE_OUT; an unset or malformed step profiles nothing.
  static StepProfile from_environment();

  // Around every step (0-based index, as the loop counts): records the one asked for.
  void begin(int64_t step);
  void end(int64_t step, double step_seconds);

 private:
  int64_t step_ = -1;  // 0-based; -1: none
  std::string out_;
  bool active_ = false;
};

// Grouped operator times from a finished recording (exposed for its unit test): events on one thread
// nest by time, an operator's self time is its duration less its direct children's.
struct ProfiledEvent {
  std::string name;
  std::string shapes;  // e.g. "[[230, 512], [512, 151669]]", "" when not recorded
  uint64_t thread = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};
nlohmann::json summarize_profile(std::vector<ProfiledEvent> events, size_t top);

}  // namespace trainer::engine::train

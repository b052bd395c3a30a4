// An RL run that cannot learn, said while it trains (declared in job/learning_signal.h).
#include "job/learning_signal.h"

#include <cstdio>
#include <string>

namespace trainer::job {

std::optional<protocol::Warning> LearningSignalWatch::observe(const protocol::Step& step) {
  if (warned_ || !step.rl.is_object()) return std::nullopt;
  const nlohmann::json& share = step.rl.value("zeroStdGroupShare", nlohmann::json(nullptr));
  // Every group flat: 1 up to rounding (the share is a mean over the step's groups).
  const bool flat = share.is_number() && share.get<double>() >= 1.0 - 1e-9;
  flat_steps_ = flat ? flat_steps_ + 1 : 0;
  if (flat_steps_ < kFlatSteps) return std::nullopt;
  warned_ = true;
  char reward[32];
  std::snprintf(reward, sizeof reward, "%.4g", step.rl.value("rewardMean", 0.0));
  return protocol::Warning{
      .field = "config.reward",
      .message = "no learning signal: in each of the last " + std::to_string(kFlatSteps) +
                 " steps (to step " + std::to_string(step.step) +
                 ") every group's completions got the same reward (mean reward " + reward +
                 "), so every advantage is 0 and nothing is learnt. The likely cause: the base model never "
                 "writes an answer the reward terms can score; look at its completions (`trainer runs rollouts`) "
                 "and start from a model that writes the expected form (an SFT adapter registered as a model)"};
}

}  // namespace trainer::job

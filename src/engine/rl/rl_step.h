// The RL figures of one step: what the job's step event carries in `rl` (docs/job-protocol.md)
// and the generation batch's rollouts that `runs rollouts` shows (output_dir/rollouts.jsonl,
// docs/rl.md, "Rollouts"). Filled by the GRPO/GSPO method (rl/grpo.cpp). Torch-free.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/rl/graders/grader.h"

namespace trainer::engine::rl {

// The failure causes a step counts (FailureCause without kNone, in the registry's order).
constexpr std::array<FailureCause, 4> kCauses = {FailureCause::kTimeout, FailureCause::kUnreachable,
                                                 FailureCause::kNoVerdict, FailureCause::kGoldNotLabel};
struct RlTermStep {
  std::string name;
  double mean = 0, std = 0, seconds = 0;
  int64_t failures = 0;
  std::array<int64_t, kCauses.size()> failures_by_cause = {};  // in kCauses' order
  std::vector<double> call_seconds;                            // per completion
  int64_t input_tokens = 0, output_tokens = 0;                 // judge tokens
};
struct Rollout {
  int64_t prompt_index = 0;
  std::string completion;
  double reward = 0;
  std::vector<double> raw;   // per reward term (the scorer's order): its unweighted score
  std::vector<bool> failed;  // per reward term: it produced no score (scored 0)
  int64_t length = 0;        // completion tokens
  bool terminated = false;   // ended by a stop token or string, not by maxCompletionLength
  int64_t tool_calls = 0, tool_failures = 0;  // runs with tools: calls it made, and failed
};
struct RlStep {
  double reward_mean = 0, reward_std = 0, reward_zero_share = 0, reward_full_share = 0, zero_std_group_share = 0;
  std::vector<RlTermStep> terms;
  std::vector<double> rewards;
  int64_t completions_scored = 0, generated_tokens = 0;
  std::vector<int64_t> completion_lengths;
  double completion_length_mean = 0, completion_length_terminated_mean = 0, truncated_share = 0;
  int64_t completion_length_min = 0, completion_length_max = 0;
  double kl = 0, clip_ratio = 0, clip_ratio_low = 0, clip_ratio_high = 0, entropy = 0;
  double generation_seconds = 0, reward_seconds = 0, old_logprob_seconds = 0, actor_update_seconds = 0;
  double generation_tokens_per_second = 0;
  // Shares of the step each role of the colocated loop waited: the trainer while completions
  // were generated and scored, the generator while they were not being generated.
  double trainer_idle = 0, rollout_idle = 0;
  // Runs with tools (absent otherwise): tool calls per completion, and the failed share of them.
  std::optional<double> tool_calls_mean, tool_failure_share;
  int64_t tool_calls = 0;
  std::vector<Rollout> rollouts;
};


// The step event's `rl` object, without the tool figures.
nlohmann::json to_json(const RlStep& r);
// Adds the tool figures to a step's `rl` object, for runs with tools (none otherwise).
void add_tool_figures(const RlStep& r, nlohmann::json* out);

// One reward term as a rollout line names it.
struct RolloutTerm {
  std::string name;  // the term's label
  double weight = 1;
};

// Appends `rl`'s rollouts to `path`, one JSON line each ({step, promptIndex, prompt, completion,
// reward, terms: [{name, weight, raw, failed}], completionTokens, terminated, and with tools
// toolCalls, toolFailures}), flushed before it returns: `step` is the batch's first (1-based)
// optimizer step, `prompt_texts` the prompts by prompt index.
Status append_rollouts(const std::string& path, int64_t step, const RlStep& rl, const std::vector<RolloutTerm>& terms,
                       const std::vector<std::string>& prompt_texts, bool with_tools);

}  // namespace trainer::engine::rl

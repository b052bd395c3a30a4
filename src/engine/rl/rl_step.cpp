// The RL figures of a step and the rollouts file (declared in rl/rl_step.h).
#include "engine/rl/rl_step.h"

#include <filesystem>
#include <fstream>

namespace trainer::engine::rl {

nlohmann::json to_json(const RlStep& r) {
  nlohmann::json terms = nlohmann::json::array();
  for (const auto& t : r.terms) {
    nlohmann::json causes = nlohmann::json::object();
    for (size_t c = 0; c < kCauses.size(); ++c) causes[failure_cause_name(kCauses[c])] = t.failures_by_cause[c];
    terms.push_back({{"name", t.name},
                     {"mean", t.mean},
                     {"std", t.std},
                     {"seconds", t.seconds},
                     {"failures", t.failures},
                     {"failuresByCause", causes},
                     {"callSeconds", t.call_seconds},
                     {"judgeTokens", {{"input", t.input_tokens}, {"output", t.output_tokens}}}});
  }
  nlohmann::json rollouts = nlohmann::json::array();
  for (const auto& x : r.rollouts) {
    rollouts.push_back({{"promptIndex", x.prompt_index}, {"completion", x.completion.substr(0, 2000)}, {"reward", x.reward}});
  }
  return {{"rewardMean", r.reward_mean},
          {"rewardStd", r.reward_std},
          {"rewardZeroShare", r.reward_zero_share},
          {"rewardFullShare", r.reward_full_share},
          {"zeroStdGroupShare", r.zero_std_group_share},
          {"terms", terms},
          {"rewards", r.rewards},
          {"completionsScored", r.completions_scored},
          {"generatedTokens", r.generated_tokens},
          {"completionLengths", r.completion_lengths},
          {"completionLengthMean", r.completion_length_mean},
          {"completionLengthMin", r.completion_length_min},
          {"completionLengthMax", r.completion_length_max},
          {"completionLengthTerminatedMean", r.completion_length_terminated_mean},
          {"truncatedShare", r.truncated_share},
          {"kl", r.kl},
          {"clipRatio", r.clip_ratio},
          {"clipRatioLow", r.clip_ratio_low},
          {"clipRatioHigh", r.clip_ratio_high},
          {"entropy", r.entropy},
          {"generationSeconds", r.generation_seconds},
          {"rewardSeconds", r.reward_seconds},
          {"oldLogprobSeconds", r.old_logprob_seconds},
          {"actorUpdateSeconds", r.actor_update_seconds},
          {"generationTokensPerSecond", r.generation_tokens_per_second},
          {"trainerIdle", r.trainer_idle},
          {"rolloutIdle", r.rollout_idle},
          {"rollouts", rollouts}};
}

void add_tool_figures(const RlStep& r, nlohmann::json* out) {
  if (!r.tool_calls_mean) return;
  (*out)["toolCallsMean"] = *r.tool_calls_mean;
  (*out)["toolCallFailureShare"] = r.tool_failure_share.value_or(0.0);
  (*out)["toolCalls"] = r.tool_calls;
}

Status append_rollouts(const std::string& path, int64_t step, const RlStep& rl, const std::vector<RolloutTerm>& terms,
                       const std::vector<std::string>& prompt_texts, bool with_tools) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream out(path, std::ios::app | std::ios::binary);
  if (!out) return internal_error(path + ": cannot be opened for appending");
  for (const auto& r : rl.rollouts) {
    nlohmann::json line_terms = nlohmann::json::array();
    for (size_t k = 0; k < terms.size() && k < r.raw.size(); ++k) {
      line_terms.push_back({{"name", terms[k].name}, {"weight", terms[k].weight}, {"raw", r.raw[k]},
                            {"failed", static_cast<bool>(r.failed[k])}});
    }
    nlohmann::json line = {{"step", step},
                           {"promptIndex", r.prompt_index},
                           {"prompt", prompt_texts[static_cast<size_t>(r.prompt_index)]},
                           {"completion", r.completion},
                           {"reward", r.reward},
                           {"terms", line_terms},
                           {"completionTokens", r.length},
                           {"terminated", r.terminated}};
    if (with_tools) {
      line["toolCalls"] = r.tool_calls;
      line["toolFailures"] = r.tool_failures;
    }
    out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
  out.flush();
  if (!out) return internal_error(path + ": writing the rollouts failed");
  return Status::ok();
}

}  // namespace trainer::engine::rl

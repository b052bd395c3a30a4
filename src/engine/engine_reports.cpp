// The native engine's reports of itself (engine_reports.h).
#include "engine/engine_reports.h"

#include <algorithm>

namespace trainer::engine {
namespace {

using json = nlohmann::json;

// transformers' lr_scheduler_type for the plan's schedule (constant with warmup is its own name).
std::string scheduler_name(plan::Schedule s, int64_t warmup) {
  switch (s) {
    case plan::Schedule::kLinear: return "linear";
    case plan::Schedule::kCosine: return "cosine";
    case plan::Schedule::kConstant: return warmup > 0 ? "constant_with_warmup" : "constant";
  }
  return "linear";
}

}  // namespace

json native_engine_config(const plan::Plan& plan, const SetupFacts& facts) {
  const plan::RunConfig& c = plan.config;
  const plan::OptimizerSettings& o = c.active_optimizer();
  const bool bf16 = c.precision == plan::Precision::kBf16;
  json out = {{"method", plan::method_name(c.method)},
              {"device", facts.device},
              {"world_size", facts.ranks},
              {"dtype", bf16 ? "bfloat16" : "float32"},
              {"bf16", bf16},
              {"seed", c.training.seed},
              {"max_length", c.maxSeqLength},
              {"max_steps", facts.total_steps},
              {"num_train_epochs", c.training.epochs},
              {"optim", "adamw"},
              {"learning_rate", o.learningRate},
              {"adam_beta1", o.beta1},
              {"adam_beta2", o.beta2},
              {"adam_epsilon", o.epsilon},
              {"weight_decay", o.weightDecay},
              {"max_grad_norm", o.maxGradNorm},
              {"lr_scheduler_type", scheduler_name(o.schedule, facts.warmup_steps)},
              {"warmup_steps", facts.warmup_steps},
              {"lora_r", c.lora.rank},
              {"lora_alpha", c.lora.alpha},
              {"lora_dropout", c.lora.dropout},
              {"lora_target_modules", c.lora.targetModules},
              {"lora_bias", "none"}};
  if (!c.is_rl()) {
    const int ranks = std::max(1, facts.ranks);
    out["per_device_train_batch_size"] = (c.training.batchSize + ranks - 1) / ranks;
    out["gradient_accumulation_steps"] = c.training.gradientAccumulation;
    out["packing"] = c.training.packing;
    out["eval_steps"] = c.training.validationFrequencySteps;
    out["validation_split"] = c.training.validationSplit;
    return out;
  }
  const plan::RlSettings& r = c.rl;
  json funcs = json::array(), weights = json::array();
  for (const plan::RewardTermSpec& t : c.rewardTerms) {
    funcs.push_back(plan::term_label(t));
    weights.push_back(t.weight);
  }
  out["num_generations"] = r.groupSize;
  out["generation_batch_size"] = static_cast<int64_t>(r.groupSize) * r.promptsPerStep;
  out["per_device_train_batch_size"] = r.microBatchSize;
  out["max_completion_length"] = r.maxCompletionLength;
  out["max_prompt_length"] = c.maxSeqLength - r.maxCompletionLength;
  out["temperature"] = r.temperature;
  out["top_p"] = r.topP;
  out["top_k"] = r.topK;
  out["epsilon"] = r.clipLow;
  out["epsilon_high"] = r.clipHigh;
  out["num_iterations"] = r.iterationsPerBatch;
  out["loss_type"] = plan::loss_aggregation_name(r.lossAggregation);
  out["scale_rewards"] = plan::scale_rewards_name(r.scaleRewards);
  out["beta"] = c.klBeta;
  out["importance_sampling_level"] = c.method == plan::Method::kGspo ? "sequence" : "token";
  out["reward_funcs"] = funcs;
  out["reward_weights"] = weights;
  out["stop_strings"] = r.stopStrings;
  return out;
}

json native_rollout_engine(const plan::Plan& plan, const SetupFacts& facts) {
  const plan::RunConfig& c = plan.config;
  if (!c.is_rl()) return nullptr;
  const plan::RlSettings& r = c.rl;
  return {{"kind", "native"},
          {"device", facts.device},
          {"replicas", 1},
          {"sharesWeightsWithTrainer", true},
          {"batch", {{"promptsPerStep", r.promptsPerStep}, {"groupSize", r.groupSize},
                     {"completionsPerStep", static_cast<int64_t>(r.promptsPerStep) * r.groupSize}}},
          {"sampling", {{"temperature", r.temperature}, {"topP", r.topP}, {"topK", r.topK},
                        {"maxCompletionLength", r.maxCompletionLength}, {"stopStrings", r.stopStrings}}},
          {"tools", r.tools.has_value()}};
}

json native_setup_changes(const plan::Plan& plan, const SetupFacts& facts) {
  json changes = json::array();
  const int gpus = plan.execution.gpus;
  if (gpus > 0 && !facts.cuda) {
    changes.push_back({{"field", "execution.gpus"}, {"from", gpus}, {"to", 0},
                       {"why", "no CUDA device is visible to the job: it trains on the CPU"}});
  } else if (gpus > 1 && facts.ranks < gpus) {
    changes.push_back({{"field", "execution.gpus"}, {"from", gpus}, {"to", facts.ranks},
                       {"why", std::string(plan::method_name(plan.config.method)) +
                                   " trains on one device (data parallelism is SFT only)"}});
  }
  return changes;
}

}  // namespace trainer::engine

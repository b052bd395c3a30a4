// The engines' capability table (engine_capabilities.h).
#include "plan/engine_capabilities.h"

#include <string>

namespace trainer::plan {
namespace {

const std::vector<EngineLimit> kLimits = {
    // TRL: the translation of the resolved plan into SFTConfig / GRPOConfig (docs/engines.md).
    {Engine::kTrl, "config.rlHyperparams.stopStrings",
     [](const Plan& p) { return p.config.is_rl() && !p.config.rl.stopStrings.empty(); },
     "the TRL translation does not carry stop strings into GRPOTrainer's generation; leave them out or use "
     "engine native"},
    {Engine::kTrl, "config.rlHyperparams.tools",
     [](const Plan& p) { return p.config.is_rl() && p.config.rl.tools.has_value(); },
     "GRPOTrainer calls Python functions as tools, not a tool executable; use engine native for tool calls"},
    {Engine::kTrl, "execution.gpus", [](const Plan& p) { return p.execution.gpus > 1; },
     "the TRL worker trains on one device (several need an accelerate launch it does not make); set execution.gpus "
     "to 0 or 1, or use engine native"},
    {Engine::kTrl, "smoke", [](const Plan& p) { return p.smoke.has_value(); },
     "the smoke check (save, restore, replay the last step) is the native engine's; leave smoke out"},
    // What the TRL worker (engines/trl) does not translate yet; docs/engines.md lists each.
    {Engine::kTrl, "config.hyperparams.training.packing", [](const Plan& p) { return p.config.training.packing; },
     "TRL packs rows by its own rule (best-fit decreasing), not the native engine's greedy rows in order; leave "
     "packing off or use engine native"},
    {Engine::kTrl, "config.validationDataset", [](const Plan& p) { return p.config.validationDataset.has_value(); },
     "the TRL worker does not report validation loss yet; leave it out or use engine native"},
    {Engine::kTrl, "config.hyperparams.training.validationSplit",
     [](const Plan& p) { return p.config.training.validationSplit > 0; },
     "the TRL worker does not report validation loss yet; leave it out or use engine native"},
    // verl: GRPO and GSPO with rollouts generated on GPUs.
    {Engine::kVerl, "config.method", [](const Plan& p) { return !p.config.is_rl(); },
     "verl trains grpo and gspo runs; use engine native or trl for sft"},
    {Engine::kVerl, "execution.gpus", [](const Plan& p) { return p.execution.gpus < 1; },
     "verl generates its rollouts with vLLM or SGLang on CUDA GPUs; set execution.gpus to 1 or more"},
    {Engine::kVerl, "smoke", [](const Plan& p) { return p.smoke.has_value(); },
     "the smoke check (save, restore, replay the last step) is the native engine's; leave smoke out"},
    // What verl's configuration has no counterpart for (engines/verl/translate.py refuses the same).
    {Engine::kVerl, "config.rlHyperparams.lossAggregation",
     [](const Plan& p) { return p.config.rl.lossAggregation == LossAggregation::kBnpo; },
     "verl has no per-micro-batch token mean (bnpo); use dapo (token-mean), grpo (seq-mean-token-mean) or dr_grpo"},
    {Engine::kVerl, "config.rlHyperparams.scaleRewards",
     [](const Plan& p) { return p.config.rl.scaleRewards == ScaleRewards::kBatch; },
     "verl divides GRPO advantages by the group's std or by nothing; use group or none"},
    {Engine::kVerl, "config.rlHyperparams.stopStrings", [](const Plan& p) { return !p.config.rl.stopStrings.empty(); },
     "verl's rollout configuration takes no stop strings; leave them out or use engine native"},
    {Engine::kVerl, "config.rlHyperparams.tools", [](const Plan& p) { return p.config.rl.tools.has_value(); },
     "verl calls tools through its own multi-turn tool classes, not a tool executable; use engine native"},
    {Engine::kVerl, "config.hyperparams.lora.dropout", [](const Plan& p) { return p.config.lora.dropout > 0; },
     "verl's FSDP LoRA is built without dropout; set it to 0"},
    {Engine::kVerl, "config.hyperparams.lora.rank", [](const Plan& p) { return p.config.lora.rank > 512; },
     "vLLM serves LoRA ranks up to 512"},
    {Engine::kVerl, "config.rlHyperparams.optimizer.schedule",
     [](const Plan& p) { return p.config.rl.optimizer.schedule == Schedule::kLinear; },
     "verl's FSDP engine schedules constant or cosine, not linear; set schedule to constant or cosine"},
    {Engine::kVerl, "config.maxSeqLength",
     [](const Plan& p) { return p.config.maxSeqLength <= p.config.rl.maxCompletionLength; },
     "verl's prompt length is maxSeqLength minus maxCompletionLength: leave room for the prompt"},
    {Engine::kVerl, "config.hyperparams.training.maxSteps",
     [](const Plan& p) {
       return p.config.training.maxSteps && *p.config.training.maxSteps % p.config.rl.iterationsPerBatch != 0;
     },
     "verl counts steps in generation batches: make maxSteps a multiple of rlHyperparams.iterationsPerBatch"},
    {Engine::kVerl, "config.validationDataset", [](const Plan& p) { return p.config.validationDataset.has_value(); },
     "the verl worker does not relay validation yet; leave it out"},
    {Engine::kVerl, "config.hyperparams.training.validationSplit",
     [](const Plan& p) { return p.config.training.validationSplit > 0; },
     "the verl worker does not relay validation yet; leave it out"},
    {Engine::kVerl, "pauseAtStep", [](const Plan& p) { return p.pauseAtStep.has_value(); },
     "verl saves at its save_freq only and cannot pause at a step; leave pauseAtStep out"},
    {Engine::kVerl, "warmStartModelId", [](const Plan& p) { return p.warmStartModelId.has_value(); },
     "the verl worker does not load a starting adapter yet; leave warmStartModelId out"},
};

// What `deployment` lacks to run verl, as a list for a sentence; empty when nothing is missing.
// Present everywhere, so never listed: the plan's translation into verl's configuration and its
// launcher (engines/verl), verl itself (.venv-verl, made by tools/setup), and trainer-job starting
// the verl worker and taking its adapter into snapshots (job/verl_engine.h).
std::string verl_missing(const EngineDeployment& deployment) {
  std::vector<std::string> missing;
  if (!deployment.gpu_rollout_engine) {
    missing.push_back("a GPU rollout engine (vLLM or SGLang on CUDA devices; this deployment has none)");
  }
  if (!deployment.ray_backend) missing.push_back("the Ray compute backend (compute.backend \"ray\")");
  std::string text;
  for (size_t i = 0; i < missing.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") + missing[i];
  }
  return text;
}

}  // namespace

const std::vector<EngineLimit>& engine_limits() { return kLimits; }

Status check_engine_capabilities(const Plan& plan, const EngineDeployment& deployment) {
  const Engine engine = plan.config.engine;
  for (const EngineLimit& limit : kLimits) {
    if (limit.engine != engine || !limit.asks(plan)) continue;
    return invalid_field(std::string(limit.field),
                         "engine " + std::string(engine_name(engine)) + " cannot run this: " + std::string(limit.why));
  }
  if (engine == Engine::kVerl) {
    const std::string missing = verl_missing(deployment);
    if (!missing.empty()) {
      return invalid_field("config.engine", "engine verl is not available on this deployment: it has verl 0.9.1 and "
                                                "the plan's translation into verl's configuration, and needs " +
                                                missing + "; use engine native or trl");
    }
  }
  return Status::ok();
}

}  // namespace trainer::plan

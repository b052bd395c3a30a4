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
};

// What `deployment` lacks to run verl, as a list for a sentence; empty when nothing is missing.
std::string verl_missing(const EngineDeployment& deployment) {
  std::vector<std::string> missing;
  if (!deployment.gpu_rollout_engine) {
    missing.push_back("a GPU rollout engine (vLLM or SGLang on CUDA devices; this deployment has none)");
  }
  if (!deployment.ray_backend) missing.push_back("the Ray compute backend (compute.backend \"ray\")");
  if (!deployment.verl_worker) missing.push_back("the verl worker in trainer-job (not built into this one)");
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
      return invalid_field("config.engine", "engine verl is not available on this deployment: it needs " + missing +
                                                "; use engine native or trl");
    }
  }
  return Status::ok();
}

}  // namespace trainer::plan

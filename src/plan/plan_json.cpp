// The resolved form of a plan (declared in plan/plan.h): to_json, config_to_json, and the
// flattened config and settings hash derived from it.
#include <string>

#include "common/sha256.h"
#include "plan/plan.h"

namespace trainer::plan {

using json = nlohmann::json;

namespace {

void flatten(const json& value, const std::string& prefix, json* out) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    }
  } else {
    (*out)[prefix] = value;
  }
}

json lora_json(const LoraSettings& l) {
  return {{"rank", l.rank}, {"alpha", l.alpha}, {"dropout", l.dropout}, {"targetModules", l.targetModules}};
}

json optimizer_json(const OptimizerSettings& o) {
  return {{"learningRate", o.learningRate}, {"weightDecay", o.weightDecay}, {"beta1", o.beta1},
          {"beta2", o.beta2},               {"epsilon", o.epsilon},         {"maxGradNorm", o.maxGradNorm},
          {"schedule", schedule_name(o.schedule)}, {"warmupSteps", o.warmupSteps}, {"warmupRatio", o.warmupRatio}};
}

// A reward term with the defaults of its kind. The judge's endpoint is the deployment's, not the
// plan's: it is left out (it is not part of what determines the trained model).
json term_json(const RewardTermSpec& t) {
  json out = {{"kind", t.kind}, {"weight", t.weight}, {"name", term_label(t)}};
  const std::optional<TermKind> k = term_kind(t.kind);
  if (!k || *k == TermKind::kLabelMatch) return out;
  out["timeoutSeconds"] = t.timeoutSeconds;
  out["maxConsecutiveFailures"] = t.maxConsecutiveFailures;
  if (*k == TermKind::kHttp || *k == TermKind::kModel) {
    out["retries"] = t.retries;
    out["concurrency"] = t.concurrency;
  }
  if (t.caFile) out["caFile"] = *t.caFile;
  if (!t.networkAllow.empty()) out["network"] = {{"allow", t.networkAllow}};  // shown (and hashed) only when declared
  if (*k == TermKind::kModel) {
    out["graderInstructions"] = t.graderInstructions ? json(*t.graderInstructions) : json(nullptr);
    out["maxTokens"] = t.maxTokens;
  }
  return out;
}

// The tools' settings; network only when declared (so that plans without it hash as before).
json tools_json(const ToolSettings& t) {
  json out = {{"command", t.command}, {"timeoutSeconds", t.timeoutSeconds}, {"maxCalls", t.maxCalls}};
  if (!t.networkAllow.empty()) out["network"] = {{"allow", t.networkAllow}};
  return out;
}

// The resolved config of a GRPO/GSPO run: no SFT-only field, the RL ones added.
json rl_config_to_json(const RunConfig& c) {
  json terms = json::array();
  for (const auto& t : c.rewardTerms) terms.push_back(term_json(t));
  const RlSettings& r = c.rl;
  return {{"dataset", c.dataset},
          {"method", method_name(c.method)},
          {"engine", engine_name(c.engine)},
          {"hyperparams",
           {{"lora", lora_json(c.lora)},
            {"training",
             {{"epochs", c.training.epochs},
              {"maxSteps", c.training.maxSteps ? json(*c.training.maxSteps) : json(nullptr)},
              {"seed", c.training.seed}}}}},
          {"maxSeqLength", c.maxSeqLength},
          {"model", {{"precision", precision_name(c.precision)}}},
          {"reward", {{"terms", terms}}},
          {"klBeta", c.klBeta},
          {"rlHyperparams",
           {{"groupSize", r.groupSize},
            {"promptsPerStep", r.promptsPerStep},
            {"maxCompletionLength", r.maxCompletionLength},
            {"temperature", r.temperature},
            {"topP", r.topP},
            {"topK", r.topK},
            {"clipLow", r.clipLow},
            {"clipHigh", r.clipHigh},
            {"iterationsPerBatch", r.iterationsPerBatch},
            {"lossAggregation", loss_aggregation_name(r.lossAggregation)},
            {"scaleRewards", scale_rewards_name(r.scaleRewards)},
            {"microBatchSize", r.microBatchSize},
            {"stopStrings", r.stopStrings},
            {"tools", r.tools ? tools_json(*r.tools)
                              : json(nullptr)},
            {"optimizer", optimizer_json(r.optimizer)}}}};
}

}  // namespace

nlohmann::json config_to_json(const RunConfig& c) {
  if (c.is_rl()) return rl_config_to_json(c);
  json training = {{"epochs", c.training.epochs},
                   {"maxSteps", c.training.maxSteps ? json(*c.training.maxSteps) : json(nullptr)},
                   {"batchSize", c.training.batchSize},
                   {"gradientAccumulation", c.training.gradientAccumulation},
                   {"validationFrequencySteps", c.training.validationFrequencySteps},
                   {"validationSplit", c.training.validationSplit},
                   {"packing", c.training.packing},
                   {"seed", c.training.seed}};
  return {{"dataset", c.dataset},
          {"validationDataset", c.validationDataset ? json(*c.validationDataset) : json(nullptr)},
          {"method", method_name(c.method)},
          {"engine", engine_name(c.engine)},
          {"hyperparams",
           {{"lora", lora_json(c.lora)},
            {"optimizer", optimizer_json(c.optimizer)},
            {"training", training}}},
          {"maxSeqLength", c.maxSeqLength},
          {"model", {{"precision", precision_name(c.precision)}}}};
}

nlohmann::json to_json(const Plan& p) {
  auto opt = [](const std::optional<std::string>& s) { return s ? json(*s) : json(nullptr); };
  return {{"kind", p.kind},
          {"workload", p.workload},
          {"baseModel", opt(p.baseModel)},
          {"config", config_to_json(p.config)},
          {"execution",
           {{"gpus", p.execution.gpus},
            {"saveEvery", p.execution.saveEvery ? json(*p.execution.saveEvery) : json(nullptr)},
            {"keepAdapters", p.execution.keepAdapters},
            {"keepTrainingStates", p.execution.keepTrainingStates},
            {"maxAttempts", p.execution.maxAttempts},
            {"resumableSaveEvery", p.execution.resumableSaveEvery ? json(*p.execution.resumableSaveEvery) : json(nullptr)},
            {"resumableSaveMinutes",
             p.execution.resumableSaveMinutes ? json(*p.execution.resumableSaveMinutes) : json(nullptr)}}},
          {"grader", opt(p.grader)},
          {"graderInstructions", opt(p.graderInstructions)},
          {"description", opt(p.description)},
          {"configName", opt(p.configName)},
          {"submissionId", opt(p.submissionId)},
          {"pauseAtStep", p.pauseAtStep ? json(*p.pauseAtStep) : json(nullptr)},
          {"warmStartModelId", opt(p.warmStartModelId)},
          {"modelName", opt(p.modelName)},
          {"smoke", p.smoke ? json{{"steps", p.smoke->steps}, {"rows", p.smoke->rows}} : json(nullptr)}};
}

nlohmann::json flatten_config(const RunConfig& config, const std::string& dataset_hash) {
  json cfg = config_to_json(config);
  cfg["dataset"] = dataset_hash;
  // The native engine is what every run used before config.engine existed: leaving it out keeps
  // those runs' settings hash; another engine is part of what determines the trained model.
  if (config.engine == Engine::kNative) cfg.erase("engine");
  // A judge's instructions shape the reward wherever the plan wrote them: a model: term given the
  // plan's top-level graderInstructions counts as one that wrote them itself.
  for (size_t i = 0; i < config.rewardTerms.size(); ++i) {
    const RewardTermSpec& t = config.rewardTerms[i];
    if (!t.graderInstructions && t.planGraderInstructions) {
      cfg["reward"]["terms"][i]["graderInstructions"] = *t.planGraderInstructions;
    }
  }
  json flat = json::object();
  flatten(cfg, "config", &flat);
  return flat;
}

std::string settings_sha(const RunConfig& config, const std::string& dataset_hash) {
  // nlohmann::json objects keep keys sorted, so the dump is canonical.
  return sha256_hex(flatten_config(config, dataset_hash).dump());
}

// ---- the names enum values have in plans and JSON

const char* method_name(Method m) {
  switch (m) {
    case Method::kSft: return "sft";
    case Method::kGrpo: return "grpo";
    case Method::kGspo: return "gspo";
  }
  return "sft";
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kLinear: return "linear";
    case Schedule::kCosine: return "cosine";
    case Schedule::kConstant: return "constant";
  }
  return "linear";
}

}  // namespace trainer::plan

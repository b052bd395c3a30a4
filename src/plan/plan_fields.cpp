// The field table of run plans: every field's type, range and meaning (plan.h), and the
// Markdown reference generated from it (docs/plans.md).
#include <cmath>
#include <cstdio>
#include <limits>

#include "plan/plan.h"
#include "plan/bounds.h"

namespace trainer::plan {
namespace {

using json = nlohmann::json;

}  // namespace

std::string field_bound_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

namespace {

// ---- the field table ----------------------------------------------------------------------

constexpr double kMaxInt = std::numeric_limits<int>::max();
constexpr double kNoLimit = std::numeric_limits<double>::infinity();

using FT = FieldType;

// What an RL run has instead of SFT's batch and validation settings.
constexpr std::string_view kRlBatches =
    "sizes its batches with config.rlHyperparams (promptsPerStep, groupSize, microBatchSize) and has no validation";

// The one list of plan fields. Ranges are what the parser enforces; defaults are those of the
// structs in plan.h, rendered by to_json().
const std::vector<FieldSpec> kFields = {
    {"kind", FT::kEnum, 0, 0, false, false, "run", "what the document is. Required"},
    {"workload", FT::kString, 0, 0, false, false, "", "the workload (name or id) the run belongs to. Required"},
    {"baseModel", FT::kString, 0, 0, false, false, "",
     "the base model to adapt: a name the deployment allows (`trainer base-models list --all`)"},
    {"config", FT::kObject, 0, 0, false, false, "", "what determines the trained model. Required"},
    {"config.dataset", FT::kString, 0, 0, false, false, "",
     "training rows: a dataset name or hash (`trainer datasets list`). Required"},
    {"config.validationDataset", FT::kString, 0, 0, false, false, "",
     "held-out rows for the validation loss; absent: validationSplit decides"},
    {"config.method", FT::kEnum, 0, 0, false, false, "sft, grpo, gspo",
     "training method: supervised fine-tuning, or reinforcement with GRPO (token-level ratio) or GSPO (sequence-level ratio)"},
    {"config.engine", FT::kEnum, 0, 0, false, false, "native, trl, verl",
     "the engine that trains the run: native (this project's engine), trl (TRL's SFTTrainer and GRPOTrainer in a "
     "Python worker), verl (GRPO and GSPO as a Ray job; needs a GPU rollout engine). A plan asking its engine for "
     "what it cannot do is refused at submission, naming the engine and the field"},
    {"config.hyperparams", FT::kObject, 0, 0, false, false, "", "LoRA, optimizer and training settings"},
    {"config.hyperparams.lora", FT::kObject, 0, 0, false, false, "", "the adapter"},
    {"config.hyperparams.lora.rank", FT::kInteger, 1, 4096, false, false, "", "adapter rank r"},
    {"config.hyperparams.lora.alpha", FT::kNumber, 0, 1e6, true, false, "", "scale of the update is alpha / rank"},
    {"config.hyperparams.lora.dropout", FT::kNumber, 0, 1, false, true, "", "dropout on the adapter's input"},
    {"config.hyperparams.lora.targetModules", FT::kStringList, 0, 0, false, false,
     "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj", "the projections that get an adapter"},
    {"config.hyperparams.optimizer", FT::kObject, 0, 0, false, false, "", "AdamW and its schedule"},
    {"config.hyperparams.optimizer.learningRate", FT::kNumber, 0, 1, true, false, "", "peak learning rate"},
    {"config.hyperparams.optimizer.weightDecay", FT::kNumber, 0, 1e3, false, false, "", "decoupled weight decay"},
    {"config.hyperparams.optimizer.beta1", FT::kNumber, 0, 1, false, true, "", "AdamW beta1"},
    {"config.hyperparams.optimizer.beta2", FT::kNumber, 0, 1, false, true, "", "AdamW beta2"},
    {"config.hyperparams.optimizer.epsilon", FT::kNumber, 0, 1, true, false, "", "AdamW epsilon"},
    {"config.hyperparams.optimizer.maxGradNorm", FT::kNumber, 0, 1e9, false, false, "",
     "clip the total gradient norm to this; 0 disables clipping"},
    {"config.hyperparams.optimizer.schedule", FT::kEnum, 0, 0, false, false, "linear, cosine, constant",
     "learning-rate decay after warmup"},
    {"config.hyperparams.optimizer.warmupSteps", FT::kInteger, 0, kMaxInt, false, false, "",
     "linear warmup, in optimizer steps"},
    {"config.hyperparams.optimizer.warmupRatio", FT::kNumber, 0, 1, false, true, "",
     "warmup as a share of all steps, used when warmupSteps is 0"},
    {"config.hyperparams.training", FT::kObject, 0, 0, false, false, "", "how long and in what batches"},
    {"config.hyperparams.training.epochs", FT::kInteger, 1, 10000, false, false, "",
     "passes over the dataset (ignored when maxSteps is set)"},
    {"config.hyperparams.training.maxSteps", FT::kInteger, 1, kMaxInt, false, false, "",
     "optimizer steps; overrides epochs. Absent: epochs decide"},
    {"config.hyperparams.training.batchSize", FT::kInteger, 1, 65536, false, false, "",
     "rows per micro-batch per device"},
    {"config.hyperparams.training.gradientAccumulation", FT::kInteger, 1, 65536, false, false, "",
     "micro-batches per optimizer step"},
    {"config.hyperparams.training.validationFrequencySteps", FT::kInteger, 0, kMaxInt, false, false, "",
     "validate every N optimizer steps; 0 validates only at the end"},
    {"config.hyperparams.training.validationSplit", FT::kNumber, 0, 1, false, true, "",
     "share of rows held out for validation when there is no validationDataset"},
    {"config.hyperparams.training.packing", FT::kBoolean, 0, 0, false, false, "",
     "pack several rows into each maxSeqLength sequence"},
    {"config.hyperparams.training.seed", FT::kInteger, 0, kNoLimit, false, false, "",
     "seeds initialisation, dropout and shuffling"},
    {"config.maxSeqLength", FT::kInteger, 8, 1 << 20, false, false, "",
     "tokens per row after the chat template; longer rows are cut (`trainer datasets measure`)"},
    {"config.model", FT::kObject, 0, 0, false, false, "", "how the base model is loaded"},
    {"config.model.precision", FT::kEnum, 0, 0, false, false, "BF16, FP32",
     "weights and compute precision (either case)"},
    {"config.reward", FT::kObject, 0, 0, false, false, "", "RL runs (grpo, gspo): how completions are scored"},
    {"config.reward.terms", FT::kObject, 0, 0, false, false, "",
     "list of weighted terms {kind, weight, name}, summed into the total reward"},
    {"config.reward.terms[].kind", FT::kString, 0, 0, false, false, "",
     "json-label-match (built in), rule:PATH or bundle:PATH or bundle:FOLDER#MODULE, each [:FUNCTION] (a Python "
     "compute_score unless FUNCTION is named), http:URL (an evaluator, http:// or https://), "
     "model:NAME (a judge of trainerd's configuration); see docs/graders.md"},
    {"config.reward.terms[].weight", FT::kNumber, -1e9, 1e9, false, false, "", "the term's weight in the total (default 1)"},
    {"config.reward.terms[].name", FT::kString, 0, 0, false, false, "",
     "the term's label in metrics (default: its kind; rule: and bundle: terms by file name)"},
    {"config.reward.terms[].timeoutSeconds", FT::kNumber, 0, 3600, true, false, "",
     "rule, bundle, http, model: one call's limit; a call past it scores 0 (cause timeout). Default 30"},
    {"config.reward.terms[].maxConsecutiveFailures", FT::kInteger, 1, 1e6, false, false, "",
     "rule, bundle, http, model: calls in a row without a score that stop the job. Default 20"},
    {"config.reward.terms[].retries", FT::kInteger, 0, 10, false, false, "",
     "http, model: further attempts of a call that produced no score. Default 1"},
    {"config.reward.terms[].concurrency", FT::kInteger, 1, 64, false, false, "",
     "http, model: calls in flight at once. Default 4"},
    {"config.reward.terms[].maxTokens", FT::kInteger, 1, 32768, false, false, "",
     "model: the judge's answer at most, in tokens (the request's max_tokens). Default 512"},
    {"config.reward.terms[].caFile", FT::kString, 0, 0, false, false, "",
     "http: absolute path of a PEM file of the CAs trusted for an https:// evaluator, on trainerd's host within its "
     "`paths.allow` (docs/security.md, \"Paths\"); absent: the system's CA store"},
    {"config.reward.terms[].network", FT::kObject, 0, 0, false, false, "",
     "rule, bundle: the network the confined code needs, {allow: [\"HOST:PORT\", ...]}; absent: none (docs/security.md, "
     "\"User code\")"},
    {"config.reward.terms[].network.allow", FT::kStringList, 0, 0, false, false, "",
     "rule, bundle: HOST:PORT the code connects to, each allowed by trainerd's outbound.allow at submission"},
    {"config.reward.terms[].graderInstructions", FT::kString, 0, 0, false, false, "",
     "model: the judge's instructions (system prompt); absent: the plan's graderInstructions, else the built-in ones "
     "(docs/graders.md)"},
    {"config.klBeta", FT::kNumber, 0, 1e3, false, false, "",
     "RL runs: weight of the KL penalty to the base model (adapter disabled); 0 computes no reference"},
    {"config.rlHyperparams", FT::kObject, 0, 0, false, false, "", "RL runs (grpo, gspo): sampling, loss and optimizer"},
    {"config.rlHyperparams.groupSize", FT::kInteger, 2, 1024, false, false, "", "completions sampled per prompt"},
    {"config.rlHyperparams.promptsPerStep", FT::kInteger, 1, 65536, false, false, "", "prompts of one generation batch"},
    {"config.rlHyperparams.maxCompletionLength", FT::kInteger, 1, 1 << 20, false, false, "",
     "new tokens per completion at most (below maxSeqLength, which also holds the prompt)"},
    {"config.rlHyperparams.temperature", FT::kNumber, 0, 100, true, false, "", "sampling temperature"},
    {"config.rlHyperparams.topP", FT::kNumber, 0, 1, true, false, "", "nucleus sampling; 1 samples from all tokens"},
    {"config.rlHyperparams.topK", FT::kInteger, 0, kMaxInt, false, false, "", "sample among the k likeliest tokens; 0 = all"},
    {"config.rlHyperparams.clipLow", FT::kNumber, 0, 1, false, false, "", "lower clip bound: the ratio is kept above 1 - clipLow"},
    {"config.rlHyperparams.clipHigh", FT::kNumber, 0, 100, false, false, "", "upper clip bound: the ratio is kept below 1 + clipHigh"},
    {"config.rlHyperparams.iterationsPerBatch", FT::kInteger, 1, 1024, false, false, "",
     "optimizer steps on each generation batch (old log-probabilities are kept when above 1)"},
    {"config.rlHyperparams.lossAggregation", FT::kEnum, 0, 0, false, false, "dapo, bnpo, grpo, dr_grpo",
     "averaging of the token losses, as TRL names it: dapo token-level over the batch, bnpo token-level per "
     "micro-batch, grpo mean of per-sequence means, dr_grpo over a fixed maxCompletionLength"},
    {"config.rlHyperparams.scaleRewards", FT::kEnum, 0, 0, false, false, "group, batch, none",
     "divide group-centred rewards by the group's std, the batch's, or not at all (Dr. GRPO)"},
    {"config.rlHyperparams.microBatchSize", FT::kInteger, 1, 65536, false, false, "",
     "completions per forward/backward pass (gradients accumulate over the batch)"},
    {"config.rlHyperparams.stopStrings", FT::kStringList, 0, 0, false, false, "",
     "a completion ends once its text contains one of these (at most 32, each 1 to 256 bytes); it keeps the token that completed it"},
    {"config.rlHyperparams.tools", FT::kObject, 0, 0, false, false, "",
     "the executable that runs the tool calls of rows that declare tools; absent: no tool is run"},
    {"config.rlHyperparams.tools.command", FT::kString, 0, 0, false, false, "",
     "path of the tool executable (run without a shell; one JSON request on stdin, one JSON answer on stdout). Required"},
    {"config.rlHyperparams.tools.timeoutSeconds", FT::kNumber, 0, 3600, true, false, "",
     "a call running longer is stopped and fails (default 10)"},
    {"config.rlHyperparams.tools.maxCalls", FT::kInteger, 1, 64, false, false, "",
     "tool calls run per completion; a call past them ends the completion (default 4)"},
    {"config.rlHyperparams.tools.network", FT::kObject, 0, 0, false, false, "",
     "the network the confined tool needs, {allow: [\"HOST:PORT\", ...]}; absent: none (docs/security.md, \"User code\")"},
    {"config.rlHyperparams.tools.network.allow", FT::kStringList, 0, 0, false, false, "",
     "HOST:PORT the tool connects to, each allowed by trainerd's outbound.allow at submission"},
    {"config.rlHyperparams.optimizer", FT::kObject, 0, 0, false, false, "", "AdamW and its schedule of RL runs (grpo, gspo)"},
    {"config.rlHyperparams.optimizer.learningRate", FT::kNumber, 0, 1, true, false, "", "peak learning rate"},
    {"config.rlHyperparams.optimizer.weightDecay", FT::kNumber, 0, 1e3, false, false, "", "decoupled weight decay"},
    {"config.rlHyperparams.optimizer.beta1", FT::kNumber, 0, 1, false, true, "", "AdamW beta1"},
    {"config.rlHyperparams.optimizer.beta2", FT::kNumber, 0, 1, false, true, "", "AdamW beta2"},
    {"config.rlHyperparams.optimizer.epsilon", FT::kNumber, 0, 1, true, false, "", "AdamW epsilon"},
    {"config.rlHyperparams.optimizer.maxGradNorm", FT::kNumber, 0, 1e9, false, false, "",
     "clip the total gradient norm to this; 0 disables clipping"},
    {"config.rlHyperparams.optimizer.schedule", FT::kEnum, 0, 0, false, false, "linear, cosine, constant",
     "learning-rate decay after warmup"},
    {"config.rlHyperparams.optimizer.warmupSteps", FT::kInteger, 0, kMaxInt, false, false, "",
     "linear warmup, in optimizer steps"},
    {"config.rlHyperparams.optimizer.warmupRatio", FT::kNumber, 0, 1, false, true, "",
     "warmup as a share of all steps, used when warmupSteps is 0"},
    {"execution", FT::kObject, 0, 0, false, false, "", "where and how the run executes"},
    {"execution.gpus", FT::kInteger, 0, 1024, false, false, "", "devices the run holds; 0 trains on the CPU"},
    {"execution.saveEvery", FT::kInteger, 1, kMaxInt, false, false, "",
     "save the adapter every N optimizer steps. Absent: only at the end, so a cancelled run keeps none"},
    {"execution.keepAdapters", FT::kInteger, 1, 1000, false, false, "", "saved adapters kept, newest first"},
    {"execution.keepTrainingStates", FT::kInteger, 1, 1000, false, false, "",
     "snapshots' training states kept, newest first (held ones and the final snapshot always stay)"},
    {"execution.resumableSaveEvery", FT::kInteger, 1, kMaxInt, false, false, "",
     "save the training state (what a resume needs) every N optimizer steps; with it or resumableSaveMinutes, the "
     "saves of saveEvery between hold the weights only. Absent with both: every save holds the training state"},
    {"execution.resumableSaveMinutes", FT::kNumber, 0, 10080, true, false, "",
     "save the training state at the first step boundary this many minutes after the last one"},
    {"execution.maxAttempts", FT::kInteger, 1, 100, false, false, "",
     "attempts of a run whose job ends without an outcome (killed, crashed, lost, hung): each new one resumes the "
     "newest committed training state; 1 disables retries"},
    {"grader", FT::kString, 0, 0, false, false, "", "overrides the workload's grader"},
    {"graderInstructions", FT::kString, 0, 0, false, false, "",
     "instructions (system prompt) of the run's model: judges: its model: reward terms without their own, and a "
     "model: grader; refused on a plan with neither (docs/graders.md)"},
    {"description", FT::kString, 0, 0, false, false, "", "free text"},
    {"configName", FT::kString, 0, 0, false, false, "", "label of this configuration in score tables"},
    {"submissionId", FT::kString, 0, 0, false, false, "",
     "idempotency key: resubmitting the same plan with it reaches the same run. Absent: the CLI generates one"},
    {"warmStartModelId", FT::kString, 0, 0, false, false, "",
     "a registered adapter (trained-models id or prefix) the run starts from instead of a fresh adapter: its weights, "
     "steps counted from zero (e.g. GRPO after SFT). Its base model must be the plan's, its rank, alpha and target "
     "modules the plan's"},
    {"modelName", FT::kString, 0, 0, false, false, "",
     "the name of the model the completed run registers (trained-models list and get). Absent: the base model's"},
    {"source", FT::kObject, 0, 0, false, false, "", "where the run starts from (the newer spelling of warmStartModelId)"},
    {"source.model", FT::kString, 0, 0, false, false, "", "the same as warmStartModelId"},
    {"pauseAtStep", FT::kInteger, 1, kMaxInt, false, false, "",
     "after this many optimizer steps the run saves its training state and pauses itself (as runs pause "
     "--checkpoint save); runs resume carries on. Less than maxSteps"},
    {"smoke", FT::kObject, 0, 0, false, false, "",
     "a short check the job runs before training (sft, grpo, gspo): a few steps on the dataset's first rows, every "
     "loss and gradient norm finite, a checkpoint saved before the last step restored and that step trained again to "
     "the same loss. A failed check ends the run FAILED with its verdict (runs get; runs wait --exit-status exits 3); "
     "a passed one lets it train as without. `smoke: true` takes the defaults; absent: no check"},
    {"smoke.steps", FT::kInteger, 2, 100, false, false, "",
     "optimizer steps of the check, the last one trained twice (on, and from the restored checkpoint). Default 4"},
    {"smoke.rows", FT::kInteger, 1, 10000, false, false, "",
     "the dataset's first rows the check trains on (fewer when the dataset has fewer). Default 16"},
};

// The fields of one kind of method (plan.h, MethodField). Each is a field of kFields.
const std::vector<MethodField> kMethodFields = {
    {"config.validationDataset", false, "has no validation loss"},
    {"config.hyperparams.optimizer", false, "sets its optimizer under config.rlHyperparams.optimizer"},
    {"config.hyperparams.training.batchSize", false, kRlBatches},
    {"config.hyperparams.training.gradientAccumulation", false, kRlBatches},
    {"config.hyperparams.training.validationFrequencySteps", false, kRlBatches},
    {"config.hyperparams.training.validationSplit", false, kRlBatches},
    {"config.hyperparams.training.packing", false, kRlBatches},
    {"config.reward", true, ""},
    {"config.klBeta", true, ""},
    {"config.rlHyperparams", true, ""},
};

}  // namespace

const std::vector<FieldSpec>& plan_fields() { return kFields; }

const std::vector<MethodField>& method_only_fields() { return kMethodFields; }

const FieldSpec* find_field(std::string_view path) {
  for (const auto& f : kFields) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

std::string field_default_text(const FieldSpec& spec) {
  if (spec.path == "kind" || spec.help.find("Required") != std::string_view::npos) return "required";
  if (spec.type == FieldType::kObject) return "";
  Plan defaults;
  if (spec.path.rfind("config.reward", 0) == 0 || spec.path.rfind("config.klBeta", 0) == 0 ||
      spec.path.rfind("config.rlHyperparams", 0) == 0) {
    defaults.config.method = Method::kGrpo;  // the RL fields resolve only on an RL plan
  }
  json value = to_json(defaults);
  for (size_t start = 0; start <= spec.path.size();) {
    size_t dot = spec.path.find('.', start);
    std::string key(spec.path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!value.is_object() || !value.contains(key)) return "";
    value = value[key];
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (value.is_null()) return "absent";
  if (value.is_array()) {
    if (value.empty()) return "[]";
    std::string list;
    for (const auto& v : value) list += (list.empty() ? "" : ", ") + (v.is_string() ? v.get<std::string>() : v.dump());
    return list;
  }
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

std::string field_range_text(const FieldSpec& spec) {
  auto number = field_bound_text;
  switch (spec.type) {
    case FieldType::kInteger:
      if (!std::isfinite(spec.hi)) return number(spec.lo) + " or more";
      return number(spec.lo) + " to " + number(spec.hi);
    case FieldType::kNumber:
      return std::string(spec.lo_open ? "(" : "[") + number(spec.lo) + ", " + number(spec.hi) +
             (spec.hi_open ? ")" : "]");
    case FieldType::kEnum:
      return std::string(spec.values);
    case FieldType::kStringList:
      return spec.values.empty() ? "any" : "some of " + std::string(spec.values);
    case FieldType::kBoolean:
      return "true, false";
    case FieldType::kString:
    case FieldType::kObject:
      return "";
  }
  return "";
}

std::string fields_reference_markdown() {
  auto type_name = [](FieldType t) {
    switch (t) {
      case FieldType::kString: return "string";
      case FieldType::kInteger: return "integer";
      case FieldType::kNumber: return "number";
      case FieldType::kBoolean: return "boolean";
      case FieldType::kEnum: return "string";
      case FieldType::kStringList: return "list of strings";
      case FieldType::kObject: return "object";
    }
    return "";
  };
  auto code = [](const std::string& s) { return s.empty() ? std::string() : "`" + s + "`"; };
  std::string out = "| field | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& f : kFields) {
    std::string def = field_default_text(f);
    if (def == "required" || def == "absent") def = "*" + def + "*";
    else def = code(def);
    const std::string range = field_range_text(f);
    out += "| `" + std::string(f.path) + "` | " + type_name(f.type) + " | " + def + " | " + range + " | " +
           std::string(f.help) + " |\n";
  }
  return out;
}

}  // namespace trainer::plan

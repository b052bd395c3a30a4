// Run plans: the documented descriptor a user submits (`trainer runs start -f plan.yaml`).
//
// One parser for everyone: the CLI (dry runs), the service (admission) and trainer-job
// (local runs) read plans only through parse_plan(). Unknown fields are refused by their
// dotted path; every default is filled here and nowhere else, so `--show-resolved`, the
// service's stored plan and the engine's configuration agree.
//
// Defaults, when a field is absent, are the values written below.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::plan {

enum class Method { kSft, kGrpo, kGspo };
enum class Precision { kBf16, kFp32 };
enum class Schedule { kLinear, kCosine, kConstant };
// How the per-token policy loss of RL is averaged, with TRL's names (loss_type).
enum class LossAggregation { kDapo, kBnpo, kGrpo, kDrGrpo };
// What the group-centred rewards are divided by (TRL's scale_rewards).
enum class ScaleRewards { kGroup, kBatch, kNone };
// The engine that trains a run (config.engine): this project's own libtorch engine, or a peer
// behind the same job protocol. What each can do is in plan/engine_capabilities.h.
enum class Engine { kNative, kTrl, kVerl };

struct LoraSettings {
  int rank = 8;                  // hyperparams.lora.rank: adapter rank r (> 0)
  double alpha = 16.0;           // hyperparams.lora.alpha: scale is alpha / rank
  double dropout = 0.0;          // hyperparams.lora.dropout: dropout on the adapter input, [0, 1)
  std::vector<std::string> targetModules = {"q_proj", "k_proj", "v_proj", "o_proj",
                                            "gate_proj", "up_proj", "down_proj"};  // hyperparams.lora.targetModules
};

struct OptimizerSettings {
  double learningRate = 1e-4;    // hyperparams.optimizer.learningRate: peak AdamW learning rate (> 0)
  double weightDecay = 0.0;      // hyperparams.optimizer.weightDecay: decoupled weight decay
  double beta1 = 0.9;            // hyperparams.optimizer.beta1
  double beta2 = 0.999;          // hyperparams.optimizer.beta2
  double epsilon = 1e-8;         // hyperparams.optimizer.epsilon
  double maxGradNorm = 1.0;      // hyperparams.optimizer.maxGradNorm: clip total grad norm; 0 disables
  Schedule schedule = Schedule::kLinear;  // hyperparams.optimizer.schedule: "linear" | "cosine" | "constant" decay after warmup
  int warmupSteps = 0;           // hyperparams.optimizer.warmupSteps: linear warmup length in optimizer steps
  double warmupRatio = 0.0;      // hyperparams.optimizer.warmupRatio: warmup as a share of total steps (used when warmupSteps is 0)
};

struct TrainingSettings {
  int epochs = 1;                      // hyperparams.training.epochs: passes over the dataset (ignored when maxSteps is set)
  std::optional<int> maxSteps;         // hyperparams.training.maxSteps: optimizer steps; overrides epochs
  int batchSize = 4;                   // hyperparams.training.batchSize: rows per micro-batch per device
  int gradientAccumulation = 1;        // hyperparams.training.gradientAccumulation: micro-batches per optimizer step
  int validationFrequencySteps = 0;    // hyperparams.training.validationFrequencySteps: 0 = validate only at the end
  double validationSplit = 0.0;        // hyperparams.training.validationSplit: share of rows held out when no validationDataset
  bool packing = false;                // hyperparams.training.packing: pack rows into maxSeqLength sequences
  uint64_t seed = 42;                  // hyperparams.training.seed: seeds init, dropout, shuffling
};

// The kinds of reward term (config.reward.terms[].kind, docs/graders.md).
enum class TermKind {
  kLabelMatch,  // "json-label-match": built in
  kRule,        // "rule:PATH": compute_score() of the Python file PATH, in a worker process
  kBundle,      // "bundle:PATH" or "bundle:DIR#MODULE": the same, from a file or a package
  kHttp,        // "http:URL": an evaluator the user runs, POSTed {input, output, expected}
  kModel,       // "model:NAME": a judge of trainerd's configuration (OpenAI chat completions)
};

// Where a model: term's judge answers. trainerd fills it from its `judges` configuration into
// the plan it writes for the job; a plan submitted to trainerd leaves it out.
struct JudgeEndpoint {
  std::string url;        // config.reward.terms[].judge.url: base URL (POSTs go to url + "/v1/chat/completions")
  std::string model;      // config.reward.terms[].judge.model: the request's `model`; "" = the judge's name
  std::string apiKeyEnv;  // config.reward.terms[].judge.apiKeyEnv: variable holding a bearer token; "" = none
  std::string caFile;     // config.reward.terms[].judge.caFile: PEM CAs trusted for an https url; "" = the system's
  // config.reward.terms[].judge.jobIdEnv: variable holding the job attempt's id, sent as X-Trainer-Job
  // (trainerd's own endpoints take the attempt's credentials: docs/security.md, "Jobs"); "" = none
  std::string jobIdEnv;
  // config.reward.terms[].judge.proxy: the HTTP proxy the calls go through, http://HOST:PORT
  // (trainerd's outbound.proxy, for its declared judges only); "" = directly
  std::string proxy;
};

// One weighted reward term of an RL run (config.reward.terms[]).
struct RewardTermSpec {
  std::string kind = {};  // config.reward.terms[].kind: "json-label-match", "rule:PATH", "http:URL", ...
  double weight = 1.0;   // config.reward.terms[].weight: the term's share of the total reward
  std::string name = {};  // config.reward.terms[].name: the term's label in metrics; empty = term_label()
  // External terms only (rule, bundle, http, model); refused on json-label-match.
  double timeoutSeconds = 30;       // config.reward.terms[].timeoutSeconds: one call's limit, seconds
  int maxConsecutiveFailures = 20;  // config.reward.terms[].maxConsecutiveFailures: unscored calls in a row that stop the job
  // http and model terms only.
  int retries = 1;      // config.reward.terms[].retries: further attempts of a call that produced no score
  int concurrency = 4;  // config.reward.terms[].concurrency: calls in flight at once
  // rule and bundle terms only: config.reward.terms[].network.allow, the HOST:PORT the confined code
  // needs to connect to (each allowed by trainerd's outbound.allow at submission); empty = no network.
  std::vector<std::string> networkAllow = {};
  // http terms only.
  std::optional<std::string> caFile = {};  // config.reward.terms[].caFile: PEM CAs trusted for an https URL; absent = the system's
  // model terms only.
  std::optional<std::string> graderInstructions = {};  // config.reward.terms[].graderInstructions: the judge's system prompt; absent = built-in
  std::optional<JudgeEndpoint> judge = {};             // config.reward.terms[].judge: filled by trainerd
  int maxTokens = 512;  // config.reward.terms[].maxTokens: the judge's answer at most, tokens (its max_tokens)
  // Not a term field: the plan's top-level graderInstructions, given to a model: term that has
  // none of its own when the plan is parsed. absent = none (the term's own, else built-in).
  std::optional<std::string> planGraderInstructions = {};
};

// Where a model: term's judge instructions come from: "term" (its graderInstructions), "plan"
// (the plan's top-level graderInstructions) or "built-in".
const char* grader_instructions_source(const RewardTermSpec& term);

// The kind of `kind` ("rule:x.py" -> kRule); nullopt for an unknown kind.
std::optional<TermKind> term_kind(std::string_view kind);
// What follows the kind's prefix: the path, URL or judge name ("" for json-label-match). An
// http: term's URL may be written after the prefix or alone: "http:http://h/p" and "http://h/p"
// both give "http://h/p".
std::string term_target(std::string_view kind);
// What a rule: or bundle: term runs: FUNCTION of a Python file ("rule:PATH[:FUNCTION]",
// "bundle:PATH[:FUNCTION]", PATH ending in .py) or of a module of a package folder
// ("bundle:FOLDER#MODULE[:FUNCTION]").
struct ScoringFunction {
  std::string path;      // the file, or the package folder
  std::string module;    // the dotted module within the folder; "" for a file
  std::string function;  // the function called; "compute_score" unless written
};
inline constexpr const char* kDefaultScoringFunction = "compute_score";
// nullopt for a term of another kind.
std::optional<ScoringFunction> scoring_function(std::string_view kind);

// The term's label in metrics and events (the registry's rl.term): its name, else
// "rule:FILE" / "bundle:FILE" by file name, else the kind as written.
std::string term_label(const RewardTermSpec& term);
// One term as config.reward.terms[] takes it ({kind, weight, name, timeoutSeconds, ...}, the
// field table's bounds checked): an evaluation's grader is written the same way. Errors name `at`.
Result<RewardTermSpec> parse_reward_term(const nlohmann::json& term, const std::string& at);

// The tool executable of an RL run whose rows declare tools (config.rlHyperparams.tools): a
// completion's tool calls are run with it during generation (docs/rl.md, "Tools").
struct ToolSettings {
  std::string command = {};     // config.rlHyperparams.tools.command: path of the executable (no shell). Required
  double timeoutSeconds = 10;   // config.rlHyperparams.tools.timeoutSeconds: a call running longer fails
  int maxCalls = 4;             // config.rlHyperparams.tools.maxCalls: tool calls run per completion
  // config.rlHyperparams.tools.network.allow: HOST:PORT the confined tool needs to connect to (each
  // allowed by trainerd's outbound.allow at submission); empty = no network.
  std::vector<std::string> networkAllow = {};
};

// Settings of GRPO/GSPO runs (config.rlHyperparams). TRL's GRPOConfig names in brackets.
struct RlSettings {
  int groupSize = 8;              // config.rlHyperparams.groupSize: completions per prompt (num_generations)
  int promptsPerStep = 4;         // config.rlHyperparams.promptsPerStep: prompts of one generation batch
  int maxCompletionLength = 256;  // config.rlHyperparams.maxCompletionLength: new tokens per completion
  double temperature = 1.0;       // config.rlHyperparams.temperature: sampling temperature
  double topP = 1.0;              // config.rlHyperparams.topP: nucleus sampling; 1 = off
  int topK = 0;                   // config.rlHyperparams.topK: sample among the k likeliest; 0 = off
  double clipLow = 0.2;           // config.rlHyperparams.clipLow: lower clip bound epsilon (epsilon)
  double clipHigh = 0.2;          // config.rlHyperparams.clipHigh: upper clip bound epsilon (epsilon_high)
  int iterationsPerBatch = 1;     // config.rlHyperparams.iterationsPerBatch: optimizer steps per generation batch (num_iterations)
  LossAggregation lossAggregation = LossAggregation::kDapo;  // config.rlHyperparams.lossAggregation (loss_type)
  ScaleRewards scaleRewards = ScaleRewards::kGroup;          // config.rlHyperparams.scaleRewards (scale_rewards)
  int microBatchSize = 8;         // config.rlHyperparams.microBatchSize: completions per forward/backward pass
  // config.rlHyperparams.stopStrings: a completion ends once its text contains one (it keeps the
  // tokens up to and including the one that completed it), as transformers' stop_strings.
  std::vector<std::string> stopStrings = {};
  std::optional<ToolSettings> tools = {};  // config.rlHyperparams.tools: absent = no tool is run
  OptimizerSettings optimizer = {.learningRate = 1e-5};  // config.rlHyperparams.optimizer: AdamW of RL runs
};

struct RunConfig {
  std::string dataset;                       // config.dataset: name, hash, or (local runs) a JSONL path. Required
  std::optional<std::string> validationDataset;  // config.validationDataset: held-out rows for validation loss
  Method method = Method::kSft;              // config.method: "sft" | "grpo" | "gspo"
  Engine engine = Engine::kNative;           // config.engine: "native" | "trl" | "verl"
  LoraSettings lora;
  OptimizerSettings optimizer;
  TrainingSettings training;
  int maxSeqLength = 2048;                   // config.maxSeqLength: tokens per row after the chat template (> 0)
  Precision precision = Precision::kBf16;    // config.model.precision: "BF16" | "FP32"
  // Reinforcement runs only (method grpo/gspo); refused on an SFT plan.
  std::vector<RewardTermSpec> rewardTerms = {{.kind = "json-label-match"}};  // config.reward.terms
  double klBeta = 0.0;                       // config.klBeta: weight of the KL to the base model
  RlSettings rl;                             // config.rlHyperparams

  bool is_rl() const { return method != Method::kSft; }
  // The optimizer the run trains with: rl.optimizer for RL runs, else `optimizer`.
  const OptimizerSettings& active_optimizer() const { return is_rl() ? rl.optimizer : optimizer; }
};

struct ExecutionSettings {
  int gpus = 1;                    // execution.gpus: devices the run holds; 0 trains on the CPU
  std::optional<int> saveEvery;    // execution.saveEvery: save every N optimizer steps; absent = only at the end
  int keepAdapters = 4;            // execution.keepAdapters: weight snapshots kept (newest first)
  int keepTrainingStates = 2;      // execution.keepTrainingStates: training-state snapshots kept (newest first)
  int maxAttempts = 3;             // execution.maxAttempts: attempts a job that ends without an outcome may use; 1 = no retry
  // execution.resumableSaveEvery / resumableSaveMinutes: the training state (what a resume needs:
  // optimizer, RNG, data position) is saved every N optimizer steps, and at the first step
  // boundary M minutes after the last one. With either set, the saves of saveEvery between them
  // hold the weights only; with neither, every save holds both.
  std::optional<int> resumableSaveEvery;
  std::optional<double> resumableSaveMinutes;
  bool resumable_cadence() const { return resumableSaveEvery.has_value() || resumableSaveMinutes.has_value(); }
};

// smoke: a short check run before the training, in the same job (docs/plans.md, "Smoke checks"):
// `steps` optimizer steps on the dataset's first `rows` rows, every loss and gradient norm
// finite, a checkpoint saved before the last step restored and that step trained again to the
// same loss. A failed check ends the run FAILED with its verdict; a passed one lets it train.
struct SmokeSettings {
  int steps = 4;   // smoke.steps: optimizer steps of the check (the last one also from the restored checkpoint)
  int rows = 16;   // smoke.rows: the dataset's first rows the check trains on
};

struct Plan {
  std::string kind = "run";                  // kind: "run". Required
  std::string workload;                      // workload: name or id. Required
  std::optional<std::string> baseModel;      // baseModel: repository name, or (local runs) a model folder
  RunConfig config;
  ExecutionSettings execution;
  std::optional<std::string> grader;         // grader: overrides the workload's grader
  // graderInstructions: the instructions of the run's model: judges (reward terms without their
  // own, and a model: grader); refused on a plan with neither.
  std::optional<std::string> graderInstructions;
  std::optional<std::string> description;    // description: free text
  std::optional<std::string> configName;     // configName: label of this configuration in score tables
  std::optional<std::string> submissionId;   // submissionId: idempotency key of the submission
  // pauseAtStep: after this many optimizer steps the run saves and pauses itself, as
  // `runs pause --checkpoint save` would; `runs resume` carries on. Absent: never.
  std::optional<int> pauseAtStep;
  // warmStartModelId (or, in the newer spelling, source.model): a registered adapter the run
  // starts from instead of a fresh one (its weights; steps count from zero). Its base model must
  // be the plan's, its rank, alpha and target modules the plan's LoRA settings.
  std::optional<std::string> warmStartModelId;
  std::optional<std::string> modelName;  // modelName: the registered model's name; absent: the base model's
  std::optional<SmokeSettings> smoke;    // smoke: the check run first; absent: none (`smoke: true` = the defaults)
};

// Parses a plan written in JSON or YAML (detected from the text). Errors are kInvalidArgument.
// One that blames a field carries its dotted path (st.field(): "config.hyperparams.lora.rank")
// and a message that does not repeat it ("must be between 1 and 4096, got -1"); an unknown
// field's message suggests the nearest valid one ("unknown field; did you mean learningRate?").
// Callers name the file and, with locate_field(), the line. Errors of the text itself (empty,
// not JSON, not YAML) blame no field and name `source` ("plan.yaml", "stdin") in the message.
Result<Plan> parse_plan(std::string_view text, std::string_view source);


// The same, from an already-parsed JSON document.
Result<Plan> plan_from_json(const nlohmann::json& doc, std::string_view source);

// The resolved plan: every field with its default filled in, in the documented shape
// (enums as their documented strings: "sft", "BF16", "cosine").
nlohmann::json to_json(const Plan& plan);

// Only `config` (what determines the trained model), resolved.
nlohmann::json config_to_json(const RunConfig& config);

// run.settings_sha: hex SHA-256 of the flattened, resolved config with `config.dataset`
// replaced by `dataset_hash`. Identical settings and data give the identical hash, whatever
// the run ids, descriptions or execution settings. config.engine counts only when it is not
// "native", so the runs hashed before engines existed keep their hash.
std::string settings_sha(const RunConfig& config, const std::string& dataset_hash);

// The flattened hyperparameters the hash is taken over: {"config.hyperparams.lora.rank": 8, ...}
// (`runs hparams`), with config.dataset = dataset_hash; config.engine only when not "native".
nlohmann::json flatten_config(const RunConfig& config, const std::string& dataset_hash);

// Total optimizer steps for `rows` training rows (after packing, if any) under `config`.
int64_t total_steps(const RunConfig& config, int64_t rows);

// Where a field is written in a plan's text: 1-based line and column.
struct TextPosition {
  int line = 0;
  int column = 0;
};

// The position of the dotted `field` ("config.hyperparams.lora.rank", "a.b[2].c") in the plan
// `text` (YAML or JSON): its key, or the deepest enclosing key that is written when the field
// itself is absent (a missing required field). nullopt when the text does not parse or no
// part of the path is written.
std::optional<TextPosition> locate_field(std::string_view text, std::string_view field);

// ---- the field table: every plan field, its type, range and meaning --------------------------

enum class FieldType { kString, kInteger, kNumber, kBoolean, kEnum, kStringList, kObject };

// One field of the plan. The parser takes its ranges and allowed values from here, and
// docs/plans.md is generated from it (fields_reference_markdown()), so neither can drift.
struct FieldSpec {
  std::string_view path;  // dotted path: "config.hyperparams.lora.rank"
  FieldType type;
  double lo = 0;          // numbers: the allowed range [lo, hi], bounds excluded when *_open
  double hi = 0;
  bool lo_open = false;
  bool hi_open = false;
  std::string_view values;  // enums and lists: the allowed values, ", "-separated
  std::string_view help;    // what it means; what its absence means
};

// Every field, in the order of the resolved plan.
const std::vector<FieldSpec>& plan_fields();

// The spec of `path`; nullptr when the plan has no such field.
const FieldSpec* find_field(std::string_view path);

// The default of a field as the resolved plan writes it ("8", "\"linear\"", "absent",
// "required").
std::string field_default_text(const FieldSpec& spec);

// The allowed values in words: "1 to 4096", "(0, 1]", "sft, grpo, gspo", "any".
std::string field_range_text(const FieldSpec& spec);

// The Markdown table of every field (field, type, default, range, meaning) that
// docs/plans.md carries between its generated-table markers.
std::string fields_reference_markdown();

// ---- fields of one kind of method ----------------------------------------------------------

// A config field that plans of one kind of method have and plans of the other kind refuse: an
// SFT field on a grpo/gspo plan, a reinforcement-learning field on an sft plan. parse_plan()
// refuses them by this list, and a child run that changes method drops its parent's by it
// (plan/overrides.h), so the two cannot disagree.
struct MethodField {
  std::string_view path;  // dotted, as in the field table: "config.validationDataset"
  bool rl;                // true: grpo and gspo plans only; false: sft plans only
  // SFT fields: what an RL run does instead, the sentence's end after 'a "grpo" run ' ("has no
  // validation loss"). Empty for RL fields (one message serves them all).
  std::string_view instead;
};

// Every such field, SFT ones first, each in the order of the field table.
const std::vector<MethodField>& method_only_fields();

// True for grpo and gspo.
inline bool is_rl_method(Method m) { return m != Method::kSft; }

// The method named `name` ("sft", "grpo", "gspo"); nullopt for any other text.
std::optional<Method> method_from_name(std::string_view name);

const char* method_name(Method m);        // "sft", "grpo", "gspo"
const char* engine_name(Engine e);        // "native", "trl", "verl"
// The engine named `name`; nullopt for any other text.
std::optional<Engine> engine_from_name(std::string_view name);
const char* precision_name(Precision p);  // "BF16", "FP32"
const char* schedule_name(Schedule s);    // "linear", "cosine", "constant"
const char* loss_aggregation_name(LossAggregation a);  // "dapo", "bnpo", "grpo", "dr_grpo"
const char* scale_rewards_name(ScaleRewards s);        // "group", "batch", "none"

}  // namespace trainer::plan

// The native training engine, C++ on libtorch: the public face used by trainer-job.
//
// Only this library's translation units include torch headers; nothing outside src/engine
// does, so a change elsewhere never recompiles the engine. Every function here catches what
// libtorch throws and returns a Status naming the file and field at fault.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/dist/world.h"
#include "plan/plan.h"
#include "protocol/job_protocol.h"

namespace trainer::engine {

// What the linked libtorch offers on this host.
struct RuntimeInfo {
  std::string torch_version;  // libtorch's version, e.g. "2.11.0"
  bool cuda_available = false;  // a CUDA device is usable
  int cuda_devices = 0;        // number of visible CUDA devices
  int cpu_threads = 0;         // intra-op threads libtorch will use
};

RuntimeInfo runtime_info();

// Receives the job-protocol events of a run (protocol/job_protocol.h, docs/job-protocol.md), in
// order: phase PREPARING, devices, preparing..., data_fit, data_split, resolved, phase TRAINING,
// step..., validation..., checkpoint..., phase EXPORTING, completed. A failed or cancelled run
// ends without completed; the caller reports failed/cancelled from the result. Called on the
// training thread.
using EventSink = std::function<void(const protocol::Event& event)>;

struct TrainRequest {
  plan::Plan plan;              // parsed and resolved (plan::parse_plan)
  std::string output_dir;       // the adapter is written to output_dir/adapter
  // Set from another thread or a signal handler to stop at the next step boundary.
  const std::atomic<bool>* stop = nullptr;
  // Set to save a full checkpoint (adapter and training state) at the next step boundary and
  // stop (TrainResult.paused). Checked before `stop`.
  const std::atomic<bool>* pause = nullptr;
  // Continue a run from a checkpoint: its adapter folder and its training state folder
  // (train/state.h); both empty = start from a fresh adapter.
  std::string resume_weights_dir;
  std::string resume_state_dir;
  // A child run (`runs branch`, `runs continue`) starts from its parent's snapshot instead:
  // resume_weights_dir alone starts a fresh optimizer, schedule, RNG and data order from those
  // weights; with resume_state_dir too, the optimizer moments, RNG and data position carry on.
  // Either way the child counts its own updates from zero and its schedule spans its own plan.
  bool branch = false;
  // Data-parallel SFT (docs/data-parallel.md): this process's rank of `world`. Rank 0 passes the
  // rendezvous it hosts (dist::host_rendezvous) and alone emits events and writes files; the
  // other ranks join it at world.master_addr:master_port and emit nothing. A world of one
  // trains alone.
  dist::World world;
  std::shared_ptr<dist::Rendezvous> rendezvous;
};

struct TrainResult {
  bool cancelled = false;       // stopped by `stop` before the last step; no adapter written
  bool paused = false;          // stopped by `pause` after saving a checkpoint (its event was emitted)
  bool paused_by_plan = false;  // ... the plan's pauseAtStep, not `pause`, stopped it
  std::string adapter_dir;      // output_dir/adapter when completed
  int64_t steps = 0;            // optimizer steps done
  int64_t total_steps = 0;
  double final_loss = 0;        // loss of the last step
  double final_validation_loss = -1;  // -1 when there was no validation data
};

// LoRA SFT from plan.config on plan.baseModel (a model folder) and config.dataset (a JSONL
// path). Trains on CUDA when execution.gpus > 0 and CUDA is available, else on the CPU.
Result<TrainResult> train_sft(const TrainRequest& request, const EventSink& events);

// GRPO/GSPO with LoRA from plan.config (method grpo or gspo) on plan.baseModel and the RL rows
// of config.dataset (chat rows whose final assistant message is the gold answer). Events as
// train_sft's; each step event carries the RL figures in `rl`.
Result<TrainResult> train_rl(const TrainRequest& request, const EventSink& events);

// train_sft or train_rl, by plan.config.method.
Result<TrainResult> run_training(const TrainRequest& request, const EventSink& events);

// The plan's smoke check (plan.smoke, docs/plans.md "Smoke checks"), run by trainer-job before
// the training, in OUTPUT/smoke (removed after; it publishes nothing). On one device:
//   load        the model, its tokenizer and the dataset's first smoke.rows rows load;
//   train       smoke.steps optimizer steps on them run without an error;
//   loss        every step's loss and gradient norm is finite;
//   checkpoint  the training state saved before the last step restores, and that step trained
//               again from it gives a finite loss, for SFT the same loss (relative 1e-3).
// The request is the run's (its plan, output folder, stop flag and any warm start or branch
// weights); its pause flag and cadences are not used. The steps' events are not passed on.
struct SmokeResult {
  protocol::Smoke verdict;  // passed, or the first check that failed and why
  bool cancelled = false;   // `stop` was set: no verdict
};

// An error only where the check could not be run (its folder cannot be written, a full disk);
// a plan or data at fault is a failed verdict.
Result<SmokeResult> smoke_check(const TrainRequest& request, const plan::SmokeSettings& smoke);

// A PEFT LoRA adapter merged into its base model's weights, written as a Hugging Face model folder
// (`trainer-job merge`; docs/registry.md, "Taking a model away"): config.json and the tokenizer
// files of the base, and one model.safetensors holding every base tensor under its own name and
// dtype, each adapted linear W' = W + scale * (B @ A) as PEFT's merge_and_unload() computes it.
struct MergeRequest {
  std::string model_dir;    // Hugging Face model folder (the base)
  std::string adapter_dir;  // PEFT LoRA adapter folder trained on it
  std::string output_dir;   // must not exist; written as a temporary sibling, then renamed
};

struct MergeResult {
  int64_t merged_modules = 0;      // linears the adapter changed
  std::vector<std::string> files;  // names of the files written, sorted
};

// Errors name the file and field or tensor at fault; nothing is left at output_dir on failure
// (kAlreadyExists when it exists, kInvalidArgument for an adapter that does not fit the base).
Result<MergeResult> merge_adapter(const MergeRequest& request);

struct ScoreRequest {
  std::string model_dir;        // Hugging Face model folder
  std::string adapter_dir;      // PEFT LoRA adapter folder; empty = the base model
  std::string data_path;        // chat or prompt/completion JSONL
  int max_seq_length = 2048;    // rows are cut to this many tokens, as in training
  plan::Precision precision = plan::Precision::kFp32;
  int batch_size = 8;           // rows per forward pass
};

struct ScoreResult {
  double mean_loss = 0;         // mean next-token cross-entropy over the trained tokens (nats)
  int64_t tokens = 0;           // trained tokens scored
  int64_t rows = 0;             // rows scored (rows with nothing to train are dropped)
  double token_accuracy = 0;    // argmax == label over the trained tokens
};

Result<ScoreResult> score(const ScoreRequest& request);

// An evaluation (docs/evaluations.md): each row's answer generated from its prompt (the row
// without its final assistant message) by the model and adapter, graded against that message.
struct EvaluateRequest {
  std::string model_dir;        // Hugging Face model folder
  std::string adapter_dir;      // PEFT LoRA adapter folder; empty = the base model
  std::string data_path;        // chat JSONL; each row ends with the expected assistant answer
  plan::RewardTermSpec grader;  // what scores an answer (json-label-match, rule:, http:, model:...)
  int64_t max_new_tokens = 256; // the completion-token ceiling
  bool greedy = true;           // false: sample at `temperature` with `seed`
  double temperature = 1.0;
  uint64_t seed = 0;
  int batch_size = 8;           // prompts generated together
  int max_seq_length = 2048;    // a prompt longer than this minus max_new_tokens is not answered
  int gpus = 0;                 // > 0: on CUDA when available
  plan::Precision precision = plan::Precision::kFp32;
  std::string field = "dataset";  // what error messages call the dataset setting
  const std::atomic<bool>* stop = nullptr;  // set to stop between batches (EvaluateResult.cancelled)
};

struct EvaluateResult {
  std::vector<nlohmann::json> rows;  // eval::row_json of each row, in file order
  nlohmann::json report;             // eval::report_json over them
  bool cancelled = false;
  double generation_seconds = 0, grading_seconds = 0;
};

// Called after each batch: rows answered and graded so far, of `total`.
using EvaluateProgress = std::function<void(int64_t done, int64_t total)>;

Result<EvaluateResult> evaluate(const EvaluateRequest& request, const EvaluateProgress& progress);

// Test hook (trainer-job's hidden `debug-forward`): one forward (and optionally backward) pass
// on ids given as tensors, results written as safetensors for comparison with transformers.
struct DebugForwardRequest {
  std::string model_dir;
  std::string adapter_dir;      // optional PEFT adapter, loaded with gradients enabled
  // safetensors with input_ids [B,T] I64 and optionally labels [B,T], position_ids [B,T] and
  // sequence_ids [B,T] (packed rows: attention stays within equal ids).
  std::string inputs_path;
  // safetensors written: logits [B,T,V] F32, loss [] F32 (mean over labels != -100), and with
  // `grads` "grad.<PEFT key>" for every adapter tensor.
  std::string output_path;
  bool grads = false;
  plan::Precision precision = plan::Precision::kFp32;
};

Status debug_forward(const DebugForwardRequest& request);

// Test and benchmark hook (trainer-job's hidden `debug-generate`): sampling with the engine's
// generator. `request_path` is JSON {"prompts": [[ids]], "maxNewTokens", "greedy", "temperature",
// "topP", "topK", "groupSize", "seed", "stopIds": [ids], "padId", "repeat", "logprobs"};
// `output_path` gets {"completions": [[ids]], "lengths", "terminated", "generatedTokens",
// "seconds" (the last of `repeat` runs), "tokensPerSecond", and with "logprobs": true
// "logprobs": [[each sampled token's log-probability under logits / temperature]]}.
struct DebugGenerateRequest {
  std::string model_dir;
  std::string adapter_dir;      // optional PEFT adapter
  std::string request_path;
  std::string output_path;
  plan::Precision precision = plan::Precision::kFp32;
};

Status debug_generate(const DebugGenerateRequest& request);

// Test hook (trainer-job's hidden `debug-rl-loss`): the GRPO/GSPO loss of one micro-batch and
// its LoRA gradients. `inputs_path` is safetensors with prompt_ids, prompt_mask, completion_ids,
// completion_mask [B, *] I64, advantages [B] F32 and optionally old_logps, ref_logps [B, C] F32;
// `settings_path` is JSON {"method": "grpo"|"gspo", "lossAggregation", "clipLow", "clipHigh",
// "klBeta", "temperature", "maxCompletionLength"}. Writes loss [] F32, logps and entropy [B, C] F32 and
// "grad.<PEFT key>" for every adapter tensor.
struct DebugRlLossRequest {
  std::string model_dir;
  std::string adapter_dir;
  std::string inputs_path;
  std::string settings_path;
  std::string output_path;
};

Status debug_rl_loss(const DebugRlLossRequest& request);

// How a dataset measures under a model's tokenizer and chat template, for trainer-job's analyze
// (a user chooses maxSeqLength before spending a GPU). Torch-free.
struct DatasetMeasureRequest {
  std::string model_dir;      // a model folder with tokenizer.json and tokenizer_config.json
  std::string data_path;      // chat or prompt/completion JSONL, read as training reads it
  int max_seq_length = 2048;  // rows are cut to this many tokens, as in training
  std::function<void(int64_t done, int64_t total)> progress;  // after every row; may be empty
};

struct DatasetMeasure {
  int64_t rows = 0;                        // rows read
  int64_t min_tokens = 0, max_tokens = 0;  // a row's token length before cutting
  double mean_tokens = 0;
  int64_t p50 = 0, p90 = 0, p99 = 0;       // nearest-rank percentiles of the lengths before cutting
  int64_t truncated = 0;                   // rows over max_seq_length (cut to it)
  int64_t exact = 0;                       // rows exactly max_seq_length long
  int64_t dropped = 0;                     // rows left with nothing to train once cut
  int64_t tokens = 0;                      // the rows' lengths before cutting, summed
  int64_t trained_tokens = 0;              // tokens the loss is taken on, after fitting
};

// Errors name the model folder, or the file, line and field of a bad row.
Result<DatasetMeasure> measure_dataset(const DatasetMeasureRequest& request);

namespace text {
class Tokenizer;
}

// A model folder's tokenizer and chat template, for trainer-job's tokenize. Torch-free; cheap to
// copy (copies share the tokenizer); every method may be called from any thread.
class TextCodec {
 public:
  // A folder with tokenizer.json (and tokenizer_config.json for render_row).
  static Result<TextCodec> load(const std::string& model_dir);

  // The ids of `text`, with the special tokens the tokenizer adds when `add_special_tokens`
  // (as transformers' tokenizer(text, add_special_tokens=...)).
  Result<std::vector<int32_t>> encode(const std::string& text, bool add_special_tokens) const;
  // The text of `ids`, special tokens written out.
  Result<std::string> decode(const std::vector<int32_t>& ids) const;

  // One dataset row as training renders, tokenizes and masks it.
  struct RenderedRow {
    std::string text;                // the decoded ids
    std::vector<int32_t> input_ids;
    std::vector<uint8_t> trained;    // 1 where the loss is taken; same size as input_ids
  };
  // `row_json` is one row, a JSON object on one line; errors are prefixed with "source:1: ".
  Result<RenderedRow> render_row(const std::string& row_json, const std::string& source) const;

 private:
  explicit TextCodec(std::shared_ptr<const text::Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {}
  std::shared_ptr<const text::Tokenizer> tokenizer_;  // never null
};

}  // namespace trainer::engine

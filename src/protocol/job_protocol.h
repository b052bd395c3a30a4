// The job protocol: the events `trainer-job run` and `trainer-job evaluate` write, one JSON object
// per line, read by trainerd (run progress, metrics, outcome; an evaluation's progress and report;
// the CLI sees them through the API). docs/job-protocol.md is the
// reference; this header is the one definition of every event and field.
//
// Writing: build a struct, `to_json(event)` (or `to_line`) and write it. Reading:
// `parse_event(line)` gives the event, or nothing for a line that is not one this reader knows
// (an unknown type, a malformed line, a document nested too deep): readers skip such lines, so
// a newer job may add event types and fields without breaking an older reader.
//
// Versioning: the first line of a stream is `hello` carrying `protocolVersion`. Version 1 is
// this header. Adding an event type or an optional field keeps the version; a change that an
// older reader would misread (a field renamed, a meaning changed) increments it. A stream
// without `hello` (jobs before the protocol was versioned, test stand-ins) is version 1.
//
// Torch-free, depends on common only. Field names in JSON are lowerCamelCase; sizes are
// bytes, durations seconds, counts plain integers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::protocol {

inline constexpr int kProtocolVersion = 1;
// Deepest nesting a reader accepts in one event line (the resolved config nests about 4).
inline constexpr int kMaxEventDepth = 16;
// Longest event line a reader accepts, in bytes.
inline constexpr size_t kMaxEventLineBytes = 1 << 20;

// "hello": the first line of a stream: the protocol and who writes it.
struct Hello {
  int protocol_version = kProtocolVersion;
  std::string job_version = {};  // "trainer-job 0.1.0"
  std::string run_id = {};       // TRAINER_RUN_ID; empty for a local run
  int64_t attempt = 0;      // TRAINER_ATTEMPT; 0 for a local run
};

// "phase": the job entered a phase. PREPARING (loading model and data), TRAINING (the loop;
// the optional fields are set), EXPORTING (writing the final adapter after the last step).
struct Phase {
  std::string phase = {};
  std::optional<int64_t> total_steps = {};     // TRAINING: optimizer steps the run will take
  std::optional<std::string> device = {};      // TRAINING: the device it trains on, "cpu", "cuda:0"
  std::optional<double> startup_seconds = {};  // TRAINING: from job start to the first step
};

// "preparing": rows of the dataset tokenized so far (about every 5%, and at the end).
struct Preparing {
  int64_t rows_done = 0;
  int64_t rows_total = 0;
};

// "data_fit": how the dataset's rows fit maxSeqLength (before any validation split).
struct DataFit {
  int64_t rows = 0;       // rows read
  int64_t truncated = 0;  // rows cut to maxSeqLength
  int64_t exact = 0;      // rows exactly maxSeqLength tokens long
  int64_t dropped = 0;    // rows with no token left to train on (not trained)
};

// "data_split": the rows the run trains on and holds out, once the validation split is made.
struct DataSplit {
  int64_t train_rows = 0;       // rows trained on
  int64_t validation_rows = 0;  // rows evaluated: held out by validationSplit, or of validationDataset
  bool held_out = false;        // true: the validation rows were taken from the dataset
};

// One device the job holds.
struct Device {
  int64_t index = 0;     // position among the job's devices (the worker rank)
  std::string kind = {};      // "cpu" | "cuda"
  std::string name = {};      // product name ("NVIDIA H100 80GB HBM3"); empty when unknown
  std::string uuid = {};      // the GPU's UUID as NVML reports it; empty when unknown
};

// "devices": the devices the job trains on, once chosen (PREPARING).
struct Devices {
  std::vector<Device> devices = {};
};

// "resolved": the configuration the job trains with, every default filled in.
struct Resolved {
  nlohmann::json config = {};    // plan::config_to_json of the resolved RunConfig
  std::string settings_sha = {}; // plan::settings_sha over the config and the dataset's content
};

// "engine_config": the engine's own resolved configuration, once per attempt before the first
// step: every knob it trains with, under the names engine configurations use (adam_beta1,
// lr_scheduler_type, per_device_train_batch_size, lora_r, ...). trainerd shows it beside the plan's
// config as submitted (`runs engine-config`).
struct EngineConfig {
  std::string engine = {};                           // "native", "trl", "verl"
  nlohmann::json config = nlohmann::json::object();  // knob -> value
};

// "engine_runtime": part of what the engine decided and measured at setup (`runs engine-runtime`),
// written at the moments it is known; trainerd merges each part into what the attempt wrote
// before (objects key by key). The sections (docs/job-protocol.md): rolloutEngine (RL: what
// generates rollouts; null for SFT), trainer.changedBySetup (a list of {field, from, to, why}),
// model (totalParameters, trainableParameters, ...), memory.afterLoad / afterFirstRollout /
// afterFirstStep (bytes).
struct EngineRuntime {
  std::string engine = {};                           // "native", "trl", "verl"
  nlohmann::json report = nlohmann::json::object();  // the sections this part sets
};

// What held the device's memory at the peak of a step (telemetry memory.component). Each part
// is absent when not measured (see docs/telemetry-usage.md for what each device kind reports).
struct MemoryUsage {
  std::optional<int64_t> weights = {};            // frozen base weights and buffers
  std::optional<int64_t> adapter = {};            // trainable LoRA weights
  std::optional<int64_t> gradients = {};          // gradients of the trainable weights
  std::optional<int64_t> optimizer_state = {};    // AdamW's two moments
  std::optional<int64_t> activations = {};        // the step's peak above what it began with
  std::optional<int64_t> other_tensors = {};      // tensors at step start that are none of the above
  std::optional<int64_t> allocator_cache = {};    // reserved and not allocated (CUDA)
  std::optional<int64_t> outside_allocator = {};  // device memory in use outside the allocator (CUDA)
  std::optional<int64_t> free = {};               // device memory free at the end of the step (CUDA)
  bool operator==(const MemoryUsage&) const = default;
};

// Memory figures of a step.
struct StepMemory {
  std::optional<int64_t> allocated_peak_bytes = {};  // most bytes held in tensors at once since start
  std::optional<int64_t> reserved_peak_bytes = {};   // most bytes the caching allocator held (CUDA)
  MemoryUsage usage = {};                            // breakdown at this step's peak
  bool operator==(const StepMemory&) const = default;
};

// "step": one optimizer update done.
struct Step {
  int64_t step = 0;         // 1-based
  int64_t total_steps = 0;
  int64_t epoch = 0;        // 0-based epoch the update's data came from
  double loss = 0;          // mean over the update's trained tokens
  double learning_rate = 0;
  double grad_norm = 0;     // before clipping
  double token_accuracy = 0;
  double tokens_per_second = 0;  // non-padding tokens per second of the step, per device
  int64_t batch_tokens = 0;      // non-padding tokens of the update
  int64_t trained_tokens = 0;    // tokens with a label
  double step_seconds = 0;       // forward, backward and optimizer: what throughput and MFU use
  double input_seconds = 0;      // collating and moving the batches (before the step)
  double forward_backward_seconds = 0;
  double optimizer_seconds = 0;
  std::optional<double> padding_share = {};  // absent when packed
  std::optional<double> mfu = {};            // absent without a known device peak
  // FLOPs the update's matrix products really did (engine/train/useful_flops.h); absent from
  // engines that do not count them (TRL) and from older event files.
  std::optional<double> useful_flops = {};
  std::optional<double> useful_mfu = {};  // useful_flops / the MFU span / the device peak; absent without a peak
  std::optional<StepMemory> memory = {};
  // GRPO/GSPO runs: the step's RL figures (rewards by term, completion lengths, KL, clip ratios,
  // phase seconds, rollouts), an object as docs/job-protocol.md describes; null for SFT.
  nlohmann::json rl = nullptr;
};

// "validation": one pass over the validation rows.
struct Validation {
  int64_t step = 0;
  double validation_loss = 0;
  int64_t tokens = 0;
  double evaluation_seconds = 0;
};

// "checkpoint": an intermediate adapter written (execution.saveEvery).
struct Checkpoint {
  int64_t step = 0;
  std::string adapter_dir = {};
  double checkpoint_seconds = 0;
  std::optional<std::string> state_dir = {};  // the training state saved with it (resuming needs it)
};

// "completed": the final adapter is written; the last event of a successful run.
struct Completed {
  std::string adapter_dir = {};
  double final_loss = 0;
  int64_t steps = 0;
  std::optional<double> final_validation_loss = {};
  double export_seconds = 0;  // writing the final adapter (phase EXPORTING)
  std::optional<std::string> state_dir = {};  // the final training state, beside the adapter
};

// "failed": the job stops with an error; the last event.
struct Failed {
  std::string reason = {};
};

// "cancelled": stopped by SIGTERM/SIGINT at a step boundary; the last event.
struct Cancelled {
  std::optional<int64_t> steps = {};  // steps done before stopping
};

// "paused": asked to pause (SIGUSR1), the job saved its full state at a step boundary, the
// snapshot is committed in the catalog, and it stops; the last event (exit 0). Or, with a
// `reason`, the job stopped by itself because a save could not be kept (its disk is full): then
// `snapshotId` is "" and the run pauses against its newest committed restorable snapshot.
struct Paused {
  int64_t step = 0;              // optimizer updates done when saved (or when it stopped)
  std::string snapshot_id = {};  // the committed snapshot a resume starts from; "" with a reason
  std::string reason = {};       // why the job paused without being asked; "" when asked
  bool planned = false;          // it paused at the plan's pauseAtStep
};

// "warning": the job trains, but not as the plan asked (e.g. an RL plan with execution.gpus > 1
// trains on one device). trainerd keeps it in the run's `warnings` and its events.
struct Warning {
  std::string field = {};    // the plan field it is about, "execution.gpus"; "" when none
  std::string message = {};  // for a person
};

// "smoke": the verdict of the plan's smoke check (plan.smoke), run before the training; a failed
// one is followed by "failed" naming it. Checks, in order: load, train, loss, checkpoint (engine.h).
struct Smoke {
  bool passed = false;
  std::string check = {};          // the check that failed; "" when passed
  std::string reason = {};         // why it failed, for a person; "" when passed
  int64_t steps = 0;               // optimizer steps it trained, the restored one not counted
  int64_t rows = 0;                // rows it trained on
  std::optional<double> loss = {};           // the last step's loss (null when not finite)
  std::optional<double> restored_loss = {};  // the same step's loss trained from the restored checkpoint
  double seconds = 0;              // the whole check
};

// "heartbeat": the job is alive (TRAINER_HEARTBEAT_SECONDS apart, from a thread of its own, so it
// comes between steps too); a job silent past trainerd's limits.jobSilenceSeconds is stopped as
// hung. Not kept in the run's events.
struct Heartbeat {
  std::optional<int64_t> step = {};  // the last optimizer step it reported, if any
  double uptime_seconds = 0;         // since the job started
};

// "evaluation_progress": an evaluation job's rows answered and graded so far (after each batch).
struct EvaluationProgress {
  int64_t done = 0;   // rows graded
  int64_t total = 0;  // rows of the dataset
};

// "evaluation_report": an evaluation job's report (docs/evaluations.md: rows, meanScore,
// exactMatchRate, ...), written after OUTPUT/rows.jsonl and OUTPUT/report.json; the last event of
// an evaluation that completed.
struct EvaluationReport {
  nlohmann::json report = nlohmann::json::object();
};

using Event = std::variant<Hello, Phase, Preparing, DataFit, DataSplit, Devices, Resolved, Step, Validation,
                           Checkpoint, Completed, Failed, Cancelled, Paused, Warning, EvaluationProgress,
                           EvaluationReport, Heartbeat, Smoke, EngineConfig, EngineRuntime>;

// The event's "type" value, e.g. "step".
std::string_view event_type(const Event& event);
// Completed, Failed, Cancelled or Paused: the attempt's last event.
bool ends_attempt(const Event& event);

// Encoding. The free to_json overloads also let nlohmann convert (`nlohmann::json j = step;`).
void to_json(nlohmann::json& out, const Hello& e);
void to_json(nlohmann::json& out, const Phase& e);
void to_json(nlohmann::json& out, const Preparing& e);
void to_json(nlohmann::json& out, const DataFit& e);
void to_json(nlohmann::json& out, const DataSplit& e);
void to_json(nlohmann::json& out, const Devices& e);
void to_json(nlohmann::json& out, const Resolved& e);
void to_json(nlohmann::json& out, const Step& e);
void to_json(nlohmann::json& out, const Validation& e);
void to_json(nlohmann::json& out, const Checkpoint& e);
void to_json(nlohmann::json& out, const Completed& e);
void to_json(nlohmann::json& out, const Failed& e);
void to_json(nlohmann::json& out, const Cancelled& e);
void to_json(nlohmann::json& out, const Paused& e);
void to_json(nlohmann::json& out, const Warning& e);
void to_json(nlohmann::json& out, const EvaluationProgress& e);
void to_json(nlohmann::json& out, const EvaluationReport& e);
void to_json(nlohmann::json& out, const Heartbeat& e);
void to_json(nlohmann::json& out, const Smoke& e);
void to_json(nlohmann::json& out, const EngineConfig& e);
void to_json(nlohmann::json& out, const EngineRuntime& e);
void to_json(nlohmann::json& out, const StepMemory& e);
nlohmann::json to_json(const Event& event);  // with "type"
std::string to_line(const Event& event);     // compact JSON, no trailing newline

// Decoding one event object of the given type (the "type" key is not read). A missing required
// field or a field of the wrong JSON type is an InvalidArgument naming the field.
Status from_json(const nlohmann::json& in, Hello* e);
Status from_json(const nlohmann::json& in, Phase* e);
Status from_json(const nlohmann::json& in, Preparing* e);
Status from_json(const nlohmann::json& in, DataFit* e);
Status from_json(const nlohmann::json& in, DataSplit* e);
Status from_json(const nlohmann::json& in, Devices* e);
Status from_json(const nlohmann::json& in, Resolved* e);
Status from_json(const nlohmann::json& in, Step* e);
Status from_json(const nlohmann::json& in, Validation* e);
Status from_json(const nlohmann::json& in, Checkpoint* e);
Status from_json(const nlohmann::json& in, Completed* e);
Status from_json(const nlohmann::json& in, Failed* e);
Status from_json(const nlohmann::json& in, Cancelled* e);
Status from_json(const nlohmann::json& in, Paused* e);
Status from_json(const nlohmann::json& in, Warning* e);
Status from_json(const nlohmann::json& in, EvaluationProgress* e);
Status from_json(const nlohmann::json& in, EvaluationReport* e);
Status from_json(const nlohmann::json& in, Heartbeat* e);
Status from_json(const nlohmann::json& in, Smoke* e);
Status from_json(const nlohmann::json& in, EngineConfig* e);
Status from_json(const nlohmann::json& in, EngineRuntime* e);
Status from_json(const nlohmann::json& in, StepMemory* e);

// A whole event object: nullopt for an unknown "type" (skip it); an error for an object
// without a string "type" or with a bad field of a known type.
Result<std::optional<Event>> event_from_json(const nlohmann::json& in);

// One line of an events stream (without its newline): the event; nullopt for an unknown type;
// an error (naming the field where there is one) for a line that is not a JSON object, is
// longer than kMaxEventLineBytes or nested deeper than kMaxEventDepth, or has a bad field.
Result<std::optional<Event>> decode_event(std::string_view line);

// The reader's usual call: the event, or nullopt for any line to skip (unknown or malformed).
std::optional<Event> parse_event(std::string_view line);

// Whether a reader of this header understands a stream whose hello says `version`.
inline bool supported_protocol_version(int version) { return version >= 1 && version <= kProtocolVersion; }

}  // namespace trainer::protocol

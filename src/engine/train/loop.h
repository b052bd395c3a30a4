// The training loop every method shares (SFT in engine/sft, GRPO/GSPO in engine/rl): preparing
// the device, model and tokenizer; the trainable adapter with its optimizer and schedule; the
// step loop with stop requests, metrics (step events, memory, MFU), validation cadence,
// intermediate checkpoints and the final adapter. A method supplies only what one optimizer step
// and one validation pass are. Internal to the engine (includes torch).
//
// Events are the job protocol's (protocol/job_protocol.h), in the order engine.h documents.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device/gpu_info.h"
#include "engine/dist/group.h"
#include "engine/dist/world.h"
#include "engine/engine.h"
#include "engine/memory.h"
#include "engine/model/model.h"
#include "engine/optim/adamw.h"
#include "engine/text/tokenizer.h"
#include "plan/plan.h"

namespace trainer::engine::train {

using SteadyClock = std::chrono::steady_clock;
double seconds_since(SteadyClock::time_point t);
// Waits for the device's queued work (CUDA), so that timings cover it.
void synchronize(const at::Device& device);
// Hex SHA-256 of a file's bytes.
std::string file_sha256(const std::string& path);

// What every method starts from.
struct Setup {
  SteadyClock::time_point start;
  at::Device device{at::kCPU};
  std::optional<device::GpuInfo> gpu;
  std::unique_ptr<model::CausalLM> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
  dist::World world;                    // this process's rank; a world of one trains alone
  std::unique_ptr<dist::Group> group;   // the ranks' collectives; null in a world of one
  bool writes() const { return world.rank == 0; }  // rank 0 alone validates and writes files
};

// Checks baseModel, seeds torch with training.seed, emits phase PREPARING and devices, and
// loads the model (in config.precision, on the plan's device) and its tokenizer. In a world of
// several ranks, joins them first (rank 0 with the rendezvous it hosts); rank r trains on CUDA
// device r, or on the CPU with its share of the intra-op threads.
Setup prepare(const plan::Plan& plan, const EventSink& emit, const dist::World& world = {},
              std::shared_ptr<dist::Rendezvous> rendezvous = nullptr);

// The trainable LoRA parameters (attached by the constructor), AdamW and the learning-rate
// schedule over `total_steps` optimizer steps.
class Updater {
 public:
  Updater(model::CausalLM& model, const plan::LoraSettings& lora, const plan::OptimizerSettings& optimizer,
          uint64_t seed, int64_t total_steps);
  const std::vector<at::Tensor>& params() const { return params_; }
  optim::AdamW& optimizer() { return optimizer_; }
  const plan::OptimizerSettings& settings() const { return settings_; }
  int64_t total_steps() const { return total_; }
  int64_t warmup_steps() const { return warmup_; }  // warmupRatio resolved against total_steps

  // Data parallelism: clip() first sums the gradients over the ranks of `group` (not owned; null
  // = one rank). A method scales its losses by the whole update's token count, so the sum is
  // the gradient of the single-device run.
  void set_group(dist::Group* group) { group_ = group; }
  // Clips the accumulated gradients (optimizer.maxGradNorm); returns the norm before clipping.
  // Records the bytes the gradients held for the step's memory report.
  double clip();
  // The scheduled rate of optimizer step `step` (0-based).
  double learning_rate(int64_t step) const;
  // One optimizer step at learning_rate(step), then the gradients are dropped; returns the rate.
  double apply(int64_t step);
  int64_t gradient_bytes() const { return gradient_bytes_; }

 private:
  std::vector<at::Tensor> params_;
  plan::OptimizerSettings settings_;
  optim::AdamW optimizer_;
  int64_t total_ = 0, warmup_ = 0;
  int64_t gradient_bytes_ = 0;
  dist::Group* group_ = nullptr;
};

// A training method: what one optimizer step and one validation pass are.
class Method {
 public:
  virtual ~Method() = default;
  // Optimizer step `step` (0-based): its forward and backward passes (all micro-batches of the
  // gradient accumulation), then updater.clip() and updater.apply(step). Returns the step event
  // with its useful_flops (train/useful_flops.h, the whole update's over the ranks); the loop
  // fills step, total_steps, memory and (with a known device peak) mfu and useful_mfu.
  virtual protocol::Step step(int64_t step, Updater& updater) = 0;
  // One pass over the held-out data after optimizer step `step`; nullopt when there is none.
  virtual std::optional<protocol::Validation> validate(int64_t /*step*/) { return std::nullopt; }
  // Training FLOPs per token of the step's batch_tokens (for MFU); 0 = not reported.
  virtual double flops_per_token() const { return 0; }
  // The span MFU is measured over: the whole step (SFT), or the policy update alone, the step
  // less generation and scoring (RL), as the specification defines sft.mfu and rl.mfu.
  virtual double mfu_seconds(const protocol::Step& ev) const { return ev.step_seconds; }
  // The data order and position after the last step taken (saved in the training state), and
  // its restoration before the first step of a resumed run.
  virtual nlohmann::json data_state() const { return nlohmann::json::object(); }
  virtual void restore_data_state(const nlohmann::json& /*state*/) {}
};

struct LoopOptions {
  std::string output_dir;                       // adapter in output_dir/adapter, checkpoints beside
  const std::atomic<bool>* stop = nullptr;      // checked at every step boundary
  int64_t validation_every = 0;                 // steps between validations; 0 = only at the end
  int64_t save_every = 0;                       // steps between checkpoints; 0 = none
  int64_t pause_at_step = 0;                    // the plan's pauseAtStep: pause there as if asked; 0 = never
  // The plan's resumable cadence (execution.resumableSaveEvery / Minutes); when set, a
  // checkpoint holds the training state only when one of them is due, else the weights alone.
  bool resumable_cadence = false;
  int64_t resumable_save_every = 0;             // steps between training-state saves; 0 = none
  double resumable_save_seconds = 0;            // seconds between them; 0 = none
  int keep_checkpoints = 1;                     // newest checkpoints kept
  plan::LoraSettings lora;                      // written into every adapter folder
  std::string base_model;                       // base_model_name_or_path of the adapters
  // Checked at every step boundary before `stop`: save a full checkpoint, then return paused.
  const std::atomic<bool>* pause = nullptr;
  std::string resume_weights_dir;  // continue from this adapter folder ...
  std::string resume_state_dir;    // ... and this training state (train/state.h); "" = fresh
  bool branch = false;             // a child run: count steps from zero (TrainRequest::branch)
  // The run's plan (not owned; outlives the loop): the loop writes the engine's reports from it
  // (engine_config, engine_runtime; engine/engine_reports.h). Null: none written.
  const plan::Plan* plan = nullptr;
};

// The options every method shares, from the request: output folder, stop and pause flags, the
// state to resume from, checkpoint cadence and count, and the adapter's LoRA settings and base
// model. A method adds its own (validation_every).
LoopOptions loop_options(const TrainRequest& request);

// Every checkpoint holds the adapter (checkpoint_dir/adapter) and the training state
// (checkpoint_dir/training_state); the final adapter gets its training state beside it
// (output_dir/training_state). Called after an intermediate checkpoint's adapter is written into `checkpoint_dir`/adapter
// (checkpoint_dir = output_dir/checkpoints/step-NNNNNNNN), before older checkpoints are pruned:
// where a method or the job adds training state (optimizer moments, data position, RNG).
using CheckpointHook = std::function<void(int64_t step, const std::string& checkpoint_dir)>;

// The memory `model`'s process holds on `device` now (memory::held_now, the CPU's mapped
// weights counted): a moment of the engine_runtime report.
nlohmann::json memory_moment(const at::Device& device, const model::CausalLM& model);

// Emits phase TRAINING, runs `updater.total_steps()` steps of `method` with the memory meter,
// validation and checkpoints, then the final validation, phase EXPORTING, the final adapter and
// completed. Returns early with cancelled = true when `stop` is set. With several ranks, stop and
// pause take effect when any rank's flag is set, on every rank at the same step; only rank 0
// validates and writes checkpoints and the adapter.
TrainResult run(Method& method, Setup& setup, Updater& updater, const LoopOptions& options, const EventSink& emit,
                const CheckpointHook& on_checkpoint = nullptr);

}  // namespace trainer::engine::train

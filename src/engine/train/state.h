// A checkpoint's training state (issue 11): what resuming needs besides the adapter weights, so
// that k steps + resume + N-k steps compute exactly what N steps straight do. Saved as a folder
// beside the adapter of a checkpoint:
//   state.json              {format, engineStep, optimizerSteps, accumulation, data, params}
//   tensors.safetensors     adam.exp_avg.I, adam.exp_avg_sq.I (fp32, in the adapter's parameter
//                           order), rng.cpu (the default CPU generator), rng.cuda.D (CUDA devices)
// engineStep is the schedule position (optimizer updates done); accumulation the micro-batches
// into the next update (0: states are saved at optimizer boundaries); data the method's data
// order and position (SFT: epoch and the cursor into that epoch's seeded order).
// Internal to the engine (includes torch).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/train/loop.h"

namespace trainer::engine::train {

inline constexpr const char* kTrainingStateDir = "training_state";

// Writes the state of `updater` after `engine_step` updates into `dir` (created; each file atomic).
void save_training_state(const std::string& dir, Updater& updater, int64_t engine_step, const nlohmann::json& data,
                         const at::Device& device);

struct LoadedState {
  int64_t engine_step = 0;
  nlohmann::json data;
};

// Restores moments, optimizer step count and RNG states into `updater` from `dir`. Throws
// EngineError (kInvalidArgument) naming the file and field of a state that does not fit: another
// parameter count or shape, an unknown format.
LoadedState load_training_state(const std::string& dir, Updater& updater, const at::Device& device);

// Loads the adapter folder's weights into the trainable parameters (copied in place, so the
// optimizer keeps them). Throws EngineError naming a missing or mis-shaped tensor.
void load_adapter_weights(const std::string& adapter_dir, model::CausalLM& model);

}  // namespace trainer::engine::train

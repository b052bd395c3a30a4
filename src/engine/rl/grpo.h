// GRPO and GSPO as methods of the shared training loop (engine/train/loop.h): each generation
// batch samples rlHyperparams.groupSize completions for rlHyperparams.promptsPerStep prompts with
// the current adapter, scores them with the reward terms, normalises the rewards per group into
// advantages, and takes rlHyperparams.iterationsPerBatch optimizer steps on it with the clipped
// policy loss (rl/loss.h) and, with klBeta, the KL to the base model (the adapter disabled).
// engine::train_rl in engine.h runs it. Internal to the engine.
#pragma once

#include <memory>
#include <string>

#include "engine/train/loop.h"

namespace trainer::engine::rl {

// Reads the RL rows (emitting preparing, data_fit, data_split and resolved) and plans the steps;
// `total_steps` receives the number of optimizer steps. Each generation batch's rollouts are
// appended to output_dir/rollouts.jsonl (none when output_dir is empty).
std::unique_ptr<train::Method> make_method(const plan::Plan& plan, train::Setup& setup, const EventSink& emit,
                                           const std::string& output_dir, int64_t* total_steps);

}  // namespace trainer::engine::rl

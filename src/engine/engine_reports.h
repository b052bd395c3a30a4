// What the native engine reports of itself (job protocol engine_config and engine_runtime):
// its resolved configuration under the names engine configurations use, what generates an RL
// run's rollouts, and what setup changed from the request. Torch-free: the facts setup decided
// (device, ranks, steps) come in as plain values; memory and parameter counts are measured by
// the training loop (train/loop.cpp).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/plan.h"

namespace trainer::engine {

// What setup decided that the plan alone does not say.
struct SetupFacts {
  std::string device;         // the device it trains on: "cpu", "cuda:0"
  bool cuda = false;          // the device is a CUDA device
  int ranks = 1;              // data-parallel ranks
  int64_t total_steps = 0;    // optimizer steps of the run
  int64_t warmup_steps = 0;   // warmup in optimizer steps, warmupRatio resolved
};

// Every knob the native engine trains `plan` with: {"adam_beta1": 0.9, "lr_scheduler_type":
// "linear", "per_device_train_batch_size": 4, "lora_r": 8, ...}; RL runs add their generation
// and loss knobs (num_generations, epsilon, loss_type, beta, ...).
nlohmann::json native_engine_config(const plan::Plan& plan, const SetupFacts& facts);

// What generates an RL run's rollouts ({kind: "native", device, replicas, sampling, batch}); null
// for SFT.
nlohmann::json native_rollout_engine(const plan::Plan& plan, const SetupFacts& facts);

// What setup changed from the request, each {field, from, to, why}; an empty list when nothing.
nlohmann::json native_setup_changes(const plan::Plan& plan, const SetupFacts& facts);

}  // namespace trainer::engine

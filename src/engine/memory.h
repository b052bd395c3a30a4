// Memory accounting of a training step: what held the device's memory at the step's peak
// (job protocol StepMemory; telemetry memory.usage and sft.memory.*.peak).
//
// CUDA: the caching allocator's statistics (allocated and reserved, current and peak) and the
// driver's free/total. CPU: a counting CPU allocator, installed once per process by
// install_cpu_meter(), counts the bytes of live CPU tensors; tensors not allocated through it
// (base weights used in place from the safetensors mapping) are added from the engine's own
// accounting. See docs/telemetry-usage.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include <nlohmann/json.hpp>

#include "protocol/job_protocol.h"

namespace trainer::engine::memory {

// Installs the counting CPU allocator (idempotent). Tensors allocated before it are not counted.
void install_cpu_meter();
// Whether `tensor`'s storage was allocated by the counting CPU allocator.
bool counted_by_cpu_meter(const at::Tensor& tensor);
// Bytes of live CPU tensors allocated through the meter, and the most since the last reset.
int64_t cpu_current_bytes();
int64_t cpu_peak_bytes();
void reset_cpu_peak();

// The memory held right now (engine_runtime's moments: afterLoad, afterFirstRollout,
// afterFirstStep), as {allocatedBytes, and on CUDA reservedBytes, deviceFreeBytes,
// deviceTotalBytes}. `uncounted`: CPU tensor bytes the meter does not see (mapped weights).
// Leaves the peaks StepMeter reads alone.
nlohmann::json held_now(at::Device device, int64_t uncounted);

// What the engine knows from its own tensors, fixed for the run once training starts.
struct StaticParts {
  int64_t weights = 0;          // frozen base weights and buffers
  int64_t adapter = 0;          // trainable LoRA weights
  int64_t optimizer_state = 0;  // AdamW's moments
  int64_t uncounted = 0;        // CPU: tensor bytes the meter does not see (mapped weights)
};

// Measures each step: call begin_step() before its first forward pass and end_step() after
// the optimizer step. Not thread-safe: the training thread's.
class StepMeter {
 public:
  StepMeter(at::Device device, StaticParts parts);
  void begin_step();
  // `gradient_bytes`: bytes of the trainable weights' gradients the step held.
  protocol::StepMemory end_step(int64_t gradient_bytes);

 private:
  int64_t allocated_now() const;

  const at::Device device_;
  const StaticParts parts_;
  int64_t start_ = 0;                // allocated when the step began
  int64_t process_allocated_peak_ = 0;
  int64_t process_reserved_peak_ = 0;
};

}  // namespace trainer::engine::memory

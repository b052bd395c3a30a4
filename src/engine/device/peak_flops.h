// Peak FLOP/s of accelerators by exact product name, for model FLOPs utilization (MFU).
//
// The table holds the vendor's dense (no structured sparsity) peaks. A name is matched whole,
// after normalise_device_name(), never by substring: an "NVIDIA H20" is not an H100. A device
// missing from the table has no peak, and the job then reports no MFU rather than a wrong one.
// docs/telemetry-usage.md states the FLOPs formula MFU divides by these.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainer::engine::device {

struct PeakFlops {
  double bf16 = 0;  // dense bf16 tensor-core FLOP/s
  double fp32 = 0;  // dense fp32 FLOP/s without TF32 (PyTorch's default for matmuls)
};

// Lower case; a leading "nvidia" dropped; '-' and '_' as spaces; runs of spaces collapsed;
// trimmed. "NVIDIA A100-SXM4-80GB" -> "a100 sxm4 80gb".
std::string normalise_device_name(std::string_view name);

// The peaks of the device named `name` (as NVML or the driver reports it), or nullopt.
std::optional<PeakFlops> peak_flops(std::string_view name);

struct PeakFlopsEntry {
  const char* name;  // normalised
  PeakFlops peak;
};
// Every entry of the table (for the docs and tests).
const std::vector<PeakFlopsEntry>& peak_flops_table();

// Training FLOPs of one token, the convention of the specification's sft.mfu (and TRL's):
// 6 x the parameters of the language model's linear layers and output head (forward 2,
// backward 4, as if every weight took a gradient; a LoRA update takes none for the frozen
// weights and does nearer 4). Attention over the sequence is not counted. The work a LoRA update
// really does is train/useful_flops.h's.
double training_flops_per_token(double linear_parameters);

}  // namespace trainer::engine::device

// Names and UUIDs of the job's GPUs from NVML (loaded at run time; absent on a machine without
// the NVIDIA driver), for MFU's peak table and the job's worker series.
#pragma once

#include <optional>
#include <string>

namespace trainer::engine::device {

struct GpuInfo {
  std::string name;  // product name as NVML reports it, e.g. "NVIDIA H100 80GB HBM3"
  std::string uuid;  // "GPU-..."
};

// The GPU that CUDA numbers `cuda_index` in this process: the `cuda_index`th entry of
// CUDA_VISIBLE_DEVICES (an index or a UUID) when set, else NVML's device `cuda_index`
// (NVML numbers by PCI bus; CUDA does too when CUDA_DEVICE_ORDER=PCI_BUS_ID, and on a node of
// identical GPUs either order names the same product). nullopt without NVML.
std::optional<GpuInfo> gpu_info(int cuda_index);

}  // namespace trainer::engine::device

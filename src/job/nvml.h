// NVML, NVIDIA's management library, loaded at run time (dlopen "libnvidia-ml.so.1"): no build
// dependency, and absent on a machine without the NVIDIA driver. Only the readings the device
// watch records (job/device_watch.h); a reading a GPU does not support is left empty.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainer::job {

inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

// NVML's clock event ("throttle") reason bits, as nvml.h numbers them.
inline constexpr uint64_t kClockEventGpuIdle = 0x1;
inline constexpr uint64_t kClockEventApplicationsClocks = 0x2;
inline constexpr uint64_t kClockEventSwPowerCap = 0x4;
inline constexpr uint64_t kClockEventHwSlowdown = 0x8;
inline constexpr uint64_t kClockEventSyncBoost = 0x10;
inline constexpr uint64_t kClockEventSwThermal = 0x20;
inline constexpr uint64_t kClockEventHwThermal = 0x40;
inline constexpr uint64_t kClockEventHwPowerBrake = 0x80;
inline constexpr uint64_t kClockEventDisplayClocks = 0x100;

// The names of the reasons set in `mask`, comma-separated ("idle,sw_power_cap"); "none" for 0;
// unknown bits as hex ("0x400").
std::string clock_event_reason_names(uint64_t mask);

// One reading of a GPU; empty where the GPU or driver does not report it.
struct GpuReading {
  std::optional<double> sm_clock_hz;
  std::optional<double> memory_clock_hz;
  std::optional<uint64_t> clock_event_reasons;   // NVML's bit mask
  std::optional<double> memory_utilization;      // fraction of time memory was read or written
  std::optional<int64_t> retired_pages_corrected;     // single-bit ECC (before Ampere)
  std::optional<int64_t> retired_pages_uncorrected;   // double-bit ECC
  std::optional<int64_t> remapped_rows_corrected;     // Ampere and later
  std::optional<int64_t> remapped_rows_uncorrected;
  std::optional<bool> repair_pending;            // a retirement or remapping awaits a GPU reset
};

class Nvml {
 public:
  // A GPU as NVML names it. `handle` is NVML's, valid while the Nvml lives.
  struct Gpu {
    void* handle = nullptr;
    std::string uuid;  // "GPU-..."
    std::string name;  // product name
  };
  struct Xid {
    std::string uuid;  // the GPU it was reported for
    int64_t code = 0;
  };

  // Loads `library` and initialises NVML. Unavailable says why, beginning "NVML not available".
  static Result<std::unique_ptr<Nvml>> load(const std::string& library = kNvmlLibrary);
  ~Nvml();  // nvmlShutdown, dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The GPU with this UUID, or NVML's index (a CUDA_VISIBLE_DEVICES entry is either).
  Result<Gpu> gpu(const std::string& uuid_or_index);
  GpuReading read(const Gpu& gpu);

  // Asks for the XIDs of `gpus`; false when NVML does not deliver their events.
  bool watch_xids(const std::vector<Gpu>& gpus);
  // XIDs reported within `timeout` (waits at most that long). Called from one thread.
  std::vector<Xid> wait_xids(std::chrono::milliseconds timeout);

 private:
  struct Api;
  Nvml(void* library, std::unique_ptr<Api> api);
  void* library_;
  std::unique_ptr<Api> api_;
  void* event_set_ = nullptr;
  std::vector<Gpu> xid_gpus_;
};

}  // namespace trainer::job

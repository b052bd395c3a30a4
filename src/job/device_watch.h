// Device health: the job's GPUs sampled through NVML (job/nvml.h) on a thread of its own, into
// the specification's gpu.* metrics (telemetry/registry.yaml, "Training devices"): SM and memory
// clocks and memory utilisation averaged over a window, the clock event reasons OR-ed over it,
// retired pages and remapped rows by error type, a pending repair, and XIDs. docs/data-parallel.md
// ("Device health").
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "job/nvml.h"
#include "telemetry/instruments.h"

namespace trainer::job {

// The readings of one GPU since the window began: what the gauges publish.
class GpuWindow {
 public:
  void add(const GpuReading& reading);
  // Means of the clocks and memory utilisation over the window's readings, the OR of their clock
  // event reasons, and the latest lifetime counts; empty where no reading had the figure.
  GpuReading summary() const;
  // Starts a new window (the counts are lifetime figures and stay).
  void restart();

 private:
  struct Mean {
    double sum = 0;
    int64_t n = 0;
    void add(const std::optional<double>& v) {
      if (!v) return;
      sum += *v;
      ++n;
    }
    std::optional<double> value() const {
      return n > 0 ? std::optional<double>(sum / static_cast<double>(n)) : std::nullopt;
    }
  };
  Mean sm_, memory_clock_, memory_utilization_;
  std::optional<uint64_t> reasons_;
  GpuReading latest_;
};

struct DeviceWatchOptions {
  std::chrono::milliseconds interval{std::chrono::seconds(1)};  // between readings
  std::chrono::milliseconds window{std::chrono::seconds(5)};    // averaging window (the export interval)
};

class DeviceWatch {
 public:
  // Watches `gpus` (each a UUID or an NVML index) until destroyed. NotFound names a GPU NVML
  // does not know.
  static Result<std::unique_ptr<DeviceWatch>> start(std::unique_ptr<Nvml> nvml, const std::vector<std::string>& gpus,
                                                    telemetry::JobMetrics& metrics, DeviceWatchOptions options);
  ~DeviceWatch();  // stops the thread
  DeviceWatch(const DeviceWatch&) = delete;
  DeviceWatch& operator=(const DeviceWatch&) = delete;

 private:
  DeviceWatch(std::unique_ptr<Nvml> nvml, std::vector<Nvml::Gpu> gpus, telemetry::JobMetrics& metrics,
              DeviceWatchOptions options);
  void run();
  void publish(const Nvml::Gpu& gpu, const GpuReading& r);

  // Constant after construction; used by the watching thread only.
  std::unique_ptr<Nvml> nvml_;
  std::vector<Nvml::Gpu> gpus_;
  telemetry::JobMetrics& metrics_;  // thread-safe
  DeviceWatchOptions options_;
  std::vector<GpuWindow> windows_;
  bool xids_ = false;  // NVML delivers the GPUs' XIDs

  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace trainer::job

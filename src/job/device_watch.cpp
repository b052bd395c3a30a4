#include "job/device_watch.h"

namespace trainer::job {
namespace tel = trainer::telemetry;

void GpuWindow::add(const GpuReading& r) {
  sm_.add(r.sm_clock_hz);
  memory_clock_.add(r.memory_clock_hz);
  memory_utilization_.add(r.memory_utilization);
  if (r.clock_event_reasons) reasons_ = reasons_.value_or(0) | *r.clock_event_reasons;
  latest_ = r;
}

GpuReading GpuWindow::summary() const {
  GpuReading s = latest_;
  s.sm_clock_hz = sm_.value();
  s.memory_clock_hz = memory_clock_.value();
  s.memory_utilization = memory_utilization_.value();
  s.clock_event_reasons = reasons_;
  return s;
}

void GpuWindow::restart() {
  sm_ = {};
  memory_clock_ = {};
  memory_utilization_ = {};
  reasons_.reset();
}

Result<std::unique_ptr<DeviceWatch>> DeviceWatch::start(std::unique_ptr<Nvml> nvml, const std::vector<std::string>& gpus,
                                                        tel::JobMetrics& metrics, DeviceWatchOptions options) {
  std::vector<Nvml::Gpu> found;
  for (const auto& id : gpus) {
    TRAINER_ASSIGN_OR_RETURN(Nvml::Gpu g, nvml->gpu(id));
    found.push_back(std::move(g));
  }
  return std::unique_ptr<DeviceWatch>(new DeviceWatch(std::move(nvml), std::move(found), metrics, options));
}

DeviceWatch::DeviceWatch(std::unique_ptr<Nvml> nvml, std::vector<Nvml::Gpu> gpus, tel::JobMetrics& metrics,
                         DeviceWatchOptions options)
    : nvml_(std::move(nvml)), gpus_(std::move(gpus)), metrics_(metrics), options_(options), windows_(gpus_.size()) {
  xids_ = nvml_->watch_xids(gpus_);
  if (xids_) {
    for (const auto& g : gpus_) metrics_.gpu_xid_count.add(0, {.hw_id = g.uuid, .hw_name = g.name});  // from zero
  }
  thread_ = std::thread([this] { run(); });
}

DeviceWatch::~DeviceWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void DeviceWatch::publish(const Nvml::Gpu& g, const GpuReading& r) {
  tel::JobMetrics& m = metrics_;
  const std::string_view id = g.uuid, name = g.name;
  if (r.sm_clock_hz) {
    m.gpu_clock_frequency.set(*r.sm_clock_hz,
                              {.hw_id = id, .hw_name = name, .gpu_clock_domain = tel::GpuClockDomain::kSm});
  }
  if (r.memory_clock_hz) {
    m.gpu_clock_frequency.set(*r.memory_clock_hz,
                              {.hw_id = id, .hw_name = name, .gpu_clock_domain = tel::GpuClockDomain::kMemory});
  }
  if (r.clock_event_reasons) {
    m.gpu_clock_event_reasons.set(static_cast<int64_t>(*r.clock_event_reasons), {.hw_id = id, .hw_name = name});
  }
  if (r.memory_utilization) m.gpu_memory_utilization.set(*r.memory_utilization, {.hw_id = id, .hw_name = name});
  auto by_type = [&](auto& gauge, const std::optional<int64_t>& corrected, const std::optional<int64_t>& uncorrected) {
    if (corrected) gauge.set(*corrected, {.hw_id = id, .hw_name = name, .error_type = tel::ErrorType::kCorrected});
    if (uncorrected) gauge.set(*uncorrected, {.hw_id = id, .hw_name = name, .error_type = tel::ErrorType::kUncorrected});
  };
  by_type(m.gpu_memory_retired_pages, r.retired_pages_corrected, r.retired_pages_uncorrected);
  by_type(m.gpu_memory_remapped_rows, r.remapped_rows_corrected, r.remapped_rows_uncorrected);
  if (r.repair_pending) m.gpu_memory_repair_pending.set(*r.repair_pending ? 1 : 0, {.hw_id = id, .hw_name = name});
}

void DeviceWatch::run() {
  auto window_start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    if (std::chrono::steady_clock::now() - window_start >= options_.window) {
      for (auto& w : windows_) w.restart();
      window_start = std::chrono::steady_clock::now();
    }
    for (size_t i = 0; i < gpus_.size(); ++i) {
      windows_[i].add(nvml_->read(gpus_[i]));
      publish(gpus_[i], windows_[i].summary());
    }
    if (xids_) {
      for (const auto& x : nvml_->wait_xids(std::chrono::milliseconds(0))) {
        for (const auto& g : gpus_) {
          if (g.uuid != x.uuid) continue;
          metrics_.gpu_xid_count.add(1, {.hw_id = g.uuid, .hw_name = g.name});
          metrics_.gpu_xid_last.set(x.code, {.hw_id = g.uuid, .hw_name = g.name});
        }
      }
    }
    lock.lock();
    wake_.wait_for(lock, options_.interval, [&] { return stopping_; });
  }
}

}  // namespace trainer::job

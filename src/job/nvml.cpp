#include "job/nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace trainer::job {
namespace {

// nvml.h's types and constants, restated: the header is not a build dependency.
using NvmlDevice = void*;
using NvmlEventSet = void*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlEventData {
  NvmlDevice device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr int kSuccess = 0;
constexpr int kInsufficientSize = 7;
constexpr int kClockSm = 1;
constexpr int kClockMem = 2;
constexpr int kRetiredSingleBit = 0;  // NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
constexpr int kRetiredDoubleBit = 1;  // NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
constexpr unsigned long long kEventXidCriticalError = 0x8;
constexpr unsigned kStringBytes = 96;
constexpr double kHzPerMHz = 1e6;
constexpr double kPercent = 100.0;

}  // namespace

struct Nvml::Api {
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_index)(unsigned, NvmlDevice*) = nullptr;
  int (*by_uuid)(const char*, NvmlDevice*) = nullptr;
  int (*name)(NvmlDevice, char*, unsigned) = nullptr;
  int (*uuid)(NvmlDevice, char*, unsigned) = nullptr;
  int (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  int (*event_reasons)(NvmlDevice, unsigned long long*) = nullptr;
  int (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  int (*retired_pages)(NvmlDevice, int, unsigned*, unsigned long long*) = nullptr;
  int (*retired_pending)(NvmlDevice, int*) = nullptr;
  int (*remapped_rows)(NvmlDevice, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
  int (*event_set_create)(NvmlEventSet*) = nullptr;
  int (*event_set_free)(NvmlEventSet) = nullptr;
  int (*register_events)(NvmlDevice, unsigned long long, NvmlEventSet) = nullptr;
  int (*event_set_wait)(NvmlEventSet, NvmlEventData*, unsigned) = nullptr;
};

std::string clock_event_reason_names(uint64_t mask) {
  if (mask == 0) return "none";
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {kClockEventGpuIdle, "idle"},
      {kClockEventApplicationsClocks, "applications_clocks"},
      {kClockEventSwPowerCap, "sw_power_cap"},
      {kClockEventHwSlowdown, "hw_slowdown"},
      {kClockEventSyncBoost, "sync_boost"},
      {kClockEventSwThermal, "sw_thermal"},
      {kClockEventHwThermal, "hw_thermal"},
      {kClockEventHwPowerBrake, "hw_power_brake"},
      {kClockEventDisplayClocks, "display_clocks"},
  };
  std::string out;
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if ((mask & bit) != 0) out += (out.empty() ? "" : ",") + std::string(name);
  }
  if (const uint64_t rest = mask & ~known; rest != 0) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(rest));
    out += (out.empty() ? "" : ",") + std::string(hex);
  }
  return out;
}

Result<std::unique_ptr<Nvml>> Nvml::load(const std::string& library) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return Status(StatusCode::kUnavailable, "NVML not available: " + (why != nullptr ? std::string(why) : library));
  }
  auto api = std::make_unique<Api>();
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
  };
  sym(api->init, "nvmlInit_v2");
  sym(api->shutdown, "nvmlShutdown");
  sym(api->by_index, "nvmlDeviceGetHandleByIndex_v2");
  sym(api->by_uuid, "nvmlDeviceGetHandleByUUID");
  sym(api->name, "nvmlDeviceGetName");
  sym(api->uuid, "nvmlDeviceGetUUID");
  sym(api->clock, "nvmlDeviceGetClockInfo");
  sym(api->event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  if (api->event_reasons == nullptr) sym(api->event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  sym(api->utilization, "nvmlDeviceGetUtilizationRates");
  sym(api->retired_pages, "nvmlDeviceGetRetiredPages");
  sym(api->retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
  sym(api->remapped_rows, "nvmlDeviceGetRemappedRows");
  sym(api->event_set_create, "nvmlEventSetCreate");
  sym(api->event_set_free, "nvmlEventSetFree");
  sym(api->register_events, "nvmlDeviceRegisterEvents");
  sym(api->event_set_wait, "nvmlEventSetWait_v2");
  if (api->init == nullptr || api->shutdown == nullptr || api->by_index == nullptr || api->by_uuid == nullptr ||
      api->name == nullptr || api->uuid == nullptr) {
    dlclose(lib);
    return Status(StatusCode::kUnavailable, "NVML not available: " + library + " lacks nvmlInit_v2 or the device calls");
  }
  if (const int rc = api->init(); rc != kSuccess) {
    dlclose(lib);
    return Status(StatusCode::kUnavailable, "NVML not available: nvmlInit_v2 returned " + std::to_string(rc));
  }
  return std::unique_ptr<Nvml>(new Nvml(lib, std::move(api)));
}

Nvml::Nvml(void* library, std::unique_ptr<Api> api) : library_(library), api_(std::move(api)) {}

Nvml::~Nvml() {
  if (event_set_ != nullptr && api_->event_set_free != nullptr) api_->event_set_free(event_set_);
  api_->shutdown();
  dlclose(library_);
}

Result<Nvml::Gpu> Nvml::gpu(const std::string& uuid_or_index) {
  Gpu g;
  int rc = -1;
  if (uuid_or_index.rfind("GPU-", 0) == 0) {
    rc = api_->by_uuid(uuid_or_index.c_str(), &g.handle);
  } else {
    char* end = nullptr;
    const unsigned long index = std::strtoul(uuid_or_index.c_str(), &end, 10);
    if (uuid_or_index.empty() || *end != '\0') {
      return invalid_argument("'" + uuid_or_index + "' is neither a GPU UUID nor an index");
    }
    rc = api_->by_index(static_cast<unsigned>(index), &g.handle);
  }
  if (rc != kSuccess) {
    return Status(StatusCode::kNotFound, "NVML has no GPU " + uuid_or_index + " (" + std::to_string(rc) + ")");
  }
  char text[kStringBytes] = {};
  if (api_->uuid(g.handle, text, kStringBytes) == kSuccess) g.uuid = text;
  text[0] = '\0';
  if (api_->name(g.handle, text, kStringBytes) == kSuccess) g.name = text;
  return g;
}

GpuReading Nvml::read(const Gpu& gpu) {
  GpuReading r;
  const NvmlDevice d = gpu.handle;
  unsigned mhz = 0;
  if (api_->clock != nullptr && api_->clock(d, kClockSm, &mhz) == kSuccess) r.sm_clock_hz = mhz * kHzPerMHz;
  if (api_->clock != nullptr && api_->clock(d, kClockMem, &mhz) == kSuccess) r.memory_clock_hz = mhz * kHzPerMHz;
  unsigned long long reasons = 0;
  if (api_->event_reasons != nullptr && api_->event_reasons(d, &reasons) == kSuccess) r.clock_event_reasons = reasons;
  NvmlUtilization u{};
  if (api_->utilization != nullptr && api_->utilization(d, &u) == kSuccess) r.memory_utilization = u.memory / kPercent;
  auto retired = [&](int cause) -> std::optional<int64_t> {
    unsigned count = 0;
    if (api_->retired_pages == nullptr) return std::nullopt;
    const int rc = api_->retired_pages(d, cause, &count, nullptr);
    if (rc != kSuccess && rc != kInsufficientSize) return std::nullopt;
    return static_cast<int64_t>(count);
  };
  r.retired_pages_corrected = retired(kRetiredSingleBit);
  r.retired_pages_uncorrected = retired(kRetiredDoubleBit);
  int retire_pending = 0;
  const bool retire_known = api_->retired_pending != nullptr && api_->retired_pending(d, &retire_pending) == kSuccess;
  unsigned corrected = 0, uncorrected = 0, remap_pending = 0, failed = 0;
  const bool remap_known = api_->remapped_rows != nullptr &&
                           api_->remapped_rows(d, &corrected, &uncorrected, &remap_pending, &failed) == kSuccess;
  if (remap_known) {
    r.remapped_rows_corrected = corrected;
    r.remapped_rows_uncorrected = uncorrected;
  }
  if (retire_known || remap_known) {
    r.repair_pending = (retire_known && retire_pending != 0) || (remap_known && remap_pending != 0);
  }
  return r;
}

bool Nvml::watch_xids(const std::vector<Gpu>& gpus) {
  if (api_->event_set_create == nullptr || api_->register_events == nullptr || api_->event_set_wait == nullptr) {
    return false;
  }
  if (event_set_ == nullptr && api_->event_set_create(&event_set_) != kSuccess) return false;
  bool any = false;
  for (const auto& g : gpus) {
    if (api_->register_events(g.handle, kEventXidCriticalError, event_set_) == kSuccess) {
      xid_gpus_.push_back(g);
      any = true;
    }
  }
  return any;
}

std::vector<Nvml::Xid> Nvml::wait_xids(std::chrono::milliseconds timeout) {
  std::vector<Xid> out;
  if (event_set_ == nullptr || xid_gpus_.empty()) return out;
  NvmlEventData data{};
  auto wait_ms = static_cast<unsigned>(timeout.count());
  while (api_->event_set_wait(event_set_, &data, wait_ms) == kSuccess) {
    if ((data.event_type & kEventXidCriticalError) != 0) {
      for (const auto& g : xid_gpus_) {
        if (g.handle == data.device) out.push_back(Xid{g.uuid, static_cast<int64_t>(data.event_data)});
      }
    }
    wait_ms = 0;  // take what else is queued, without waiting again
  }
  return out;
}

}  // namespace trainer::job

#include "engine/device/gpu_info.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace trainer::engine::device {
namespace {

using NvmlDevice = void*;
using InitFn = int (*)();
using ShutdownFn = int (*)();
using ByIndexFn = int (*)(unsigned, NvmlDevice*);
using ByUuidFn = int (*)(const char*, NvmlDevice*);
using StringFn = int (*)(NvmlDevice, char*, unsigned);
constexpr int kNvmlSuccess = 0;
constexpr unsigned kNameBytes = 96;

std::vector<std::string> visible_devices() {
  std::vector<std::string> out;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) return out;
  std::string all = env, item;
  for (char c : all + ",") {
    if (c == ',') {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else if (c != ' ') {
      item += c;
    }
  }
  return out;
}

}  // namespace

std::optional<GpuInfo> gpu_info(int cuda_index) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<ShutdownFn>(dlsym(lib, "nvmlShutdown"));
  auto by_index = reinterpret_cast<ByIndexFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto by_uuid = reinterpret_cast<ByUuidFn>(dlsym(lib, "nvmlDeviceGetHandleByUUID"));
  auto get_name = reinterpret_cast<StringFn>(dlsym(lib, "nvmlDeviceGetName"));
  auto get_uuid = reinterpret_cast<StringFn>(dlsym(lib, "nvmlDeviceGetUUID"));
  std::optional<GpuInfo> out;
  if (init && shutdown && by_index && by_uuid && get_name && get_uuid && init() == kNvmlSuccess) {
    NvmlDevice handle = nullptr;
    int rc = -1;
    const auto visible = visible_devices();
    if (cuda_index >= 0 && static_cast<size_t>(cuda_index) < visible.size()) {
      const std::string& v = visible[static_cast<size_t>(cuda_index)];
      rc = v.rfind("GPU-", 0) == 0 ? by_uuid(v.c_str(), &handle)
                                   : by_index(static_cast<unsigned>(std::atoi(v.c_str())), &handle);
    } else if (visible.empty() && cuda_index >= 0) {
      rc = by_index(static_cast<unsigned>(cuda_index), &handle);
    }
    char name[kNameBytes] = {}, uuid[kNameBytes] = {};
    if (rc == kNvmlSuccess && get_name(handle, name, kNameBytes) == kNvmlSuccess) {
      (void)get_uuid(handle, uuid, kNameBytes);
      out = GpuInfo{name, uuid};
    }
    shutdown();
  }
  dlclose(lib);
  return out;
}

}  // namespace trainer::engine::device

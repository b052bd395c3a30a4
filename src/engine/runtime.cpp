#include <torch/torch.h>

#include "engine/engine.h"

namespace trainer::engine {

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.torch_version = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                       std::to_string(TORCH_VERSION_PATCH);
  info.cuda_available = torch::cuda::is_available();
  info.cuda_devices = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  info.cpu_threads = at::get_num_threads();
  return info;
}

}  // namespace trainer::engine

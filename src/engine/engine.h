// The native training engine, C++ on libtorch: the public face used by trainer-job.
//
// Only this library's translation units include torch headers; nothing outside src/engine
// does, so a change elsewhere never recompiles the engine.
#pragma once

#include <string>

namespace trainer::engine {

// What the linked libtorch offers on this host.
struct RuntimeInfo {
  std::string torch_version;  // libtorch's version, e.g. "2.11.0"
  bool cuda_available = false;  // a CUDA device is usable
  int cuda_devices = 0;        // number of visible CUDA devices
  int cpu_threads = 0;         // intra-op threads libtorch will use
};

RuntimeInfo runtime_info();

}  // namespace trainer::engine

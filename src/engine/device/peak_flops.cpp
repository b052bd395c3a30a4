#include "engine/device/peak_flops.h"

namespace trainer::engine::device {

std::string normalise_device_name(std::string_view name) {
  std::string out;
  for (char c : name) {
    char m = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    if (m == '-' || m == '_' || m == '\t') m = ' ';
    if (m == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += m;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  const std::string prefix = "nvidia ";
  if (out.rfind(prefix, 0) == 0) out.erase(0, prefix.size());
  return out;
}

const std::vector<PeakFlopsEntry>& peak_flops_table() {
  // Vendor datasheets, dense figures (the sparse ones are twice these).
  constexpr PeakFlops kA100{312e12, 19.5e12};
  constexpr PeakFlops kH100Sxm{989.4e12, 66.9e12};
  constexpr PeakFlops kH100Pcie{756.5e12, 51.2e12};
  constexpr PeakFlops kH100Nvl{835.5e12, 60e12};
  constexpr PeakFlops kH20{148e12, 44e12};
  constexpr PeakFlops kL40S{362.05e12, 91.6e12};
  constexpr PeakFlops kB200{2250e12, 75e12};
  static const std::vector<PeakFlopsEntry> kTable = {
      {"a100 sxm4 40gb", kA100},
      {"a100 sxm4 80gb", kA100},
      {"a100 pcie 40gb", kA100},
      {"a100 80gb pcie", kA100},
      {"a100 pcie 80gb", kA100},
      {"h100 80gb hbm3", kH100Sxm},  // H100 SXM5, as NVML names it
      {"h100 sxm5 80gb", kH100Sxm},
      {"h100 pcie", kH100Pcie},
      {"h100 nvl", kH100Nvl},
      {"h200", kH100Sxm},  // H200 SXM: the H100's compute with more memory
      {"h200 nvl", kH100Nvl},
      {"h20", kH20},
      {"l40s", kL40S},
      {"b200", kB200},
  };
  return kTable;
}

std::optional<PeakFlops> peak_flops(std::string_view name) {
  const std::string key = normalise_device_name(name);
  for (const auto& entry : peak_flops_table()) {
    if (key == entry.name) return entry.peak;
  }
  return std::nullopt;
}

double training_flops_per_token(double linear_parameters) { return 6.0 * linear_parameters; }

}  // namespace trainer::engine::device

// Telemetry: instruments generated from telemetry/registry.yaml, the metrics SDK and exporters.
#pragma once

#include <string>

namespace trainer::telemetry {

// Name of the instrumentation scope every instrument of this project records under.
inline constexpr const char* kScopeName = "trainer";

}  // namespace trainer::telemetry

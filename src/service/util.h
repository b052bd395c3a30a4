// Small helpers shared by the service's files: timestamps, ids, request field checks, files.
// Internal to src/service.
#pragma once

#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::service {

using json = nlohmann::json;

// "2026-01-02T03:04:05.678Z" for `seconds` since the Unix epoch.
std::string rfc3339(double seconds);

// `chars` random lowercase hex digits (ids).
std::string random_hex(int chars);

bool is_hex(const std::string& s);

// A status of `code` blaming `field` (the message does not repeat the field).
inline Status field_status(StatusCode code, std::string field, std::string message) {
  return Status(code, std::move(field), std::move(message));
}

// Every key of `body` is one of `allowed`; `body` is an object.
Status check_fields(const json& body, const std::set<std::string>& allowed);

// body[key] as a string; nullopt when absent or null; invalid_field(key) when not a string.
Result<std::optional<std::string>> optional_string(const json& body, const std::string& key);

// The whole file, or "" when it cannot be read.
std::string read_text(const std::string& path);

// The last `n` lines of a file, without trailing blanks.
std::string last_lines(const std::string& path, int n);

// Flattens {"a":{"b":1}} into {"a.b":1} under `prefix`.
void flatten(const json& v, const std::string& prefix, json& out);

// The kind of device a run trains on: "CPU" when its resolved plan's execution.gpus is 0, else "GPU".
std::string run_device_kind(const json& plan);

// A run's cost as the API shows it (docs/openapi.yaml, RunCost): {deviceKind, deviceSeconds,
// gpuSeconds, estimated}. deviceSeconds is the time its claims held times their devices;
// gpuSeconds is the same number under its old name, kept for one release and deprecated (it counts
// a CPU slot's seconds as well: read deviceKind and deviceSeconds instead).
json run_cost_json(const json& plan, double device_seconds, bool estimated);

}  // namespace trainer::service

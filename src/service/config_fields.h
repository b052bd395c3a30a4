// The pieces the deployment configuration's parsers share (config.cpp, config_pools.cpp,
// config_compute.cpp): field readers that name the field in their errors, and the sections
// parsed in files of their own. Internal to src/service/; config.h is the public face.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "service/config.h"

namespace trainer::service::config_fields {

// An error naming the first key of obj outside allowed (with the nearest allowed name).
Status check_keys(const nlohmann::json& obj, const std::string& where, const std::set<std::string>& allowed);

// obj[key] as an integer in [0, max]; fallback when absent.
Result<int64_t> non_negative_int(const nlohmann::json& obj, const std::string& key, const std::string& where,
                                 int64_t fallback, int64_t max = 1000000);

// obj[key] as a non-empty string; "" when absent and not required.
Result<std::string> string_field(const nlohmann::json& obj, const std::string& key, const std::string& where,
                                 bool required);

// The error of a list element that is not an object: "pools[2]: must be an object" for where
// "pools[2].".
Status not_an_object(const std::string& where);

// Whether `s` starts with http:// or https://.
bool is_http_url(const std::string& s);

// pools: a list of pools with distinct names (config_pools.cpp).
Status parse_pools(const nlohmann::json& list, std::vector<PoolConfig>& out);

// compute: {backend?, slurm?, ray?} (config_compute.cpp).
Status parse_compute(const nlohmann::json& cp, backend::ComputeConfig& compute);

// store: {kind?, url?} (config_compute.cpp).
Status parse_store(const nlohmann::json& st, StoreConfig& store);

}  // namespace trainer::service::config_fields

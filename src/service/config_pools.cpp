// The deployment configuration's pools and their capacity windows: parsing, and the devices a
// pool has at a time.
#include <algorithm>
#include <set>

#include "common/utc_time.h"
#include "service/config_fields.h"

namespace trainer::service {
namespace config_fields {
namespace {

using json = nlohmann::json;

// A pool's deviceIds: distinct device indices, one per declared device.
Status parse_device_ids(const json& ids, const std::string& where, PoolConfig& pool) {
  if (!ids.is_array()) return invalid_argument(where + "deviceIds: must be a list of device indices");
  std::set<int> seen;
  for (size_t k = 0; k < ids.size(); ++k) {
    const json& v = ids[k];
    const std::string at = where + "deviceIds[" + std::to_string(k) + "]";
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 4095) {
      return invalid_argument(at + ": must be a device index between 0 and 4095, got " + v.dump());
    }
    if (!seen.insert(v.get<int>()).second) {
      return invalid_argument(at + ": device " + v.dump() + " listed twice");
    }
    pool.device_ids.push_back(v.get<int>());
  }
  if (static_cast<int>(pool.device_ids.size()) != pool.declared) {
    return invalid_argument(where + "deviceIds: lists " + std::to_string(pool.device_ids.size()) +
                            " devices but declared is " + std::to_string(pool.declared));
  }
  return Status::ok();
}

// A window's opens or closes: a UTC date-time.
Result<double> time_field(const json& w, const std::string& key, const std::string& where) {
  if (!w.contains(key)) return invalid_argument(where + key + ": required (a UTC time, e.g. 2026-01-31T18:00:00Z)");
  const json& v = w[key];
  std::optional<double> t = v.is_string() ? parse_utc_time(v.get<std::string>()) : std::nullopt;
  if (!t) {
    return invalid_argument(where + key + ": " + v.dump() +
                            " is not a UTC time; write YYYY-MM-DDTHH:MM:SSZ (or an offset such as +02:00)");
  }
  return *t;
}

// A pool's windows: [{devices, opens, closes, deviceIds?}]. Their indices are distinct from the
// pool's and from each other's; a window listing none gets the next free ones.
Status parse_windows(const json& list, const std::string& where, PoolConfig& pool) {
  if (!list.is_array()) return invalid_argument(where + "windows: must be a list of {devices, opens, closes}");
  std::set<int> used(pool.device_ids.begin(), pool.device_ids.end());
  if (pool.device_ids.empty()) {
    for (int i = 0; i < pool.declared; ++i) used.insert(i);
  }
  std::vector<json> listed_ids(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& w = list[i];
    const std::string at = where + "windows[" + std::to_string(i) + "].";
    if (!w.is_object()) return not_an_object(at);
    TRAINER_RETURN_IF_ERROR(check_keys(w, at, {"devices", "opens", "closes", "deviceIds"}));
    CapacityWindow window;
    TRAINER_ASSIGN_OR_RETURN(int64_t devices, non_negative_int(w, "devices", at, -1));
    if (devices <= 0) {
      return invalid_argument(at + "devices: " + (devices < 0 ? std::string("required") : "must be at least 1") +
                              " (the devices the window adds)");
    }
    window.devices = static_cast<int>(devices);
    TRAINER_ASSIGN_OR_RETURN(window.opens_at, time_field(w, "opens", at));
    TRAINER_ASSIGN_OR_RETURN(window.closes_at, time_field(w, "closes", at));
    if (window.closes_at <= window.opens_at) {
      return invalid_argument(at + "closes: " + w["closes"].dump() + " is not after opens " + w["opens"].dump());
    }
    if (w.contains("deviceIds")) {
      PoolConfig ids;  // parse_device_ids checks a list against a declared count
      ids.declared = window.devices;
      TRAINER_RETURN_IF_ERROR(parse_device_ids(w["deviceIds"], at, ids));
      for (size_t k = 0; k < ids.device_ids.size(); ++k) {
        if (!used.insert(ids.device_ids[k]).second) {
          return invalid_argument(at + "deviceIds[" + std::to_string(k) + "]: device " +
                                  std::to_string(ids.device_ids[k]) +
                                  " is already the pool's or another window's");
        }
      }
      window.device_ids = ids.device_ids;
    }
    pool.windows.push_back(std::move(window));
  }
  // Windows without indices take the lowest ones nothing else uses.
  int next = 0;
  for (auto& window : pool.windows) {
    while (static_cast<int>(window.device_ids.size()) < window.devices) {
      while (used.count(next)) ++next;
      used.insert(next);
      window.device_ids.push_back(next);
    }
  }
  return Status::ok();
}

// One pool: {name, accelerator?, serving?, declared, maxClaim?, deviceIds?, windows?, hostRamGiB?}
Result<PoolConfig> parse_pool(const json& p, const std::string& where) {
  if (!p.is_object()) return not_an_object(where);
  TRAINER_RETURN_IF_ERROR(check_keys(
      p, where, {"name", "accelerator", "serving", "declared", "maxClaim", "deviceIds", "windows", "hostRamGiB"}));
  PoolConfig pool;
  TRAINER_ASSIGN_OR_RETURN(pool.name, string_field(p, "name", where, true));
  TRAINER_ASSIGN_OR_RETURN(std::string accelerator, string_field(p, "accelerator", where, false));
  if (!accelerator.empty()) pool.accelerator = accelerator;
  if (p.contains("serving")) {
    if (!p["serving"].is_boolean()) return invalid_argument(where + "serving: must be true or false");
    pool.serving = p["serving"].get<bool>();
  }
  TRAINER_ASSIGN_OR_RETURN(int64_t declared, non_negative_int(p, "declared", where, -1));
  if (declared < 0) return invalid_argument(where + "declared: required");
  pool.declared = static_cast<int>(declared);
  if (p.contains("deviceIds")) TRAINER_RETURN_IF_ERROR(parse_device_ids(p["deviceIds"], where, pool));
  if (p.contains("windows")) TRAINER_RETURN_IF_ERROR(parse_windows(p["windows"], where, pool));
  // The peak over all time: from before the first window opens.
  const int peak = peak_from(pool, 0);
  TRAINER_ASSIGN_OR_RETURN(int64_t max_claim, non_negative_int(p, "maxClaim", where, peak));
  pool.max_claim = static_cast<int>(max_claim);
  if (pool.max_claim > peak) {
    return invalid_argument(where + "maxClaim: " + std::to_string(pool.max_claim) + " is larger than declared " +
                            std::to_string(pool.declared) +
                            (pool.windows.empty() ? std::string()
                                                  : " with its windows' devices (at most " + std::to_string(peak) + ")"));
  }
  if (p.contains("hostRamGiB")) {
    const json& v = p["hostRamGiB"];
    if (!v.is_number() || v.get<double>() <= 0 || v.get<double>() > 1e6) {
      return invalid_argument(where + "hostRamGiB: must be a positive number of GiB (a node's host memory), got " +
                              v.dump());
    }
    pool.host_ram_gib = v.get<double>();
  }
  return pool;
}

}  // namespace

// pools: a list of pools with distinct names.
Status parse_pools(const json& list, std::vector<PoolConfig>& out) {
  if (!list.is_array()) return invalid_argument("pools: must be a list");
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "pools[" + std::to_string(i) + "].";
    TRAINER_ASSIGN_OR_RETURN(PoolConfig pool, parse_pool(list[i], where));
    if (!names.insert(pool.name).second) {
      return invalid_argument(where + "name: '" + pool.name + "' listed twice");
    }
    out.push_back(std::move(pool));
  }
  return Status::ok();
}

}  // namespace config_fields

int declared_at(const PoolConfig& pool, double t) {
  int n = pool.declared;
  for (const auto& w : pool.windows) {
    if (w.opens_at <= t && t < w.closes_at) n += w.devices;
  }
  return n;
}

std::vector<int> device_ids_at(const PoolConfig& pool, double t) {
  std::vector<int> ids = pool.device_ids;
  if (ids.empty()) {
    for (int i = 0; i < pool.declared; ++i) ids.push_back(i);
  }
  for (const auto& w : pool.windows) {
    if (w.opens_at <= t && t < w.closes_at) ids.insert(ids.end(), w.device_ids.begin(), w.device_ids.end());
  }
  return ids;
}

int peak_from(const PoolConfig& pool, double t) {
  // The size changes only when a window opens, so the peak is at t or at a later opening.
  int peak = declared_at(pool, t);
  for (const auto& w : pool.windows) {
    if (w.opens_at > t) peak = std::max(peak, declared_at(pool, w.opens_at));
  }
  return peak;
}

std::string window_text(const CapacityWindow& w, double t) {
  return "+" + std::to_string(w.devices) + " from " + utc_time_text(w.opens_at) + " to " + utc_time_text(w.closes_at) +
         (w.closes_at <= t ? " (ended)" : w.opens_at <= t ? " (open)" : "");
}

}  // namespace trainer::service

// Capacity's reports: `trainer capacity` (pools, windows, claims, warnings, the host-RAM check,
// the cluster), `capacity scan`, and device-hours from the claims' holds.
#include <algorithm>
#include <set>

#include "service/capacity.h"
#include "common/json_parse.h"
#include "common/utc_time.h"

namespace trainer::service {

namespace {

// A window as reports show it: {devices, opens, closes, open, ended, deviceIds}.
json window_json(const CapacityWindow& w, double t) {
  return {{"devices", w.devices},
          {"opens", utc_time_text(w.opens_at)},
          {"closes", utc_time_text(w.closes_at)},
          {"open", w.opens_at <= t && t < w.closes_at},
          {"ended", w.closes_at <= t},
          {"deviceIds", w.device_ids}};
}

// "2,3" for device indices.
std::string ids_text(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

}  // namespace

Result<json> Capacity::report(const std::string& workload) {
  constexpr std::chrono::seconds kClusterFreshness(5);
  if (core_.backend->name() == "slurm" || core_.backend->name() == "ray") read_if_older(kClusterFreshness);
  auto claims = core_.store->list_claims();
  if (!claims.is_ok()) return claims.status();
  auto workloads = core_.store->list_workloads();
  if (!workloads.is_ok()) return workloads.status();
  std::map<std::string, std::string> names;
  for (const auto& w : *workloads) names[w.value("id", std::string())] = w.value("name", std::string());
  if (!workload.empty()) {
    bool known = false;
    for (const auto& [id, name] : names) known = known || name == workload;
    if (!known) return field_status(StatusCode::kNotFound, "workload", "no workload named '" + workload + "'");
  }
  std::map<std::string, int> observed;
  std::optional<std::map<std::string, int>> in_use;
  bool read;
  double read_at;
  {
    std::lock_guard<std::mutex> lock(observed_mu_);
    observed = observed_;
    in_use = in_use_;
    read = observed_read_;
    read_at = observed_at_;
  }
  const double t = core_.now();
  json pools = json::array();
  json warnings = json::array();
  for (const auto& p : core_.options.config.pools) {
    const std::vector<int> ids = device_ids_at(p, t);
    const std::set<int> declared_ids(ids.begin(), ids.end());
    int granted = 0, queued = 0, beyond = 0;
    std::set<int> held;
    for (const auto& c : *claims) {
      if (c.pool != p.name) continue;
      if (c.state != "GRANTED") {
        queued += c.devices;
        continue;
      }
      held.insert(c.device_ids.begin(), c.device_ids.end());
      int inside = c.device_ids.empty() ? c.devices : 0;  // not yet placed: counted as the pool's
      std::vector<int> ended_ids;
      for (int id : c.device_ids) {
        if (declared_ids.count(id)) ++inside;
        else ended_ids.push_back(id);
      }
      granted += inside;
      beyond += static_cast<int>(ended_ids.size());
      // Devices of a window that has ended: the claim keeps them (it is not stopped), and says so.
      for (const auto& w : p.windows) {
        if (w.closes_at > t) continue;
        std::vector<int> of_window;
        for (int id : ended_ids) {
          if (std::find(w.device_ids.begin(), w.device_ids.end(), id) != w.device_ids.end()) of_window.push_back(id);
        }
        if (of_window.empty()) continue;
        const std::string wname = names.count(c.workload_id) ? names[c.workload_id] : c.workload_id;
        if (!workload.empty() && wname != workload) continue;
        warnings.push_back({{"reason", "windowEnded"},
                            {"kind", c.kind},
                            {"owner", c.owner},
                            {"workload", wname},
                            {"pool", p.name},
                            {"deviceIds", of_window},
                            {"window", window_json(w, t)},
                            {"message", c.kind + " " + c.owner + " still holds device" +
                                            (of_window.size() == 1 ? " " : "s ") + ids_text(of_window) + " of pool " +
                                            p.name + "'s window " + window_text(w, t) + "; it is not stopped"}});
      }
    }
    std::vector<int> free_ids;
    for (int id : ids) {
      if (!held.count(id)) free_ids.push_back(id);
    }
    const int declared = static_cast<int>(ids.size());
    // What holdings outside the declared indices (an ended window's) take of DECLARED: admission
    // counts every granted device against it, so FREE + GRANTED + OUTSIDE = DECLARED.
    const int outside = std::min(beyond, std::max(0, declared - granted));
    json windows = json::array();
    for (const auto& w : p.windows) windows.push_back(window_json(w, t));
    json pj = {{"name", p.name},
               {"accelerator", p.accelerator},
               {"serving", p.serving},
               {"declared", declared},
               {"permanent", p.declared},
               {"maxClaim", p.max_claim},
               {"granted", granted},
               {"outside", outside},
               {"queued", queued},
               {"free", std::max(0, declared - granted - outside)},
               {"heldBeyondDeclared", beyond},
               {"deviceIds", ids},
               {"freeDeviceIds", free_ids},
               {"windows", windows},
               {"hostRamGiB", p.host_ram_gib > 0 ? json(p.host_ram_gib) : json(nullptr)}};
    if (read) pj["observed"] = observed_for(p, observed);
    pools.push_back(pj);
  }
  json cl = json::array();
  std::map<std::string, std::pair<int, int>> per_workload;
  for (const auto& c : *claims) {
    auto& pw = per_workload[c.workload_id];
    (c.state == "GRANTED" ? pw.first : pw.second) += c.devices;
    const std::string wname = names.count(c.workload_id) ? names[c.workload_id] : c.workload_id;
    if (!workload.empty() && wname != workload) continue;
    json entry = {{"kind", c.kind},
                  {"owner", c.owner},
                  {"workload", wname},
                  {"devices", c.devices},
                  {"pool", c.pool},
                  {"state", c.state},
                  {"since", c.since},
                  {"deviceIds", c.device_ids}};
    TRAINER_RETURN_IF_ERROR(check_host_ram(c, wname, entry, warnings));
    cl.push_back(std::move(entry));
  }
  json quotas = json::array();
  for (const auto& w : *workloads) {
    if (!workload.empty() && w.value("name", std::string()) != workload) continue;
    auto pw = per_workload[w.value("id", std::string())];
    quotas.push_back({{"workload", w.value("name", std::string())},
                      {"quota", w.value("gpuQuota", json(nullptr))},
                      {"held", pw.first},
                      {"queued", pw.second}});
  }
  return json{{"pools", pools},
              {"claims", cl},
              {"quotas", quotas},
              {"warnings", warnings},
              {"cluster", cluster_json(*claims, observed, in_use, read ? std::optional<double>(read_at) : std::nullopt)}};
}

// The cluster a Slurm or Ray backend schedules on, as last read: its nodes (each counted as one
// "cpu" device by observed_devices), its devices by profile (GPUs; the nodes' CPU devices where
// it has none), the devices this service's granted claims hold, and outside: of the same
// devices, those the cluster reports in use beyond what this service holds (other users' work;
// null when the backend could not say). Null for the local backend.
json Capacity::cluster_json(const std::vector<store::ClaimRow>& claims, const std::map<std::string, int>& observed,
                            const std::optional<std::map<std::string, int>>& in_use,
                            std::optional<double> read_at) const {
  const std::string backend = core_.backend->name();
  if (backend != "slurm" && backend != "ray") return nullptr;
  int held = 0;
  for (const auto& c : claims) held += c.state == "GRANTED" ? c.devices : 0;
  json devices = json::object();
  int total = 0;
  for (const auto& [profile, count] : observed) {
    if (profile == "cpu") continue;
    devices[profile] = count;
    total += count;
  }
  auto nodes = observed.find("cpu");
  const bool nodes_are_the_devices = total == 0 && nodes != observed.end();
  if (nodes_are_the_devices) {
    devices["cpu"] = nodes->second;
    total = nodes->second;
  }
  // The same profiles as `devices`, in use by anything; what this service's claims hold is ours.
  json outside = nullptr;
  if (read_at && in_use) {
    int used = 0;
    for (const auto& [profile, count] : *in_use) {
      if (nodes_are_the_devices ? profile == "cpu" : profile != "cpu") used += count;
    }
    outside = std::max(0, used - held);
  }
  return {{"backend", backend},
          {"source", core_.backend->observed_source()},
          {"nodes", read_at && nodes != observed.end() ? json(nodes->second) : json(read_at ? json(0) : json(nullptr))},
          {"devices", devices},
          {"deviceCount", read_at ? json(total) : json(nullptr)},
          {"held", held},
          {"outside", outside},
          {"readAt", read_at ? json(rfc3339(*read_at)) : json(nullptr)}};
}

Result<json> Capacity::scan() {
  constexpr int kScanTimeoutSeconds = 60;
  auto answers = core_.backend->scan_nodes({"scan", "--data", core_.options.data_dir}, kScanTimeoutSeconds);
  if (!answers.is_ok()) return answers.status();
  json nodes = json::array();
  for (const auto& answer : *answers) {
    if (!answer.error.empty()) {
      nodes.push_back({{"node", answer.node}, {"error", answer.error}});
      continue;
    }
    auto node = parse_json(answer.output, "the output of trainer-job scan");
    if (!node.is_ok() || !node->is_object()) {
      nodes.push_back({{"node", answer.node}, {"error", "trainer-job scan printed something other than a JSON object"}});
      continue;
    }
    // The node as the backend names it; the host name trainer-job read there, when it differs.
    const std::string host = node->value("node", std::string());
    (*node)["node"] = answer.node;
    if (!host.empty() && host != answer.node) (*node)["host"] = host;
    // A job folder is left over unless it is the current attempt of a run still open.
    json& folders = (*node)["jobFolders"];
    if (folders.is_array()) {
      for (auto& f : folders) {
        auto run = core_.store->get_run(f.value("runId", std::string()));
        if (!run.is_ok()) return run.status();
        bool current = false;
        if (run->has_value()) {
          const json& doc = **run;
          auto phase = parse_phase(doc.value("phase", std::string()));
          current = phase && !is_terminal(*phase) && doc.value("attempt", 0) == f.value("attempt", -1);
        }
        f["leftover"] = !current;
      }
    }
    nodes.push_back(std::move(*node));
  }
  return json{{"backend", core_.backend->name()}, {"nodes", nodes}};
}

// The host-RAM check: a run's host memory figure is the peak its job reported of the tensors it
// held in host memory (memory.allocatedPeakBytes of a run on a CPU pool; a GPU run's tensors are
// in device memory, and its host memory is not measured). Shown as the claim's hostMemoryGiB;
// over its pool's hostRamGiB (when the configuration states it), a warning.
Status Capacity::check_host_ram(const store::ClaimRow& c, const std::string& workload_name, json& entry,
                                json& warnings) {
  const PoolConfig* pool = pool_named(c.pool);
  if (pool == nullptr || pool->accelerator != "cpu" || c.kind == "EVALUATION" || c.kind == "SERVING") {
    return Status::ok();
  }
  auto run = core_.store->get_run(c.owner);
  if (!run.is_ok()) return run.status();
  if (!run->has_value()) return Status::ok();
  const json& doc = **run;
  if (!doc.contains("memory") || !doc["memory"].is_object()) return Status::ok();
  const json& memory = doc["memory"];
  const json& peak = memory.value("allocatedPeakBytes", json());
  if (!peak.is_number()) return Status::ok();
  constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
  const double gib = peak.get<double>() / kBytesPerGiB;
  entry["hostMemoryGiB"] = gib;
  if (pool->host_ram_gib <= 0 || gib <= pool->host_ram_gib) return Status::ok();
  char figures[128];
  std::snprintf(figures, sizeof figures, "%.4g GiB at step %lld is over pool %s's HOST RAM of %.4g GiB", gib,
                static_cast<long long>(memory.value("step", 0)), pool->name.c_str(), pool->host_ram_gib);
  warnings.push_back({{"reason", "hostRam"},
                      {"kind", c.kind},
                      {"owner", c.owner},
                      {"workload", workload_name},
                      {"pool", pool->name},
                      {"hostMemoryGiB", gib},
                      {"hostRamGiB", pool->host_ram_gib},
                      {"message", c.kind + " " + c.owner + "'s host memory figure " + figures}});
  return Status::ok();
}

namespace {

constexpr double kSecondsPerDay = 86400;
constexpr double kMaxDeviceHoursDays = 366;  // the longest range device-hours reads

// The query parameter `name` as a UTC time; `fallback` when absent.
Result<double> time_param(const std::string& name, const std::string& value, double fallback) {
  if (value.empty()) return fallback;
  auto t = parse_utc_time(value);
  if (!t) {
    return invalid_field(name, "'" + value + "' is not an ISO 8601 UTC time; write YYYY-MM-DDTHH:MM:SSZ (or an offset such as +02:00)");
  }
  return *t;
}

}  // namespace

// Device-hours: each hold of the claims' history clipped to [from, to) (a hold still open counts
// up to the service's now, or `to` when earlier), its seconds times its devices, summed by key.
Result<json> Capacity::device_hours(const std::string& from_text, const std::string& to_text, const std::string& by) {
  const double now = core_.now();
  const std::string key_by = by.empty() ? "pool" : by;
  if (key_by != "pool" && key_by != "endpoint" && key_by != "workload") {
    return invalid_field("by", "'" + by + "' is not a grouping; use pool, endpoint or workload");
  }
  TRAINER_ASSIGN_OR_RETURN(double to, time_param("to", to_text, now));
  TRAINER_ASSIGN_OR_RETURN(double from, time_param("from", from_text, to - kSecondsPerDay));
  if (from >= to) {
    return invalid_field("from", utc_time_text(from) + " is not before to " + utc_time_text(to) +
                                     "; the range must be forwards");
  }
  if (to - from > kMaxDeviceHoursDays * kSecondsPerDay) {
    return invalid_field("from", "the range " + utc_time_text(from) + " to " + utc_time_text(to) + " is " +
                                     std::to_string(static_cast<int64_t>((to - from) / kSecondsPerDay)) +
                                     " days long; at most 366 days");
  }
  auto holds = core_.store->list_claim_holds(from, to);
  if (!holds.is_ok()) return holds.status();
  auto workloads = core_.store->list_workloads();
  if (!workloads.is_ok()) return workloads.status();
  std::map<std::string, std::string> names;
  for (const auto& w : *workloads) names[w.value("id", std::string())] = w.value("name", std::string());
  struct Sum {
    double device_seconds = 0;
    bool held = false;
    int claims = 0;
  };
  std::map<std::pair<std::string, std::string>, Sum> sums;  // by (key, pool)
  for (const auto& h : *holds) {
    if (key_by == "endpoint" && h.kind != "SERVING") continue;
    const std::string key = key_by == "pool"       ? h.pool
                            : key_by == "endpoint" ? h.owner
                                                   : (names.count(h.workload_id) ? names[h.workload_id] : h.workload_id);
    const double start = std::max(from, h.granted_at);
    const double end = std::min(to, h.released_at.value_or(now));
    Sum& sum = sums[{key, h.pool}];
    if (end > start) sum.device_seconds += (end - start) * h.devices;
    sum.held = sum.held || !h.released_at;
    ++sum.claims;
  }
  json rows = json::array();
  for (const auto& [k, sum] : sums) {
    rows.push_back({{"key", k.first},
                    {"pool", k.second},
                    {"deviceSeconds", sum.device_seconds},
                    {"deviceHours", sum.device_seconds / 3600.0},
                    {"held", sum.held},
                    {"claims", sum.claims}});
  }
  return json{{"from", utc_time_text(from)}, {"to", utc_time_text(to)}, {"by", key_by}, {"rows", rows}};
}

}  // namespace trainer::service

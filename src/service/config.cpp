#include "service/config.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "common/json_parse.h"
#include "common/spelling.h"
#include "common/utc_time.h"
#include "telemetry/tracing.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;

Status check_keys(const json& obj, const std::string& where, const std::set<std::string>& allowed) {
  for (const auto& [k, v] : obj.items()) {
    if (!allowed.count(k)) {
      const auto near = nearest_name(k, std::vector<std::string>(allowed.begin(), allowed.end()));
      std::string known;
      for (const auto& a : allowed) known += (known.empty() ? "" : ", ") + a;
      return invalid_argument(where + k + ": unknown field; " +
                              (near ? "did you mean " + *near + "?" : "the fields here are " + known));
    }
  }
  return Status::ok();
}

Result<int64_t> non_negative_int(const json& obj, const std::string& key, const std::string& where, int64_t fallback,
                                 int64_t max = 1000000) {
  if (!obj.contains(key)) return fallback;
  const json& v = obj[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max) {
    return invalid_argument(where + key + ": must be an integer between 0 and " + std::to_string(max) + ", got " +
                            v.dump());
  }
  return v.get<int64_t>();
}

Result<std::string> string_field(const json& obj, const std::string& key, const std::string& where, bool required) {
  if (!obj.contains(key)) {
    if (required) return invalid_argument(where + key + ": required");
    return std::string();
  }
  if (!obj[key].is_string() || obj[key].get<std::string>().empty()) {
    return invalid_argument(where + key + ": must be a non-empty string, got " + obj[key].dump());
  }
  return obj[key].get<std::string>();
}

// The error of a list element that is not an object: "pools[2]: must be an object" for where
// "pools[2].".
Status not_an_object(const std::string& where) {
  return invalid_argument(where.substr(0, where.size() - 1) + ": must be an object");
}

// Whether `s` starts with http:// or https://.
bool is_http_url(const std::string& s) { return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0; }

// judges: [{name, url, model?, apiKeyEnv?, caFile?, readyTimeoutSeconds?}]
Result<std::vector<JudgeConfig>> parse_judges(const json& list) {
  if (!list.is_array()) return invalid_argument("judges: must be a list of {name, url, model, apiKeyEnv}");
  std::vector<JudgeConfig> out;
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& j = list[i];
    const std::string where = "judges[" + std::to_string(i) + "].";
    if (!j.is_object()) return not_an_object(where);
    TRAINER_RETURN_IF_ERROR(check_keys(j, where, {"name", "url", "model", "apiKeyEnv", "caFile", "readyTimeoutSeconds"}));
    JudgeConfig judge;
    auto name = string_field(j, "name", where, true);
    if (!name.is_ok()) return name.status();
    auto url = string_field(j, "url", where, true);
    if (!url.is_ok()) return url.status();
    if (!is_http_url(*url)) {
      return invalid_argument(where + "url: '" + *url + "' must be an http:// or https:// URL");
    }
    auto ca_file = string_field(j, "caFile", where, false);
    if (!ca_file.is_ok()) return ca_file.status();
    if (!ca_file->empty()) {
      std::error_code ec;
      if (!std::filesystem::path(*ca_file).is_absolute() || !std::filesystem::is_regular_file(*ca_file, ec)) {
        return invalid_argument(where + "caFile: '" + *ca_file + "': no such file (an absolute path of a PEM file of CA certificates)");
      }
    }
    auto model = string_field(j, "model", where, false);
    if (!model.is_ok()) return model.status();
    auto key = string_field(j, "apiKeyEnv", where, false);
    if (!key.is_ok()) return key.status();
    auto ready = non_negative_int(j, "readyTimeoutSeconds", where, judge.ready_timeout_seconds, 86400);
    if (!ready.is_ok()) return ready.status();
    if (*ready == 0) return invalid_argument(where + "readyTimeoutSeconds: must be at least 1");
    if (!names.insert(*name).second) return invalid_argument(where + "name: '" + *name + "' listed twice");
    judge.name = *name;
    judge.url = *url;
    judge.model = *model;
    judge.api_key_env = *key;
    judge.ca_file = *ca_file;
    judge.ready_timeout_seconds = static_cast<int>(*ready);
    out.push_back(std::move(judge));
  }
  return out;
}

// baseModels[i].shapes: [{method, precision, gpus}], each row once.
Status parse_shapes(const json& list, const std::string& where, std::vector<AdmittedShape>& out) {
  if (!list.is_array()) return invalid_argument(where + "shapes: must be a list of {method, precision, gpus}");
  std::set<std::string> seen;
  for (size_t k = 0; k < list.size(); ++k) {
    const json& row = list[k];
    const std::string at = where + "shapes[" + std::to_string(k) + "].";
    if (!row.is_object()) return not_an_object(at);
    TRAINER_RETURN_IF_ERROR(check_keys(row, at, {"method", "precision", "gpus"}));
    TRAINER_ASSIGN_OR_RETURN(std::string method, string_field(row, "method", at, true));
    TRAINER_ASSIGN_OR_RETURN(std::string precision, string_field(row, "precision", at, true));
    if (method != "sft" && method != "grpo" && method != "gspo") {
      return invalid_argument(at + "method: '" + method + "' is not one of sft, grpo, gspo");
    }
    if (precision != "BF16" && precision != "FP32") {
      return invalid_argument(at + "precision: '" + precision + "' is not one of BF16, FP32");
    }
    if (!row.contains("gpus")) return invalid_argument(at + "gpus: required (0 for a CPU run)");
    const json& g = row["gpus"];
    if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > 4096) {
      return invalid_argument(at + "gpus: must be a whole number of devices from 0 to 4096, got " + g.dump());
    }
    const int gpus = g.get<int>();
    if (!seen.insert(method + "/" + precision + "/" + std::to_string(gpus)).second) {
      return invalid_argument(at.substr(0, at.size() - 1) + ": the row (" + method + ", " + precision + ", " +
                              std::to_string(gpus) + " gpus) is listed twice");
    }
    out.push_back({method, precision, gpus});
  }
  return Status::ok();
}

// baseModels: [{name, path, shapes?}]
Status parse_base_models(const json& list, std::vector<AllowedBaseModel>& out) {
  if (!list.is_array()) return invalid_argument("baseModels: must be a list");
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    const std::string where = "baseModels[" + std::to_string(i) + "].";
    if (!m.is_object()) return not_an_object(where);
    TRAINER_RETURN_IF_ERROR(check_keys(m, where, {"name", "path", "shapes"}));
    TRAINER_ASSIGN_OR_RETURN(std::string name, string_field(m, "name", where, true));
    TRAINER_ASSIGN_OR_RETURN(std::string path, string_field(m, "path", where, true));
    if (!names.insert(name).second) return invalid_argument(where + "name: '" + name + "' listed twice");
    AllowedBaseModel allowed{name, path};
    if (m.contains("shapes")) TRAINER_RETURN_IF_ERROR(parse_shapes(m["shapes"], where, allowed.shapes));
    out.push_back(std::move(allowed));
  }
  return Status::ok();
}

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

// quotas: {default?, workloads?: {NAME: devices}}
Status parse_quotas(const json& q, DeploymentConfig& c) {
  if (!q.is_object()) return invalid_argument("quotas: must be an object");
  TRAINER_RETURN_IF_ERROR(check_keys(q, "quotas.", {"default", "workloads"}));
  TRAINER_ASSIGN_OR_RETURN(int64_t default_quota,
                           non_negative_int(q, "default", "quotas.", c.default_workload_quota));
  c.default_workload_quota = static_cast<int>(default_quota);
  if (!q.contains("workloads")) return Status::ok();
  if (!q["workloads"].is_object()) return invalid_argument("quotas.workloads: must be an object");
  for (const auto& [name, v] : q["workloads"].items()) {
    TRAINER_ASSIGN_OR_RETURN(int64_t n, non_negative_int(q["workloads"], name, "quotas.workloads.", 0));
    c.workload_quotas[name] = static_cast<int>(n);
  }
  return Status::ok();
}

// limits: each field optional, its default kept.
Status parse_limits(const json& l, Limits& limits) {
  if (!l.is_object()) return invalid_argument("limits: must be an object");
  TRAINER_RETURN_IF_ERROR(check_keys(l, "limits.",
                                     {"maxRequestBytes", "maxDatasetBytes", "cancelGraceSeconds",
                                      "pauseDeadlineSeconds", "maxAdapterRank", "publishDeadlineSeconds",
                                      "abandonedPublicationSeconds", "jobSilenceSeconds",
                                      "attemptBackoffSeconds"}));
  auto field = [&](const char* key, int64_t fallback, int64_t max = 1000000) {
    return non_negative_int(l, key, "limits.", fallback, max);
  };
  const int64_t kMaxBytes = int64_t{1} << 34;
  TRAINER_ASSIGN_OR_RETURN(int64_t request_bytes,
                           field("maxRequestBytes", static_cast<int64_t>(limits.max_request_bytes), kMaxBytes));
  TRAINER_ASSIGN_OR_RETURN(int64_t dataset_bytes,
                           field("maxDatasetBytes", static_cast<int64_t>(limits.max_dataset_bytes), kMaxBytes));
  TRAINER_ASSIGN_OR_RETURN(int64_t grace, field("cancelGraceSeconds", limits.cancel_grace_seconds));
  limits.max_request_bytes = static_cast<size_t>(request_bytes);
  limits.max_dataset_bytes = static_cast<size_t>(dataset_bytes);
  limits.cancel_grace_seconds = static_cast<int>(grace);
  TRAINER_ASSIGN_OR_RETURN(int64_t pause, field("pauseDeadlineSeconds", limits.pause_deadline_seconds));
  limits.pause_deadline_seconds = static_cast<int>(pause);
  TRAINER_ASSIGN_OR_RETURN(int64_t rank, field("maxAdapterRank", limits.max_adapter_rank, 4096));
  limits.max_adapter_rank = static_cast<int>(rank);
  TRAINER_ASSIGN_OR_RETURN(int64_t publish,
                           field("publishDeadlineSeconds", limits.publish_deadline_seconds, 86400));
  if (publish < 1) return invalid_argument("limits.publishDeadlineSeconds: must be at least 1");
  limits.publish_deadline_seconds = static_cast<int>(publish);
  TRAINER_ASSIGN_OR_RETURN(int64_t abandoned, field("abandonedPublicationSeconds",
                                                    limits.abandoned_publication_seconds, 30 * 86400));
  if (abandoned < publish) {
    return invalid_argument("limits.abandonedPublicationSeconds: must be at least limits.publishDeadlineSeconds (" +
                            std::to_string(publish) + "): a job may still be publishing until then");
  }
  limits.abandoned_publication_seconds = static_cast<int>(abandoned);
  TRAINER_ASSIGN_OR_RETURN(int64_t silence, field("jobSilenceSeconds", limits.job_silence_seconds, 86400));
  if (silence != 0 && silence < 2) {
    return invalid_argument("limits.jobSilenceSeconds: must be 0 (never) or at least 2 (the job's heartbeat comes "
                            "every quarter of it)");
  }
  limits.job_silence_seconds = static_cast<int>(silence);
  TRAINER_ASSIGN_OR_RETURN(int64_t backoff, field("attemptBackoffSeconds", limits.attempt_backoff_seconds, 3600));
  limits.attempt_backoff_seconds = static_cast<int>(backoff);
  return Status::ok();
}

// compute.slurm: sbatch's partition, paths and per-job options.
Status parse_slurm(const json& sl, backend::SlurmOptions& o) {
  const std::string where = "compute.slurm.";
  if (!sl.is_object()) return invalid_argument("compute.slurm: must be an object");
  TRAINER_RETURN_IF_ERROR(check_keys(sl, where, {"partition", "slurmConf", "binDir", "gresName", "cpusPerTask",
                                                 "cpusPerGpu", "jobNamePrefix", "extraArgs"}));
  for (auto [key, field] : {std::pair{"partition", &o.partition}, std::pair{"slurmConf", &o.slurm_conf},
                            std::pair{"binDir", &o.bin_dir}, std::pair{"gresName", &o.gres_name},
                            std::pair{"jobNamePrefix", &o.job_name_prefix}}) {
    TRAINER_ASSIGN_OR_RETURN(std::string v, string_field(sl, key, where, false));
    if (!v.empty()) *field = v;
  }
  TRAINER_ASSIGN_OR_RETURN(int64_t cpus_per_task,
                           non_negative_int(sl, "cpusPerTask", where, o.cpus_per_task, 4096));
  TRAINER_ASSIGN_OR_RETURN(int64_t cpus_per_gpu, non_negative_int(sl, "cpusPerGpu", where, o.cpus_per_gpu, 4096));
  if (cpus_per_task == 0) return invalid_argument(where + "cpusPerTask: must be at least 1");
  if (cpus_per_gpu == 0) return invalid_argument(where + "cpusPerGpu: must be at least 1");
  o.cpus_per_task = static_cast<int>(cpus_per_task);
  o.cpus_per_gpu = static_cast<int>(cpus_per_gpu);
  if (!sl.contains("extraArgs")) return Status::ok();
  const json& ea = sl["extraArgs"];
  if (!ea.is_array()) return invalid_argument(where + "extraArgs: must be a list of sbatch arguments");
  for (size_t i = 0; i < ea.size(); ++i) {
    if (!ea[i].is_string() || ea[i].get<std::string>().rfind("--", 0) != 0) {
      return invalid_argument(where + "extraArgs[" + std::to_string(i) +
                              "]: must be an sbatch option starting with --, got " + ea[i].dump());
    }
    o.extra_args.push_back(ea[i].get<std::string>());
  }
  return Status::ok();
}

// compute.ray (required for the ray backend): the dashboard's address and per-job options.
Status parse_ray(const json& cp, backend::RayOptions& o) {
  const std::string where = "compute.ray.";
  if (!cp.contains("ray") || !cp["ray"].is_object()) {
    return invalid_argument("compute.ray: required for the ray backend (an object with address)");
  }
  const json& ry = cp["ray"];
  TRAINER_RETURN_IF_ERROR(
      check_keys(ry, where, {"address", "cpusPerJob", "submissionPrefix", "requestTimeoutSeconds", "jobFolder"}));
  TRAINER_ASSIGN_OR_RETURN(std::string address, string_field(ry, "address", where, true));
  if (!is_http_url(address)) {
    return invalid_argument(where + "address: '" + address +
                            "' must be the dashboard's http:// URL, e.g. http://127.0.0.1:8265");
  }
  o.address = address;
  TRAINER_ASSIGN_OR_RETURN(std::string prefix, string_field(ry, "submissionPrefix", where, false));
  if (!prefix.empty()) o.submission_prefix = prefix;
  TRAINER_ASSIGN_OR_RETURN(int64_t cpus, non_negative_int(ry, "cpusPerJob", where, 1, 4096));
  o.cpus_per_job = static_cast<double>(cpus);
  TRAINER_ASSIGN_OR_RETURN(int64_t timeout,
                           non_negative_int(ry, "requestTimeoutSeconds", where, o.request_timeout_s, 600));
  if (timeout == 0) return invalid_argument(where + "requestTimeoutSeconds: must be at least 1");
  o.request_timeout_s = static_cast<int>(timeout);
  TRAINER_ASSIGN_OR_RETURN(std::string job_folder, string_field(ry, "jobFolder", where, false));
  if (!job_folder.empty() && job_folder[0] != '/') {
    return invalid_argument(where + "jobFolder: '" + job_folder + "' must be an absolute path on the nodes");
  }
  o.job_folder = job_folder;
  return Status::ok();
}

// compute: {backend?, slurm?, ray?}; a backend's section only beside that backend.
Status parse_compute(const json& cp, backend::ComputeConfig& compute) {
  if (!cp.is_object()) return invalid_argument("compute: must be an object");
  TRAINER_RETURN_IF_ERROR(check_keys(cp, "compute.", {"backend", "slurm", "ray"}));
  TRAINER_ASSIGN_OR_RETURN(std::string backend, string_field(cp, "backend", "compute.", false));
  if (!backend.empty()) compute.backend = backend;
  if (compute.backend != "local" && compute.backend != "slurm" && compute.backend != "ray") {
    return invalid_argument("compute.backend: '" + compute.backend +
                            "' is not a compute backend of this build; use local, slurm or ray");
  }
  for (const char* section : {"slurm", "ray"}) {
    if (cp.contains(section) && compute.backend != section) {
      return invalid_argument(std::string("compute.") + section + ": set, but compute.backend is " +
                              compute.backend);
    }
  }
  if (cp.contains("slurm")) TRAINER_RETURN_IF_ERROR(parse_slurm(cp["slurm"], compute.slurm));
  if (compute.backend == "ray") TRAINER_RETURN_IF_ERROR(parse_ray(cp, compute.ray));
  return Status::ok();
}

// telemetry: {otlpEndpoint?, otlpIntervalMs?, jobSeriesRetentionSeconds?}
Status parse_telemetry(const json& t, TelemetryConfig& telemetry) {
  if (!t.is_object()) return invalid_argument("telemetry: must be an object");
  TRAINER_RETURN_IF_ERROR(
      check_keys(t, "telemetry.", {"otlpEndpoint", "otlpIntervalMs", "jobSeriesRetentionSeconds", "otlpTracesEndpoint"}));
  TRAINER_ASSIGN_OR_RETURN(std::string endpoint, string_field(t, "otlpEndpoint", "telemetry.", false));
  if (!endpoint.empty() && !is_http_url(endpoint)) {
    return invalid_argument("telemetry.otlpEndpoint: '" + endpoint + "' must be an http:// or https:// URL");
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  telemetry.otlp_endpoint = endpoint;
  TRAINER_ASSIGN_OR_RETURN(std::string traces, string_field(t, "otlpTracesEndpoint", "telemetry.", false));
  if (!traces.empty()) {
    auto url = telemetry::traces_endpoint_url(traces);
    if (!url.is_ok()) return invalid_argument("telemetry.otlpTracesEndpoint: " + url.status().message());
    telemetry.otlp_traces_endpoint = *url;
  }
  TRAINER_ASSIGN_OR_RETURN(int64_t interval, non_negative_int(t, "otlpIntervalMs", "telemetry.",
                                                              telemetry.otlp_interval_ms, 3600000));
  if (interval == 0) return invalid_argument("telemetry.otlpIntervalMs: must be at least 1");
  telemetry.otlp_interval_ms = static_cast<int>(interval);
  const auto retention_default = static_cast<int64_t>(telemetry.job_series_retention_seconds);
  TRAINER_ASSIGN_OR_RETURN(int64_t retention, non_negative_int(t, "jobSeriesRetentionSeconds", "telemetry.",
                                                               retention_default, 7 * 86400));
  telemetry.job_series_retention_seconds = static_cast<double>(retention);
  return Status::ok();
}

// artifactStore: {uri, endpoint, region?, accessKeyEnv?, secretKeyEnv?, inputCache?}
Status parse_artifact_store(const json& a, ArtifactStoreConfig& s) {
  const std::string where = "artifactStore.";
  if (!a.is_object()) return invalid_argument("artifactStore: must be an object");
  TRAINER_RETURN_IF_ERROR(
      check_keys(a, where, {"uri", "endpoint", "region", "accessKeyEnv", "secretKeyEnv", "inputCache"}));
  TRAINER_ASSIGN_OR_RETURN(std::string uri, string_field(a, "uri", where, true));
  if (uri.rfind("s3://", 0) != 0 || uri.size() < 8) {
    return invalid_argument(where + "uri: '" + uri + "' must be s3://BUCKET[/PREFIX] (leave artifactStore out "
                            "for the data directory's folder)");
  }
  s.uri = uri;
  TRAINER_ASSIGN_OR_RETURN(std::string endpoint, string_field(a, "endpoint", where, true));
  if (!is_http_url(endpoint)) {
    return invalid_argument(where + "endpoint: '" + endpoint + "' must be an http:// or https:// URL");
  }
  s.endpoint = endpoint;
  for (auto [key, target] : {std::pair{"region", &s.region}, std::pair{"accessKeyEnv", &s.access_key_env},
                             std::pair{"secretKeyEnv", &s.secret_key_env}, std::pair{"inputCache", &s.input_cache}}) {
    TRAINER_ASSIGN_OR_RETURN(std::string v, string_field(a, key, where, false));
    if (!v.empty()) *target = v;
  }
  if (!s.input_cache.empty() && s.input_cache.front() != '/') {
    return invalid_argument(where + "inputCache: '" + s.input_cache +
                            "' must be an absolute folder path on the cluster's nodes");
  }
  return Status::ok();
}

// store: {kind?, url?}
Status parse_store(const json& st, StoreConfig& store) {
  if (!st.is_object()) return invalid_argument("store: must be an object {kind, url}");
  TRAINER_RETURN_IF_ERROR(check_keys(st, "store.", {"kind", "url"}));
  TRAINER_ASSIGN_OR_RETURN(std::string kind, string_field(st, "kind", "store.", false));
  if (!kind.empty()) store.kind = kind;
  if (store.kind != "sqlite" && store.kind != "postgres") {
    return invalid_argument("store.kind: '" + store.kind + "' is not a store of this build; use sqlite or postgres");
  }
  TRAINER_ASSIGN_OR_RETURN(store.url, string_field(st, "url", "store.", false));
  const bool has_scheme = store.url.find("://") != std::string::npos;
  if (store.kind == "postgres") {
    if (store.url.empty()) {
      return invalid_argument("store.url: required for kind postgres (postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE)");
    }
    if (store.url.rfind("postgresql://", 0) != 0 && store.url.rfind("postgres://", 0) != 0) {
      return invalid_argument("store.url: '" + redact_password(store.url) +
                              "' must be a postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE URL");
    }
  } else if (has_scheme) {
    return invalid_argument("store.url: '" + redact_password(store.url) +
                            "' is a URL; for kind sqlite it is the database file's path (leave it out for "
                            "DATA/state.db), or set kind to postgres");
  }
  return Status::ok();
}

// The document's sections, in the order they are checked; the first error wins.
Status parse_sections(const json& doc, DeploymentConfig& c) {
  TRAINER_RETURN_IF_ERROR(check_keys(doc, "", {"baseModels", "shapeCatalog", "pools", "quotas", "limits", "jobBinary",
                                               "compute", "telemetry", "judges", "artifactStore", "store"}));
  if (doc.contains("baseModels")) {
    TRAINER_RETURN_IF_ERROR(parse_base_models(doc["baseModels"], c.base_models));
  }
  if (doc.contains("shapeCatalog")) {
    const json& mode = doc["shapeCatalog"];
    if (mode == "strict") {
      c.shape_catalog = ShapeCatalog::kStrict;
    } else if (mode == "advisory") {
      c.shape_catalog = ShapeCatalog::kAdvisory;
    } else {
      return invalid_argument("shapeCatalog: must be \"strict\" (a run outside every admitted shape is refused) or "
                              "\"advisory\" (admitted with a warning), got " + mode.dump());
    }
  }
  if (doc.contains("pools")) {
    TRAINER_RETURN_IF_ERROR(parse_pools(doc["pools"], c.pools));
  } else {
    c.pools = default_config().pools;
  }
  if (doc.contains("quotas")) TRAINER_RETURN_IF_ERROR(parse_quotas(doc["quotas"], c));
  if (doc.contains("limits")) TRAINER_RETURN_IF_ERROR(parse_limits(doc["limits"], c.limits));
  if (doc.contains("jobBinary")) {
    TRAINER_ASSIGN_OR_RETURN(c.job_binary, string_field(doc, "jobBinary", "", true));
  }
  if (doc.contains("compute")) TRAINER_RETURN_IF_ERROR(parse_compute(doc["compute"], c.compute));
  if (doc.contains("telemetry")) TRAINER_RETURN_IF_ERROR(parse_telemetry(doc["telemetry"], c.telemetry));
  if (doc.contains("judges")) {
    TRAINER_ASSIGN_OR_RETURN(c.judges, parse_judges(doc["judges"]));
  }
  if (doc.contains("artifactStore")) {
    TRAINER_RETURN_IF_ERROR(parse_artifact_store(doc["artifactStore"], c.artifact_store));
  }
  if (doc.contains("store")) TRAINER_RETURN_IF_ERROR(parse_store(doc["store"], c.store));
  return Status::ok();
}

}  // namespace

DeploymentConfig default_config() {
  DeploymentConfig c;
  c.pools.push_back(PoolConfig{"cpu", "cpu", false, 1, 1});
  return c;
}

Result<DeploymentConfig> parse_config(const std::string& text, const std::string& source) {
  auto parsed = parse_json(text, source);
  if (!parsed.is_ok()) return parsed.status();  // names the line and column
  const json doc = std::move(*parsed);
  if (!doc.is_object()) return invalid_argument(source + ": not a JSON object");
  DeploymentConfig c;
  c.source = source;
  Status st = parse_sections(doc, c);
  if (!st.is_ok()) return st.with_context(source);
  return c;
}

std::string redact_password(const std::string& url) {
  std::string out = url;
  const size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const size_t start = scheme + 3;
    const size_t end = std::min(out.find_first_of("/?#", start), out.size());
    const size_t at = out.rfind('@', end);
    if (at != std::string::npos && at >= start) {
      const size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // A password=VALUE parameter, in a URL's query or a key=value connection string.
  for (size_t pos = out.find("password="); pos != std::string::npos; pos = out.find("password=", pos + 1)) {
    const size_t value = pos + std::string("password=").size();
    const size_t end = std::min(out.find_first_of("& ", value), out.size());
    out.replace(value, end - value, "***");
  }
  return out;
}

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

const JudgeConfig* find_judge(const DeploymentConfig& config, const std::string& name) {
  for (const auto& j : config.judges) {
    if (j.name == name) return &j;
  }
  return nullptr;
}

const char* shape_catalog_name(ShapeCatalog c) { return c == ShapeCatalog::kAdvisory ? "advisory" : "strict"; }

nlohmann::json shapes_to_json(const std::vector<AdmittedShape>& shapes) {
  json rows = json::array();
  for (const auto& s : shapes) rows.push_back({{"method", s.method}, {"precision", s.precision}, {"gpus", s.gpus}});
  return rows;
}

nlohmann::json config_to_json(const DeploymentConfig& c) {
  json out;
  out["source"] = c.source;
  out["baseModels"] = json::array();
  for (const auto& m : c.base_models) {
    json entry = {{"name", m.name}, {"path", m.path}};
    if (!m.shapes.empty()) entry["shapes"] = shapes_to_json(m.shapes);
    out["baseModels"].push_back(std::move(entry));
  }
  out["shapeCatalog"] = shape_catalog_name(c.shape_catalog);
  out["pools"] = json::array();
  for (const auto& p : c.pools) {
    out["pools"].push_back({{"name", p.name},
                            {"accelerator", p.accelerator},
                            {"serving", p.serving},
                            {"declared", p.declared},
                            {"maxClaim", p.max_claim},
                            {"deviceIds", p.device_ids.empty() ? json(nullptr) : json(p.device_ids)}});
    if (!p.windows.empty()) {
      json windows = json::array();
      for (const auto& w : p.windows) {
        windows.push_back({{"devices", w.devices},
                           {"opens", utc_time_text(w.opens_at)},
                           {"closes", utc_time_text(w.closes_at)},
                           {"deviceIds", w.device_ids}});
      }
      out["pools"].back()["windows"] = windows;
    }
    if (p.host_ram_gib > 0) out["pools"].back()["hostRamGiB"] = p.host_ram_gib;
  }
  out["quotas"] = {{"default", c.default_workload_quota}, {"workloads", c.workload_quotas}};
  out["limits"] = {{"maxRequestBytes", c.limits.max_request_bytes},
                   {"maxDatasetBytes", c.limits.max_dataset_bytes},
                   {"cancelGraceSeconds", c.limits.cancel_grace_seconds},
                   {"pauseDeadlineSeconds", c.limits.pause_deadline_seconds},
                   {"maxAdapterRank", c.limits.max_adapter_rank},
                   {"publishDeadlineSeconds", c.limits.publish_deadline_seconds},
                   {"abandonedPublicationSeconds", c.limits.abandoned_publication_seconds},
                   {"jobSilenceSeconds", c.limits.job_silence_seconds},
                   {"attemptBackoffSeconds", c.limits.attempt_backoff_seconds}};
  out["jobBinary"] = c.job_binary;
  out["compute"] = {{"backend", c.compute.backend}};
  if (c.compute.backend == "slurm") {
    const auto& o = c.compute.slurm;
    out["compute"]["slurm"] = {{"partition", o.partition},         {"slurmConf", o.slurm_conf},
                               {"binDir", o.bin_dir},              {"gresName", o.gres_name},
                               {"cpusPerTask", o.cpus_per_task},   {"cpusPerGpu", o.cpus_per_gpu},
                               {"jobNamePrefix", o.job_name_prefix}, {"extraArgs", o.extra_args}};
  }
  if (c.compute.backend == "ray") {
    const auto& o = c.compute.ray;
    out["compute"]["ray"] = {{"address", o.address},
                             {"cpusPerJob", o.cpus_per_job},
                             {"submissionPrefix", o.submission_prefix},
                             {"requestTimeoutSeconds", o.request_timeout_s},
                             {"jobFolder", o.job_folder}};
  }
  out["judges"] = json::array();
  for (const auto& j : c.judges) {
    out["judges"].push_back({{"name", j.name},
                             {"url", j.url},
                             {"model", j.model.empty() ? j.name : j.model},
                             {"apiKeyEnv", j.api_key_env.empty() ? json(nullptr) : json(j.api_key_env)},
                             {"caFile", j.ca_file.empty() ? json(nullptr) : json(j.ca_file)},
                             {"readyTimeoutSeconds", j.ready_timeout_seconds}});
  }
  if (!c.artifact_store.uri.empty()) {
    out["artifactStore"] = {{"uri", c.artifact_store.uri}, {"endpoint", c.artifact_store.endpoint},
                            {"region", c.artifact_store.region}, {"accessKeyEnv", c.artifact_store.access_key_env},
                            {"secretKeyEnv", c.artifact_store.secret_key_env}};
    if (!c.artifact_store.input_cache.empty()) out["artifactStore"]["inputCache"] = c.artifact_store.input_cache;
  } else {
    out["artifactStore"] = {{"uri", nullptr}};
  }
  out["store"] = {{"kind", c.store.kind},
                  {"url", c.store.url.empty() ? json(nullptr) : json(redact_password(c.store.url))}};
  out["telemetry"] = {{"otlpEndpoint", c.telemetry.otlp_endpoint.empty() ? json(nullptr) : json(c.telemetry.otlp_endpoint)},
                      {"otlpIntervalMs", c.telemetry.otlp_interval_ms},
                      {"otlpTracesEndpoint", c.telemetry.otlp_traces_endpoint.empty() ? json(nullptr) : json(c.telemetry.otlp_traces_endpoint)},
                      {"jobSeriesRetentionSeconds", c.telemetry.job_series_retention_seconds}};
  return out;
}

}  // namespace trainer::service

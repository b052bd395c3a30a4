#include "service/config.h"

#include <filesystem>
#include <set>

#include "common/json_parse.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;

Status check_keys(const json& obj, const std::string& where, const std::set<std::string>& allowed) {
  for (const auto& [k, v] : obj.items()) {
    if (!allowed.count(k)) {
      return invalid_argument(where + k + ": unknown field");
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

// judges: [{name, url, model?, apiKeyEnv?, caFile?, readyTimeoutSeconds?}]
Result<std::vector<JudgeConfig>> parse_judges(const json& list) {
  if (!list.is_array()) return invalid_argument("judges: must be a list of {name, url, model, apiKeyEnv}");
  std::vector<JudgeConfig> out;
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& j = list[i];
    const std::string where = "judges[" + std::to_string(i) + "].";
    if (!j.is_object()) return invalid_argument(where.substr(0, where.size() - 1) + ": must be an object");
    TRAINER_RETURN_IF_ERROR(check_keys(j, where, {"name", "url", "model", "apiKeyEnv", "caFile", "readyTimeoutSeconds"}));
    JudgeConfig judge;
    auto name = string_field(j, "name", where, true);
    if (!name.is_ok()) return name.status();
    auto url = string_field(j, "url", where, true);
    if (!url.is_ok()) return url.status();
    if (url->rfind("http://", 0) != 0 && url->rfind("https://", 0) != 0) {
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
  auto fail = [&](const Status& st) { return st.with_context(source); };
  Status st = check_keys(doc, "", {"baseModels", "pools", "quotas", "limits", "jobBinary", "compute", "telemetry", "judges",
                                     "artifactStore"});
  if (!st.is_ok()) return fail(st);

  if (doc.contains("baseModels")) {
    if (!doc["baseModels"].is_array()) return fail(invalid_argument("baseModels: must be a list"));
    std::set<std::string> names;
    for (size_t i = 0; i < doc["baseModels"].size(); ++i) {
      const json& m = doc["baseModels"][i];
      std::string where = "baseModels[" + std::to_string(i) + "].";
      if (!m.is_object()) return fail(invalid_argument(where.substr(0, where.size() - 1) + ": must be an object"));
      if (!(st = check_keys(m, where, {"name", "path"})).is_ok()) return fail(st);
      auto name = string_field(m, "name", where, true);
      if (!name.is_ok()) return fail(name.status());
      auto path = string_field(m, "path", where, true);
      if (!path.is_ok()) return fail(path.status());
      if (!names.insert(*name).second) return fail(invalid_argument(where + "name: '" + *name + "' listed twice"));
      c.base_models.push_back({*name, *path});
    }
  }
  if (doc.contains("pools")) {
    if (!doc["pools"].is_array()) return fail(invalid_argument("pools: must be a list"));
    std::set<std::string> names;
    for (size_t i = 0; i < doc["pools"].size(); ++i) {
      const json& p = doc["pools"][i];
      std::string where = "pools[" + std::to_string(i) + "].";
      if (!p.is_object()) return fail(invalid_argument(where.substr(0, where.size() - 1) + ": must be an object"));
      if (!(st = check_keys(p, where, {"name", "accelerator", "serving", "declared", "maxClaim", "deviceIds"}))
               .is_ok()) {
        return fail(st);
      }
      PoolConfig pool;
      auto name = string_field(p, "name", where, true);
      if (!name.is_ok()) return fail(name.status());
      pool.name = *name;
      auto acc = string_field(p, "accelerator", where, false);
      if (!acc.is_ok()) return fail(acc.status());
      if (!acc->empty()) pool.accelerator = *acc;
      if (p.contains("serving")) {
        if (!p["serving"].is_boolean()) return fail(invalid_argument(where + "serving: must be true or false"));
        pool.serving = p["serving"].get<bool>();
      }
      auto declared = non_negative_int(p, "declared", where, -1);
      if (!declared.is_ok()) return fail(declared.status());
      if (*declared < 0) return fail(invalid_argument(where + "declared: required"));
      pool.declared = static_cast<int>(*declared);
      auto max_claim = non_negative_int(p, "maxClaim", where, pool.declared);
      if (!max_claim.is_ok()) return fail(max_claim.status());
      pool.max_claim = static_cast<int>(*max_claim);
      if (pool.max_claim > pool.declared) {
        return fail(invalid_argument(where + "maxClaim: " + std::to_string(pool.max_claim) +
                                     " is larger than declared " + std::to_string(pool.declared)));
      }
      if (p.contains("deviceIds")) {
        const json& ids = p["deviceIds"];
        if (!ids.is_array()) return fail(invalid_argument(where + "deviceIds: must be a list of device indices"));
        std::set<int> seen;
        for (size_t k = 0; k < ids.size(); ++k) {
          const json& v = ids[k];
          const std::string at = where + "deviceIds[" + std::to_string(k) + "]";
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 4095) {
            return fail(invalid_argument(at + ": must be a device index between 0 and 4095, got " + v.dump()));
          }
          if (!seen.insert(v.get<int>()).second) {
            return fail(invalid_argument(at + ": device " + v.dump() + " listed twice"));
          }
          pool.device_ids.push_back(v.get<int>());
        }
        if (static_cast<int>(pool.device_ids.size()) != pool.declared) {
          return fail(invalid_argument(where + "deviceIds: lists " + std::to_string(pool.device_ids.size()) +
                                       " devices but declared is " + std::to_string(pool.declared)));
        }
      }
      if (!names.insert(pool.name).second) {
        return fail(invalid_argument(where + "name: '" + pool.name + "' listed twice"));
      }
      c.pools.push_back(pool);
    }
  } else {
    c.pools = default_config().pools;
  }
  if (doc.contains("quotas")) {
    const json& q = doc["quotas"];
    if (!q.is_object()) return fail(invalid_argument("quotas: must be an object"));
    if (!(st = check_keys(q, "quotas.", {"default", "workloads"})).is_ok()) return fail(st);
    auto d = non_negative_int(q, "default", "quotas.", c.default_workload_quota);
    if (!d.is_ok()) return fail(d.status());
    c.default_workload_quota = static_cast<int>(*d);
    if (q.contains("workloads")) {
      if (!q["workloads"].is_object()) return fail(invalid_argument("quotas.workloads: must be an object"));
      for (const auto& [name, v] : q["workloads"].items()) {
        auto n = non_negative_int(q["workloads"], name, "quotas.workloads.", 0);
        if (!n.is_ok()) return fail(n.status());
        c.workload_quotas[name] = static_cast<int>(*n);
      }
    }
  }
  if (doc.contains("limits")) {
    const json& l = doc["limits"];
    if (!l.is_object()) return fail(invalid_argument("limits: must be an object"));
    if (!(st = check_keys(l, "limits.", {"maxRequestBytes", "maxDatasetBytes", "cancelGraceSeconds", "pauseDeadlineSeconds",
                                               "maxAdapterRank", "publishDeadlineSeconds"})).is_ok()) {
      return fail(st);
    }
    const int64_t kMaxBytes = int64_t{1} << 34;
    auto a = non_negative_int(l, "maxRequestBytes", "limits.", static_cast<int64_t>(c.limits.max_request_bytes),
                              kMaxBytes);
    if (!a.is_ok()) return fail(a.status());
    auto b = non_negative_int(l, "maxDatasetBytes", "limits.", static_cast<int64_t>(c.limits.max_dataset_bytes),
                              kMaxBytes);
    if (!b.is_ok()) return fail(b.status());
    auto g = non_negative_int(l, "cancelGraceSeconds", "limits.", c.limits.cancel_grace_seconds);
    if (!g.is_ok()) return fail(g.status());
    c.limits.max_request_bytes = static_cast<size_t>(*a);
    c.limits.max_dataset_bytes = static_cast<size_t>(*b);
    c.limits.cancel_grace_seconds = static_cast<int>(*g);
    auto p = non_negative_int(l, "pauseDeadlineSeconds", "limits.", c.limits.pause_deadline_seconds);
    if (!p.is_ok()) return fail(p.status());
    c.limits.pause_deadline_seconds = static_cast<int>(*p);
    auto r = non_negative_int(l, "maxAdapterRank", "limits.", c.limits.max_adapter_rank, 4096);
    if (!r.is_ok()) return fail(r.status());
    c.limits.max_adapter_rank = static_cast<int>(*r);
    auto d = non_negative_int(l, "publishDeadlineSeconds", "limits.", c.limits.publish_deadline_seconds, 86400);
    if (!d.is_ok()) return fail(d.status());
    if (*d < 1) return fail(invalid_argument("limits.publishDeadlineSeconds: must be at least 1"));
    c.limits.publish_deadline_seconds = static_cast<int>(*d);
  }
  if (doc.contains("jobBinary")) {
    auto j = string_field(doc, "jobBinary", "", true);
    if (!j.is_ok()) return fail(j.status());
    c.job_binary = *j;
  }
  if (doc.contains("compute")) {
    const json& cp = doc["compute"];
    if (!cp.is_object()) return fail(invalid_argument("compute: must be an object"));
    if (!(st = check_keys(cp, "compute.", {"backend", "slurm", "ray"})).is_ok()) return fail(st);
    auto b = string_field(cp, "backend", "compute.", false);
    if (!b.is_ok()) return fail(b.status());
    if (!b->empty()) c.compute.backend = *b;
    if (c.compute.backend != "local" && c.compute.backend != "slurm" && c.compute.backend != "ray") {
      return fail(invalid_argument("compute.backend: '" + c.compute.backend +
                                   "' is not a compute backend of this build; use local, slurm or ray"));
    }
    for (const char* section : {"slurm", "ray"}) {
      if (cp.contains(section) && c.compute.backend != section) {
        return fail(invalid_argument(std::string("compute.") + section + ": set, but compute.backend is " +
                                     c.compute.backend));
      }
    }
    if (cp.contains("slurm")) {
      const json& sl = cp["slurm"];
      const std::string where = "compute.slurm.";
      if (!sl.is_object()) return fail(invalid_argument("compute.slurm: must be an object"));
      if (!(st = check_keys(sl, where, {"partition", "slurmConf", "binDir", "gresName", "cpusPerTask", "cpusPerGpu",
                                        "jobNamePrefix", "extraArgs"}))
               .is_ok()) {
        return fail(st);
      }
      backend::SlurmOptions& o = c.compute.slurm;
      for (auto [key, field] : {std::pair{"partition", &o.partition}, std::pair{"slurmConf", &o.slurm_conf},
                                std::pair{"binDir", &o.bin_dir}, std::pair{"gresName", &o.gres_name},
                                std::pair{"jobNamePrefix", &o.job_name_prefix}}) {
        auto v = string_field(sl, key, where, false);
        if (!v.is_ok()) return fail(v.status());
        if (!v->empty()) *field = *v;
      }
      auto cpt = non_negative_int(sl, "cpusPerTask", where, o.cpus_per_task, 4096);
      if (!cpt.is_ok()) return fail(cpt.status());
      auto cpg = non_negative_int(sl, "cpusPerGpu", where, o.cpus_per_gpu, 4096);
      if (!cpg.is_ok()) return fail(cpg.status());
      if (*cpt == 0) return fail(invalid_argument(where + "cpusPerTask: must be at least 1"));
      if (*cpg == 0) return fail(invalid_argument(where + "cpusPerGpu: must be at least 1"));
      o.cpus_per_task = static_cast<int>(*cpt);
      o.cpus_per_gpu = static_cast<int>(*cpg);
      if (sl.contains("extraArgs")) {
        const json& ea = sl["extraArgs"];
        if (!ea.is_array()) return fail(invalid_argument(where + "extraArgs: must be a list of sbatch arguments"));
        for (size_t i = 0; i < ea.size(); ++i) {
          if (!ea[i].is_string() || ea[i].get<std::string>().rfind("--", 0) != 0) {
            return fail(invalid_argument(where + "extraArgs[" + std::to_string(i) +
                                         "]: must be an sbatch option starting with --, got " + ea[i].dump()));
          }
          o.extra_args.push_back(ea[i].get<std::string>());
        }
      }
    }
    if (c.compute.backend == "ray") {
      const std::string where = "compute.ray.";
      if (!cp.contains("ray") || !cp["ray"].is_object()) {
        return fail(invalid_argument("compute.ray: required for the ray backend (an object with address)"));
      }
      const json& ry = cp["ray"];
      if (!(st = check_keys(ry, where, {"address", "cpusPerJob", "submissionPrefix", "requestTimeoutSeconds", "jobFolder"}))
               .is_ok()) {
        return fail(st);
      }
      backend::RayOptions& o = c.compute.ray;
      auto addr = string_field(ry, "address", where, true);
      if (!addr.is_ok()) return fail(addr.status());
      if (addr->rfind("http://", 0) != 0 && addr->rfind("https://", 0) != 0) {
        return fail(invalid_argument(where + "address: '" + *addr +
                                     "' must be the dashboard's http:// URL, e.g. http://127.0.0.1:8265"));
      }
      o.address = *addr;
      auto prefix = string_field(ry, "submissionPrefix", where, false);
      if (!prefix.is_ok()) return fail(prefix.status());
      if (!prefix->empty()) o.submission_prefix = *prefix;
      auto cpus = non_negative_int(ry, "cpusPerJob", where, 1, 4096);
      if (!cpus.is_ok()) return fail(cpus.status());
      o.cpus_per_job = static_cast<double>(*cpus);
      auto timeout = non_negative_int(ry, "requestTimeoutSeconds", where, o.request_timeout_s, 600);
      if (!timeout.is_ok()) return fail(timeout.status());
      if (*timeout == 0) return fail(invalid_argument(where + "requestTimeoutSeconds: must be at least 1"));
      o.request_timeout_s = static_cast<int>(*timeout);
      auto job_folder = string_field(ry, "jobFolder", where, false);
      if (!job_folder.is_ok()) return fail(job_folder.status());
      if (!job_folder->empty() && (*job_folder)[0] != '/') {
        return fail(invalid_argument(where + "jobFolder: '" + *job_folder + "' must be an absolute path on the nodes"));
      }
      o.job_folder = *job_folder;
    }
  }
  if (doc.contains("telemetry")) {
    const json& t = doc["telemetry"];
    if (!t.is_object()) return fail(invalid_argument("telemetry: must be an object"));
    if (!(st = check_keys(t, "telemetry.", {"otlpEndpoint", "otlpIntervalMs", "jobSeriesRetentionSeconds"})).is_ok()) {
      return fail(st);
    }
    auto e = string_field(t, "otlpEndpoint", "telemetry.", false);
    if (!e.is_ok()) return fail(e.status());
    if (!e->empty() && e->rfind("http://", 0) != 0 && e->rfind("https://", 0) != 0) {
      return fail(invalid_argument("telemetry.otlpEndpoint: '" + *e + "' must be an http:// or https:// URL"));
    }
    while (!e->empty() && e->back() == '/') e->pop_back();
    c.telemetry.otlp_endpoint = *e;
    auto i = non_negative_int(t, "otlpIntervalMs", "telemetry.", c.telemetry.otlp_interval_ms, 3600000);
    if (!i.is_ok()) return fail(i.status());
    if (*i == 0) return fail(invalid_argument("telemetry.otlpIntervalMs: must be at least 1"));
    c.telemetry.otlp_interval_ms = static_cast<int>(*i);
    auto r = non_negative_int(t, "jobSeriesRetentionSeconds", "telemetry.",
                              static_cast<int64_t>(c.telemetry.job_series_retention_seconds), 7 * 86400);
    if (!r.is_ok()) return fail(r.status());
    c.telemetry.job_series_retention_seconds = static_cast<double>(*r);
  }
  if (doc.contains("judges")) {
    auto judges = parse_judges(doc["judges"]);
    if (!judges.is_ok()) return fail(judges.status());
    c.judges = std::move(*judges);
  }
  if (doc.contains("artifactStore")) {
    const json& a = doc["artifactStore"];
    const std::string where = "artifactStore.";
    if (!a.is_object()) return fail(invalid_argument("artifactStore: must be an object"));
    if (!(st = check_keys(a, where, {"uri", "endpoint", "region", "accessKeyEnv", "secretKeyEnv", "inputCache"})).is_ok()) return fail(st);
    ArtifactStoreConfig& s = c.artifact_store;
    auto uri = string_field(a, "uri", where, true);
    if (!uri.is_ok()) return fail(uri.status());
    if (uri->rfind("s3://", 0) != 0 || uri->size() < 8) {
      return fail(invalid_argument(where + "uri: '" + *uri + "' must be s3://BUCKET[/PREFIX] (leave artifactStore out "
                                   "for the data directory's folder)"));
    }
    s.uri = *uri;
    auto endpoint = string_field(a, "endpoint", where, true);
    if (!endpoint.is_ok()) return fail(endpoint.status());
    if (endpoint->rfind("http://", 0) != 0 && endpoint->rfind("https://", 0) != 0) {
      return fail(invalid_argument(where + "endpoint: '" + *endpoint + "' must be an http:// or https:// URL"));
    }
    s.endpoint = *endpoint;
    for (auto [key, target] : {std::pair{"region", &s.region}, std::pair{"accessKeyEnv", &s.access_key_env},
                               std::pair{"secretKeyEnv", &s.secret_key_env}, std::pair{"inputCache", &s.input_cache}}) {
      auto v = string_field(a, key, where, false);
      if (!v.is_ok()) return fail(v.status());
      if (!v->empty()) *target = *v;
    }
    if (!s.input_cache.empty() && s.input_cache.front() != '/') {
      return fail(invalid_argument(where + "inputCache: '" + s.input_cache +
                                   "' must be an absolute folder path on the cluster's nodes"));
    }
  }
  return c;
}

const JudgeConfig* find_judge(const DeploymentConfig& config, const std::string& name) {
  for (const auto& j : config.judges) {
    if (j.name == name) return &j;
  }
  return nullptr;
}

nlohmann::json config_to_json(const DeploymentConfig& c) {
  json out;
  out["source"] = c.source;
  out["baseModels"] = json::array();
  for (const auto& m : c.base_models) out["baseModels"].push_back({{"name", m.name}, {"path", m.path}});
  out["pools"] = json::array();
  for (const auto& p : c.pools) {
    out["pools"].push_back({{"name", p.name},
                            {"accelerator", p.accelerator},
                            {"serving", p.serving},
                            {"declared", p.declared},
                            {"maxClaim", p.max_claim},
                            {"deviceIds", p.device_ids.empty() ? json(nullptr) : json(p.device_ids)}});
  }
  out["quotas"] = {{"default", c.default_workload_quota}, {"workloads", c.workload_quotas}};
  out["limits"] = {{"maxRequestBytes", c.limits.max_request_bytes},
                   {"maxDatasetBytes", c.limits.max_dataset_bytes},
                   {"cancelGraceSeconds", c.limits.cancel_grace_seconds},
                   {"pauseDeadlineSeconds", c.limits.pause_deadline_seconds},
                   {"maxAdapterRank", c.limits.max_adapter_rank},
                   {"publishDeadlineSeconds", c.limits.publish_deadline_seconds}};
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
  out["telemetry"] = {{"otlpEndpoint", c.telemetry.otlp_endpoint.empty() ? json(nullptr) : json(c.telemetry.otlp_endpoint)},
                      {"otlpIntervalMs", c.telemetry.otlp_interval_ms},
                      {"jobSeriesRetentionSeconds", c.telemetry.job_series_retention_seconds}};
  return out;
}

}  // namespace trainer::service

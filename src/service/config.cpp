#include "service/config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "common/json_parse.h"
#include "common/spelling.h"
#include "common/token_file.h"
#include "common/utc_time.h"
#include "service/config_fields.h"
#include "telemetry/tracing.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;
using namespace config_fields;


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


// quotas: {default?, workloads?: {NAME: devices}, storageBytes?}
Status parse_quotas(const json& q, DeploymentConfig& c) {
  if (!q.is_object()) return invalid_argument("quotas: must be an object");
  TRAINER_RETURN_IF_ERROR(check_keys(q, "quotas.", {"default", "workloads", "storageBytes"}));
  TRAINER_ASSIGN_OR_RETURN(int64_t default_quota,
                           non_negative_int(q, "default", "quotas.", c.default_workload_quota));
  c.default_workload_quota = static_cast<int>(default_quota);
  TRAINER_ASSIGN_OR_RETURN(c.default_storage_quota_bytes,
                           non_negative_int(q, "storageBytes", "quotas.", c.default_storage_quota_bytes, int64_t{1} << 50));
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
                                      "attemptBackoffSeconds", "requestsPerSecond", "requestBurst",
                                      "longPollsPerToken", "workloadRequestsPerSecond", "workloadRequestBurst"}));
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
  TRAINER_ASSIGN_OR_RETURN(int64_t rate, field("requestsPerSecond", limits.requests_per_second));
  limits.requests_per_second = static_cast<int>(rate);
  TRAINER_ASSIGN_OR_RETURN(int64_t burst, field("requestBurst", limits.request_burst));
  limits.request_burst = static_cast<int>(burst);
  TRAINER_ASSIGN_OR_RETURN(int64_t polls, field("longPollsPerToken", limits.long_polls_per_token));
  limits.long_polls_per_token = static_cast<int>(polls);
  TRAINER_ASSIGN_OR_RETURN(int64_t workload_rate, field("workloadRequestsPerSecond", limits.workload_requests_per_second));
  limits.workload_requests_per_second = static_cast<int>(workload_rate);
  TRAINER_ASSIGN_OR_RETURN(int64_t workload_burst, field("workloadRequestBurst", limits.workload_request_burst));
  limits.workload_request_burst = static_cast<int>(workload_burst);
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


// The document's sections, in the order they are checked; the first error wins.
Status parse_sections(const json& doc, DeploymentConfig& c) {
  TRAINER_RETURN_IF_ERROR(check_keys(doc, "", {"baseModels", "shapeCatalog", "pools", "quotas", "limits", "jobBinary",
                                               "compute", "telemetry", "judges", "outbound", "paths", "artifactStore", "store",
                                               "tls"}));
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
  if (doc.contains("outbound")) {
    TRAINER_RETURN_IF_ERROR(check_keys(doc["outbound"], "outbound", {"allow", "proxy"}));
    auto policy = parse_outbound_policy(doc["outbound"].value("allow", json::array()), "outbound.allow");
    if (!policy.is_ok()) return invalid_argument(policy.status().field() + ": " + policy.status().message());
    c.outbound = std::move(*policy);
    auto proxy = parse_outbound_proxy(doc["outbound"].value("proxy", json("")), "outbound.proxy");
    if (!proxy.is_ok()) return invalid_argument(proxy.status().field() + ": " + proxy.status().message());
    c.outbound.proxy = std::move(*proxy);
    for (auto& j : c.judges) j.proxy = c.outbound.proxy;
  }
  if (doc.contains("paths")) {
    TRAINER_RETURN_IF_ERROR(check_keys(doc["paths"], "paths", {"allow"}));
    auto folders = parse_allowed_folders(doc["paths"].value("allow", json::array()), "paths.allow");
    if (!folders.is_ok()) return invalid_argument(folders.status().field() + ": " + folders.status().message());
    c.paths_allow = std::move(*folders);
  }
  if (doc.contains("artifactStore")) {
    TRAINER_RETURN_IF_ERROR(parse_artifact_store(doc["artifactStore"], c.artifact_store));
  }
  if (doc.contains("store")) TRAINER_RETURN_IF_ERROR(parse_store(doc["store"], c.store));
  if (doc.contains("tls")) {
    const json& t = doc["tls"];
    if (!t.is_object()) return invalid_argument("tls: must be an object {certFile, keyFile, caFile}");
    TRAINER_RETURN_IF_ERROR(check_keys(t, "tls.", {"certFile", "keyFile", "caFile"}));
    TRAINER_ASSIGN_OR_RETURN(c.tls.cert_file, string_field(t, "certFile", "tls.", false));
    TRAINER_ASSIGN_OR_RETURN(c.tls.key_file, string_field(t, "keyFile", "tls.", false));
    TRAINER_ASSIGN_OR_RETURN(c.tls.ca_file, string_field(t, "caFile", "tls.", false));
  }
  return Status::ok();
}

}  // namespace

DeploymentConfig default_config() {
  DeploymentConfig c;
  c.pools.push_back(PoolConfig{"cpu", "cpu", false, 1, 1});
  return c;
}

PathPolicy confined_paths(const DeploymentConfig& config, const std::string& data_dir) {
  PathPolicy policy;
  if (config.paths_allow) {
    policy.allow = *config.paths_allow;
  } else {
    const char* home = std::getenv("HOME");
    const char* tmp = std::getenv("TMPDIR");
    if (home != nullptr && home[0] == '/') policy.allow.emplace_back(home);
    policy.allow.emplace_back(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp");
  }
  if (!data_dir.empty()) {
    const std::string data = std::filesystem::absolute(data_dir).string();
    policy.deny.push_back(data);
    policy.except.push_back((std::filesystem::path(data) / "bundles").string());
  }
  // The token file's folder (the local admin token), under the default's home folder.
  const std::string tokens = token_file_path();
  if (!tokens.empty()) policy.deny.push_back(std::filesystem::path(tokens).parent_path().string());
  return policy;
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
  out["quotas"] = {{"default", c.default_workload_quota}, {"workloads", c.workload_quotas},
                   {"storageBytes", c.default_storage_quota_bytes}};
  out["limits"] = {{"maxRequestBytes", c.limits.max_request_bytes},
                   {"maxDatasetBytes", c.limits.max_dataset_bytes},
                   {"cancelGraceSeconds", c.limits.cancel_grace_seconds},
                   {"pauseDeadlineSeconds", c.limits.pause_deadline_seconds},
                   {"maxAdapterRank", c.limits.max_adapter_rank},
                   {"publishDeadlineSeconds", c.limits.publish_deadline_seconds},
                   {"abandonedPublicationSeconds", c.limits.abandoned_publication_seconds},
                   {"jobSilenceSeconds", c.limits.job_silence_seconds},
                   {"attemptBackoffSeconds", c.limits.attempt_backoff_seconds},
                   {"requestsPerSecond", c.limits.requests_per_second},
                   {"requestBurst", c.limits.request_burst},
                   {"longPollsPerToken", c.limits.long_polls_per_token},
                   {"workloadRequestsPerSecond", c.limits.workload_requests_per_second},
                   {"workloadRequestBurst", c.limits.workload_request_burst}};
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
  out["outbound"] = {{"allow", outbound_policy_json(c.outbound)}, {"proxy", c.outbound.proxy}};
  out["paths"] = {{"allow", c.paths.allow.empty() && c.paths_allow ? json(*c.paths_allow) : json(c.paths.allow)}};
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
  if (c.store.kind == "postgres") out["store"]["poolSize"] = c.store.pool_size;
  out["telemetry"] = {{"otlpEndpoint", c.telemetry.otlp_endpoint.empty() ? json(nullptr) : json(c.telemetry.otlp_endpoint)},
                      {"otlpIntervalMs", c.telemetry.otlp_interval_ms},
                      {"otlpTracesEndpoint", c.telemetry.otlp_traces_endpoint.empty() ? json(nullptr) : json(c.telemetry.otlp_traces_endpoint)},
                      {"jobSeriesRetentionSeconds", c.telemetry.job_series_retention_seconds}};
  return out;
}

}  // namespace trainer::service

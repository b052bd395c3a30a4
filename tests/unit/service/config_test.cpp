// The deployment configuration and the phase table.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "common/token_file.h"
#include "service/config.h"
#include "service/phases.h"

namespace trainer::service {
namespace {

TEST(DeploymentConfig, TheEmbeddedDefaultHasOneCpuPool) {
  DeploymentConfig c = default_config();
  ASSERT_EQ(c.pools.size(), 1u);
  EXPECT_EQ(c.pools[0].accelerator, "cpu");
  EXPECT_EQ(c.pools[0].declared, 1);
  EXPECT_FALSE(c.pools[0].serving);
  EXPECT_TRUE(c.base_models.empty());
}

TEST(DeploymentConfig, ParsesEveryField) {
  auto c = parse_config(R"({
    "baseModels": [{"name": "Qwen/Qwen3-0.6B", "path": "/models/qwen3"}],
    "pools": [{"name": "training", "accelerator": "nvidia-h100-80gb", "declared": 8, "maxClaim": 4,
               "deviceIds": [7, 6, 5, 4, 3, 2, 1, 0]},
              {"name": "serving", "accelerator": "nvidia-l4", "serving": true, "declared": 2}],
    "quotas": {"default": 2, "workloads": {"triage": 4}},
    "limits": {"maxRequestBytes": 1000, "maxDatasetBytes": 2000000000, "cancelGraceSeconds": 3},
    "jobBinary": "/opt/trainer-job"})", "deploy.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->base_models[0].path, "/models/qwen3");
  EXPECT_EQ(c->pools[0].max_claim, 4);
  EXPECT_EQ(c->pools[1].max_claim, 2);  // defaults to declared
  EXPECT_EQ(c->pools[0].device_ids, (std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_TRUE(c->pools[1].device_ids.empty());  // 0..declared-1
  EXPECT_TRUE(c->pools[1].serving);
  EXPECT_EQ(c->default_workload_quota, 2);
  EXPECT_EQ(c->workload_quotas.at("triage"), 4);
  EXPECT_EQ(c->limits.max_dataset_bytes, 2000000000u);
  EXPECT_EQ(c->job_binary, "/opt/trainer-job");
  EXPECT_EQ(c->source, "deploy.json");
}

TEST(DeploymentConfig, ErrorsNameTheFileAndTheField) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {R"({"pool": []})", "deploy.json: pool: unknown field; did you mean pools?"},
      {R"({"baseModels": [{"name": "x", "pth": "/a"}]})", "deploy.json: baseModels[0].pth: unknown field; did you mean path?"},
      {R"({"pools": [{"name": "a", "declared": -1}]})",
       "deploy.json: pools[0].declared: must be an integer between 0 and 1000000, got -1"},
      {R"({"pools": [{"name": "a", "declared": 1, "maxClaim": 2}]})",
       "deploy.json: pools[0].maxClaim: 2 is larger than declared 1"},
      {R"({"baseModels": [{"name": "x"}]})", "deploy.json: baseModels[0].path: required"},
      {R"({"baseModels": [{"name": "x", "path": "/a"}, {"name": "x", "path": "/b"}]})",
       "deploy.json: baseModels[1].name: 'x' listed twice"},
      {"[1, 2]", "deploy.json: not a JSON object"},
      {R"({"pools": [{"name": "g", "declared": 2, "deviceIds": [0]}]})",
       "deploy.json: pools[0].deviceIds: lists 1 devices but declared is 2"},
      {R"({"pools": [{"name": "g", "declared": 2, "deviceIds": [1, 1]}]})",
       "deploy.json: pools[0].deviceIds[1]: device 1 listed twice"},
      {R"({"pools": [{"name": "g", "declared": 1, "deviceIds": [-1]}]})",
       "deploy.json: pools[0].deviceIds[0]: must be a device index between 0 and 4095, got -1"},
      {R"({"pools": [{"name": "g", "declared": 1, "windows": [{"devices": 2, "opens": "2026-01-31T18:00:00Z"}]}]})",
       "deploy.json: pools[0].windows[0].closes: required (a UTC time, e.g. 2026-01-31T18:00:00Z)"},
      {R"({"pools": [{"name": "g", "declared": 1, "windows": [{"devices": 2, "opens": "tomorrow",
           "closes": "2026-01-31T18:00:00Z"}]}]})",
       "deploy.json: pools[0].windows[0].opens: \"tomorrow\" is not a UTC time; write YYYY-MM-DDTHH:MM:SSZ (or an "
       "offset such as +02:00)"},
      {R"({"pools": [{"name": "g", "declared": 1, "windows": [{"devices": 2, "opens": "2026-02-30T18:00:00Z",
           "closes": "2026-03-01T18:00:00Z"}]}]})",
       "deploy.json: pools[0].windows[0].opens: \"2026-02-30T18:00:00Z\" is not a UTC time; write "
       "YYYY-MM-DDTHH:MM:SSZ (or an offset such as +02:00)"},
      {R"({"pools": [{"name": "g", "declared": 1, "windows": [{"devices": 2, "opens": "2026-01-31T18:00:00Z",
           "closes": "2026-01-31T17:00:00Z"}]}]})",
       "deploy.json: pools[0].windows[0].closes: \"2026-01-31T17:00:00Z\" is not after opens \"2026-01-31T18:00:00Z\""},
      {R"({"pools": [{"name": "g", "declared": 1, "windows": [{"devices": 0, "opens": "2026-01-31T18:00:00Z",
           "closes": "2026-01-31T19:00:00Z"}]}]})",
       "deploy.json: pools[0].windows[0].devices: must be at least 1 (the devices the window adds)"},
      {R"({"pools": [{"name": "g", "declared": 1, "windows": [{"devices": 1, "opens": "2026-01-31T18:00:00Z",
           "closes": "2026-01-31T19:00:00Z", "deviceIds": [0]}]}]})",
       "deploy.json: pools[0].windows[0].deviceIds[0]: device 0 is already the pool's or another window's"},
      {R"({"pools": [{"name": "g", "declared": 1, "windows": [{"devices": 1, "open": "2026-01-31T18:00:00Z"}]}]})",
       "deploy.json: pools[0].windows[0].open: unknown field; did you mean opens?"},
      {R"({"pools": [{"name": "g", "declared": 1, "windows": {}}]})",
       "deploy.json: pools[0].windows: must be a list of {devices, opens, closes}"},
      {R"({"pools": [{"name": "g", "declared": 1, "maxClaim": 4, "windows": [{"devices": 2,
           "opens": "2026-01-31T18:00:00Z", "closes": "2026-01-31T19:00:00Z"}]}]})",
       "deploy.json: pools[0].maxClaim: 4 is larger than declared 1 with its windows' devices (at most 3)"},
      {R"({"pools": [{"name": "g", "declared": 1, "hostRamGiB": 0}]})",
       "deploy.json: pools[0].hostRamGiB: must be a positive number of GiB (a node's host memory), got 0"},
      {R"({"compute": {"backend": "pbs"}})",
       "deploy.json: compute.backend: 'pbs' is not a compute backend of this build; use local, slurm or ray"},
      {R"({"compute": {"backend": "ray"}})",
       "deploy.json: compute.ray: required for the ray backend (an object with address)"},
      {R"({"compute": {"backend": "ray", "ray": {"address": "127.0.0.1:8265"}}})",
       "deploy.json: compute.ray.address: '127.0.0.1:8265' must be the dashboard's http:// URL, e.g. "
       "http://127.0.0.1:8265"},
      {R"({"compute": {"backend": "local", "slurm": {}}})", "deploy.json: compute.slurm: set, but compute.backend is local"},
      {R"({"compute": {"backend": "slurm", "slurm": {"extraArgs": ["-A x"]}}})",
       "deploy.json: compute.slurm.extraArgs[0]: must be an sbatch option starting with --, got \"-A x\""},
      {R"({"compute": {"backend": "slurm", "slurm": {"partitions": "x"}}})",
       "deploy.json: compute.slurm.partitions: unknown field; did you mean partition?"},
      {R"({"telemetry": {"otlpEndpoint": "collector:4318"}})",
       "deploy.json: telemetry.otlpEndpoint: 'collector:4318' must be an http:// or https:// URL"},
      {R"({"telemetry": {"otlpTracesEndpoint": "https://collector:4318"}})",
       "deploy.json: telemetry.otlpTracesEndpoint: OTLP traces endpoint 'https://collector:4318' must start with "
       "http:// (e.g. http://collector:4318/v1/traces)"},
  };
  for (const auto& c : cases) {
    auto r = parse_config(c.text, "deploy.json");
    ASSERT_FALSE(r.is_ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.message);
  }
}

TEST(DeploymentConfig, TheStoreIsSqliteInTheDataFolderUnlessItSaysPostgres) {
  auto bare = parse_config("{}", "deploy.json");
  ASSERT_TRUE(bare.is_ok()) << bare.status().to_string();
  EXPECT_EQ(bare->store.kind, "sqlite");
  EXPECT_EQ(bare->store.url, "");
  auto pg = parse_config(R"({"store": {"kind": "postgres", "url": "postgresql://trainer:s3cret@db:5432/trainer"}})",
                         "deploy.json");
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  EXPECT_EQ(pg->store.kind, "postgres");
  EXPECT_EQ(pg->store.url, "postgresql://trainer:s3cret@db:5432/trainer");
  const auto shown = config_to_json(*pg);
  EXPECT_EQ(shown["store"]["kind"], "postgres");
  EXPECT_EQ(shown["store"]["url"], "postgresql://trainer:***@db:5432/trainer") << "info never shows the password";
  EXPECT_EQ(pg->store.pool_size, 8) << "a pool of 8 connections unless it says";
  EXPECT_EQ(shown["store"]["poolSize"], 8);
  auto sized = parse_config(R"({"store": {"kind": "postgres", "url": "postgresql://db/x", "poolSize": 32}})",
                            "deploy.json");
  ASSERT_TRUE(sized.is_ok()) << sized.status().to_string();
  EXPECT_EQ(sized->store.pool_size, 32);
  auto file = parse_config(R"({"store": {"kind": "sqlite", "url": "/var/lib/trainer/state.db"}})", "deploy.json");
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ(file->store.url, "/var/lib/trainer/state.db");
}

TEST(DeploymentConfig, BadStoreSettingsAreRefusedByField) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {R"({"store": {"kind": "mysql"}})",
       "deploy.json: store.kind: 'mysql' is not a store of this build; use sqlite or postgres"},
      {R"({"store": {"kind": "postgres"}})",
       "deploy.json: store.url: required for kind postgres (postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE)"},
      {R"({"store": {"kind": "postgres", "url": "mysql://u:pw@db/x"}})",
       "deploy.json: store.url: 'mysql://u:***@db/x' must be a postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE URL"},
      {R"({"store": {"url": "postgresql://db/x"}})",
       "deploy.json: store.url: 'postgresql://db/x' is a URL; for kind sqlite it is the database file's path (leave "
       "it out for DATA/state.db), or set kind to postgres"},
      {R"({"store": {"kind": "postgres", "uri": "postgresql://db/x"}})",
       "deploy.json: store.uri: unknown field; did you mean url?"},
      {R"({"store": "postgres"})", "deploy.json: store: must be an object {kind, url, poolSize}"},
      {R"({"store": {"kind": "postgres", "url": "postgresql://db/x", "poolSize": 0}})",
       "deploy.json: store.poolSize: must be an integer between 1 and 64 (connections), got 0"},
      {R"({"store": {"kind": "postgres", "url": "postgresql://db/x", "poolSize": 65}})",
       "deploy.json: store.poolSize: must be an integer between 1 and 64 (connections), got 65"},
      {R"({"store": {"kind": "postgres", "url": "postgresql://db/x", "poolSize": "8"}})",
       "deploy.json: store.poolSize: must be an integer between 1 and 64 (connections), got \"8\""},
      {R"({"store": {"poolSize": 4}})",
       "deploy.json: store.poolSize: only for kind postgres (SQLite keeps one connection)"},
      {R"({"store": {"kind": ""}})", "deploy.json: store.kind: must be a non-empty string, got \"\""},
  };
  for (const auto& c : cases) {
    auto r = parse_config(c.text, "deploy.json");
    ASSERT_FALSE(r.is_ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.message);
  }
}

TEST(DeploymentConfig, PasswordsAreRedactedFromUrls) {
  EXPECT_EQ(redact_password("postgresql://u:p%40ss@h:5432/d?sslmode=require"), "postgresql://u:***@h:5432/d?sslmode=require");
  EXPECT_EQ(redact_password("postgresql://u@h/d?password=x&sslmode=require"), "postgresql://u@h/d?password=***&sslmode=require");
  EXPECT_EQ(redact_password("postgresql://h:5432/d"), "postgresql://h:5432/d");
}

TEST(DeploymentConfig, CapacityWindowsAddDevicesOnlyWhileOpen) {
  // 1 device always; +2 from 18:00 to 20:00; +1 from 19:00 to 21:00 (overlapping: 4 at 19:00).
  auto r = parse_config(R"({"pools": [{"name": "g", "declared": 1, "hostRamGiB": 64, "windows": [
      {"devices": 2, "opens": "2026-01-31T18:00:00Z", "closes": "2026-01-31T20:00:00Z"},
      {"devices": 1, "opens": "2026-01-31T21:00:00+02:00", "closes": "2026-01-31T21:00:00Z"}]}]})",
                        "deploy.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const PoolConfig& p = r->pools.at(0);
  ASSERT_EQ(p.windows.size(), 2u);
  const double six_pm = 1769882400;  // 2026-01-31T18:00:00Z
  EXPECT_EQ(p.windows[0].opens_at, six_pm);
  EXPECT_EQ(p.windows[1].opens_at, six_pm + 3600);  // 21:00 at +02:00 is 19:00Z
  EXPECT_EQ(p.windows[0].device_ids, (std::vector<int>{1, 2}));  // after the pool's own 0
  EXPECT_EQ(p.windows[1].device_ids, (std::vector<int>{3}));
  EXPECT_EQ(p.max_claim, 4);  // the peak, by default
  EXPECT_EQ(p.host_ram_gib, 64);
  EXPECT_EQ(declared_at(p, six_pm - 1), 1);
  EXPECT_EQ(declared_at(p, six_pm), 3);        // opens is included
  EXPECT_EQ(declared_at(p, six_pm + 3600), 4);
  EXPECT_EQ(declared_at(p, six_pm + 7200), 2);  // closes is excluded
  EXPECT_EQ(declared_at(p, six_pm + 3 * 3600), 1);
  EXPECT_EQ(device_ids_at(p, six_pm + 7200), (std::vector<int>{0, 3}));
  EXPECT_EQ(peak_from(p, 0), 4);
  EXPECT_EQ(peak_from(p, six_pm + 7200), 2);  // the first window has ended
  EXPECT_EQ(peak_from(p, six_pm + 3 * 3600), 1);
  const auto shown = config_to_json(*r)["pools"][0]["windows"][1];
  EXPECT_EQ(shown["opens"], "2026-01-31T19:00:00Z");
  EXPECT_EQ(shown["deviceIds"], nlohmann::json::array({3}));
}

TEST(DeploymentConfig, ASyntaxErrorNamesLineAndColumn) {
  auto r = parse_config("{\n  \"pools\": [,]\n}", "deploy.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("deploy.json: not valid JSON at line 2, column"), std::string::npos)
      << r.status().message();
}

TEST(DeploymentConfig, ComputeAndTelemetrySections) {
  auto r = parse_config(R"({"compute": {"backend": "local"},
                            "telemetry": {"otlpEndpoint": "http://collector:4318/", "otlpIntervalMs": 1000}})",
                        "deploy.json");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->compute.backend, "local");
  EXPECT_EQ(r->telemetry.otlp_endpoint, "http://collector:4318");
  EXPECT_EQ(r->telemetry.otlp_interval_ms, 1000);
  EXPECT_EQ(r->telemetry.otlp_traces_endpoint, "");  // no traces unless named
  auto traced = parse_config(R"({"telemetry": {"otlpTracesEndpoint": "http://collector:4318/"}})", "deploy.json");
  ASSERT_TRUE(traced.is_ok()) << traced.status().to_string();
  EXPECT_EQ(traced->telemetry.otlp_traces_endpoint, "http://collector:4318/v1/traces");
  EXPECT_EQ(default_config().compute.backend, "local");
  auto slurm = parse_config(R"({"compute": {"backend": "slurm", "slurm": {"partition": "gpu", "slurmConf": "/etc/s.conf",
                                "cpusPerGpu": 8, "extraArgs": ["--account=ml"]}}})", "deploy.json");
  ASSERT_TRUE(slurm.is_ok()) << slurm.status().to_string();
  EXPECT_EQ(slurm->compute.slurm.partition, "gpu");
  EXPECT_EQ(slurm->compute.slurm.slurm_conf, "/etc/s.conf");
  EXPECT_EQ(slurm->compute.slurm.cpus_per_gpu, 8);
  EXPECT_EQ(slurm->compute.slurm.extra_args, std::vector<std::string>{"--account=ml"});
  auto ray = parse_config(R"({"compute": {"backend": "ray", "ray": {"address": "http://10.0.0.1:8265/", "cpusPerJob": 2}}})",
                          "deploy.json");
  ASSERT_TRUE(ray.is_ok()) << ray.status().to_string();
  EXPECT_EQ(ray->compute.ray.address, "http://10.0.0.1:8265/");
  EXPECT_EQ(ray->compute.ray.cpus_per_job, 2);
  EXPECT_EQ(default_config().telemetry.otlp_endpoint, "");
}

TEST(DeploymentConfig, TheArtifactStoresInputCacheIsAnAbsoluteFolderOnTheNodes) {
  auto c = parse_config(R"({"artifactStore": {"uri": "s3://bucket/p", "endpoint": "http://s3:8333",
                                              "inputCache": "/scratch/trainer-inputs"}})",
                        "deploy.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->artifact_store.input_cache, "/scratch/trainer-inputs");
  EXPECT_EQ(default_config().artifact_store.input_cache, "");
  auto relative = parse_config(R"({"artifactStore": {"uri": "s3://bucket/p", "endpoint": "http://s3:8333",
                                                     "inputCache": "cache"}})",
                               "deploy.json");
  ASSERT_FALSE(relative.is_ok());
  EXPECT_NE(relative.status().message().find("artifactStore.inputCache: 'cache' must be an absolute folder path"),
            std::string::npos)
      << relative.status().message();
}

TEST(DeploymentConfig, PathsAllowIsTheOperatorsElseHomeAndTmpNeverTheDataFolder) {
  auto c = parse_config(R"({"paths": {"allow": ["/srv/scoring"]}})", "deploy.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  PathPolicy p = confined_paths(*c, "/var/lib/trainer");
  EXPECT_EQ(p.allow, std::vector<std::string>{"/srv/scoring"});
  ASSERT_FALSE(p.deny.empty());
  EXPECT_EQ(p.deny[0], "/var/lib/trainer");
  EXPECT_EQ(p.except, std::vector<std::string>{"/var/lib/trainer/bundles"});
  // The token file's folder is never allowed either.
  EXPECT_EQ(p.deny.back(), std::filesystem::path(token_file_path()).parent_path().string());

  PathPolicy d = confined_paths(default_config(), "/var/lib/trainer");
  ASSERT_FALSE(d.allow.empty());
  EXPECT_TRUE(d.allow.back() == "/tmp" || d.allow.back() == std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : ""));

  auto bad = parse_config(R"({"paths": {"allow": ["relative"]}})", "deploy.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "deploy.json: paths.allow[0]: 'relative' must be an absolute folder path");
}

TEST(DeploymentConfig, QuotasStorageBytesDefaultsToOneGibibyte) {
  EXPECT_EQ(default_config().default_storage_quota_bytes, int64_t{1} << 30);
  auto c = parse_config(R"({"quotas": {"storageBytes": 5000}})", "deploy.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->default_storage_quota_bytes, 5000);
  EXPECT_EQ(config_to_json(*c)["quotas"]["storageBytes"], 5000);
  EXPECT_FALSE(parse_config(R"({"quotas": {"storageBytes": -1}})", "deploy.json").is_ok());
}

TEST(Phases, AreTheSpecificationsSixteenInLifecycleOrder) {
  const char* expected[] = {"SIZING_DATASET", "WAITING_FOR_BASE_MODEL", "DEPLOYING_GRADER", "WAITING_FOR_GRADER",
                            "WAITING_FOR_DEVICES", "SUBMITTING", "QUEUED", "PREPARING", "TRAINING", "PAUSING",
                            "PAUSED", "FINALIZING", "CLEANING_UP", "COMPLETED", "FAILED", "CANCELLED"};
  ASSERT_EQ(kPhaseCount, 16);
  for (int i = 0; i < kPhaseCount; ++i) {
    EXPECT_STREQ(phase_name(phase_at(i)), expected[i]);
    EXPECT_EQ(parse_phase(expected[i]), phase_at(i));
  }
  EXPECT_FALSE(parse_phase("RUNNING").has_value());
  EXPECT_TRUE(is_terminal(Phase::kCancelled));
  EXPECT_FALSE(is_terminal(Phase::kPaused));
}

}  // namespace
}  // namespace trainer::service

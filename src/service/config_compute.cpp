// The deployment configuration's compute backend and store sections.
#include "service/config_fields.h"
#include "store/store.h"

namespace trainer::service::config_fields {
namespace {

using json = nlohmann::json;

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

}  // namespace

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

// store: {kind?, url?, poolSize?}
Status parse_store(const json& st, StoreConfig& store) {
  if (!st.is_object()) return invalid_argument("store: must be an object {kind, url, poolSize}");
  TRAINER_RETURN_IF_ERROR(check_keys(st, "store.", {"kind", "url", "poolSize"}));
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
  if (st.contains("poolSize")) {
    if (store.kind != "postgres") {
      return invalid_argument("store.poolSize: only for kind postgres (SQLite keeps one connection)");
    }
    const json& v = st["poolSize"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > store::kMaxPostgresPoolSize) {
      return invalid_argument("store.poolSize: must be an integer between 1 and " +
                              std::to_string(store::kMaxPostgresPoolSize) + " (connections), got " + v.dump());
    }
    store.pool_size = v.get<int>();
  }
  return Status::ok();
}

}  // namespace trainer::service::config_fields

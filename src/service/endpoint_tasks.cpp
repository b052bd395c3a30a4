// Endpoints as tasks of the kernel (its "endpoint" kind): AWAITING_CAPACITY until admission
// grants the SERVING claim, then `trainer-job serve` started through the backend (job kind serve)
// under it, STARTING until the process prints its "listening" line and answers GET /health,
// READY while it runs; DELETING once its stop was asked, DELETED when it is gone. A READY
// endpoint's process that ends on its own is started again (STARTING, up to kMaxRestarts times);
// FAILED, with a reason naming how the process ended, when it ends while STARTING or past that.
// Every phase change is a kernel->move(); the claim is released in the transaction that ends the
// endpoint.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/files.h"
#include "common/http_client.h"
#include "service/artifact_store.h"
#include "service/base_models.h"
#include "service/endpoints.h"
#include "service/lost_attempts.h"
#include "service/serving_process.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

constexpr const char* kAwaiting = "AWAITING_CAPACITY";
constexpr const char* kStarting = "STARTING";
constexpr const char* kReady = "READY";
constexpr const char* kDeleting = "DELETING";
constexpr const char* kDeleted = "DELETED";
constexpr const char* kFailed = "FAILED";
// How often a STARTING or READY endpoint's process is looked at (seconds).
constexpr double kFollowSeconds = 0.5;
// How long a process may take to answer before its endpoint fails (seconds).
constexpr double kStartSeconds = 600;
// How long a DELETING endpoint's process has to stop after SIGTERM before it is killed (seconds).
constexpr double kStopSeconds = 10;
// How long a health probe of a starting process may take (seconds).
constexpr double kProbeSeconds = 1;
constexpr int kLogLinesInReason = 3;
// How many of the last log lines a starting process posted are looked through for its listening line.
constexpr int64_t kPostedLinesRead = 200;
// How often a READY endpoint's process that ended on its own is started again before the
// endpoint fails (a process that ends while STARTING fails it at once: a retry would not mend it).
constexpr int kMaxRestarts = 3;

// The last `n` lines of a file; "" when it cannot be read.
std::string file_tail(const std::string& path, int n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    lines.push_back(line);
    if (static_cast<int>(lines.size()) > n) lines.erase(lines.begin());
  }
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : " | ") + l;
  return out;
}

// How the process ended, in words: "exited with code 1", "was killed by signal 9 (SIGKILL)".
std::string how_it_ended(const backend::JobStatus& status) {
  if (!status.reason.empty()) return status.reason;
  if (!status.exit_code) return "ended while trainerd could not see how";
  const int code = *status.exit_code;
  if (code > 128) {
    const int sig = code - 128;
    const char* name = sig == SIGKILL ? "SIGKILL" : sig == SIGTERM ? "SIGTERM" : sig == SIGSEGV ? "SIGSEGV"
                                                  : sig == SIGABRT ? "SIGABRT" : nullptr;
    return "was killed by signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
  }
  return "exited with code " + std::to_string(code);
}

}  // namespace

// AWAITING_CAPACITY, STARTING, READY and DELETING hold the claim; DELETED and FAILED end it.
const tasks::PhaseTable& endpoint_phase_table() {
  static const tasks::PhaseTable table = *tasks::PhaseTable::make(
      "endpoint",
      {{kAwaiting, false, true, false, true}, {kStarting, false, true}, {kReady, false, true}, {kDeleting, false, true},
       {kDeleted, true}, {kFailed, true}},
      {{kAwaiting, {kStarting, kFailed, kDeleted}},
       {kStarting, {kReady, kFailed, kDeleting}},
       {kReady, {kStarting, kFailed, kDeleting}},
       {kDeleting, {kDeleted}}});
  return table;
}

// One step of an endpoint (core mu held, inside the step's transaction).
Status Endpoints::step_task(tasks::Step& step) {
  const std::string id = step.task().id;
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_endpoint(id));
  if (!stored) return internal_error("endpoint " + id + " has a task but no stored document");
  json doc = std::move(*stored);
  upgrade(doc);
  if (step.task().phase != kAwaiting) return follow_locked(doc, step);
  TRAINER_ASSIGN_OR_RETURN(std::optional<store::ClaimRow> claim, claim_of(id));
  if (!claim) return end_locked(doc, kFailed, "its device claim is gone");
  if (claim->state == "GRANTED") return launch_locked(doc, *claim);
  // A claim the windows it waited for have passed by waits forever: the endpoint fails instead.
  const std::string never = capacity_.never_granted(claim->pool, claim->devices);
  if (!never.empty()) return end_locked(doc, kFailed, "waiting for devices: " + never);
  return Status::ok();  // the phase waits for its claim: the grant wakes it (the kernel's recheck else)
}

// Writes the process's spec (its flags by name) and starts it on the claim's devices: STARTING.
Status Endpoints::launch_locked(json& doc, const store::ClaimRow& claim) {
  const std::string id = doc["endpointId"].get<std::string>();
  // Each launch its own attempt's identity to the API (its events and log lines carry it,
  // job_reports.cpp), durable before the process starts.
  const int launch = doc.value("restarts", 0) + 1;
  const std::string job_id = id + "-" + std::to_string(launch);
  TRAINER_ASSIGN_OR_RETURN(std::optional<std::string> token, core_.durable_job_token(job_id, "endpoint", id));
  if (!token) return Status::ok();  // registered now; the process starts on the next step
  const fs::path dir = dir_of(id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  const PoolConfig* pool = capacity_.pool_named(claim.pool);
  const bool gpu_pool = pool && pool->accelerator != "cpu";
  const json& model = doc["model"];
  // The base model by content hash, found in this host's model cache.
  const std::string base_path =
      core_.storage->local_path(BaseModels::cache_key(model.value("baseModelHash", std::string())));
  // On this host (the local backend) it listens on loopback; on a cluster's node, on every
  // interface, so that trainerd on another machine reaches it (its secret keeps others out).
  const bool this_host = core_.backend->on_this_host();
  json spec = {{"model", base_path},
               {"name", model.value("baseModel", std::string())},
               {"host", this_host ? "127.0.0.1" : "0.0.0.0"},
               {"port", 0},
               {"max-rank", core_.options.config.limits.max_adapter_rank},
               {"max-adapters", kMaxAdaptersLoaded},
               {"gpus", gpu_pool ? claim.devices : 0}};
  json adapters = json::object();
  for (const auto& m : doc["models"]) {
    if (m.value("kind", std::string()) == "adapter") adapters[m.value("name", std::string())] = m.value("_path", std::string());
  }
  if (!adapters.empty()) spec["adapter"] = adapters;
  // On a cluster with an S3 store its model and adapters are staged there (endpoint_inputs.cpp).
  if (Status staged = stage_spec_locked(doc, spec); !staged.is_ok()) {
    return end_locked(doc, kFailed, "could not stage the serving process's inputs: " + staged.message());
  }
  backend::JobSpec job;
  job.kind = protocol::JobKind::kServe;
  job.run_id = id;
  job.identity.workload = doc["workload"].value("name", std::string());
  job.identity.base_model = model.value("baseModel", std::string());
  job.identity.profile = pool ? pool->accelerator : "";
  job.plan_path = (dir / "spec.json").string();
  job.output_dir = dir.string();
  // Each launch its own log: the "listening" line read is this process's.
  job.log_path = (dir / (launch == 1 ? std::string("serve.log") : "serve-" + std::to_string(launch) + ".log")).string();
  job.job_id = job_id;
  job.job_token = *token;
  job.catalog_url = core_.job_catalog_urls();  // where it reports its events and log (job_reports.cpp)
  job.catalog_ca_file = core_.job_catalog_ca_file();
  // Where it fetches staged inputs from (a cluster with an S3 store).
  if (const ArtifactStoreConfig& store = core_.options.config.artifact_store; !store.uri.empty()) {
    job.artifact_root = store.uri;
    job.store = artifact_store_access(store);
  }
  job.attempt = launch;  // a cluster's submission of a restart is a new one (Ray: PREFIX-ID-LAUNCH)
  // Its events (a hello, then a heartbeat; `--events`, which a backend whose nodes share no folder
  // with trainerd points into the node's folder; posted to trainerd with its log): a process
  // silent past limits.jobSilenceSeconds is hung.
  job.events_path = (dir / ("events-" + std::to_string(launch) + ".jsonl")).string();
  const int beat = heartbeat_seconds_for(core_.options.config.limits.job_silence_seconds);
  if (beat > 0) spec["heartbeat-seconds"] = beat;
  job.gpus = gpu_pool ? claim.devices : 0;
  job.device_ids = claim.device_ids;
  // Each launch its own secret (as an attempt's token: 256 bits from the kernel), in the process's
  // environment, never its command line.
  job.serve_secret = new_job_token();
  TRAINER_RETURN_IF_ERROR(write_file_atomic(job.plan_path, spec.dump(2) + "\n"));
  TRAINER_RETURN_IF_ERROR(core_.kernel->recheck_lease());  // fenced, as a run's job (driver.cpp)
  auto started = core_.backend->start(job);
  if (!started.is_ok()) return end_locked(doc, kFailed, "the serving process did not start: " + started.status().message());
  doc["_job"] = {{"handle", started->value}, {"jobId", job.job_id}, {"log", job.log_path}, {"port", 0},
                 {"secret", job.serve_secret}};
  if (beat > 0) doc["_job"]["events"] = job.events_path;
  doc["phase"] = kStarting;
  doc["startedAt"] = core_.now_rfc3339();
  doc["startedAtSeconds"] = core_.now();
  TRAINER_RETURN_IF_ERROR(core_.store->put_endpoint(doc));
  return core_.kernel->move("endpoint", id, kStarting);
}

// A READY endpoint's process ended on its own: started again on the same claim, with every
// attached adapter (STARTING), up to kMaxRestarts times; then the endpoint fails, naming why.
Status Endpoints::restart_locked(json& doc, const std::string& reason) {
  const int restarts = doc.value("restarts", 0);
  if (restarts >= kMaxRestarts) {
    return end_locked(doc, kFailed, reason + " (after " + std::to_string(restarts) + " restarts)");
  }
  TRAINER_ASSIGN_OR_RETURN(std::optional<store::ClaimRow> claim, claim_of(doc["endpointId"].get<std::string>()));
  if (!claim) return end_locked(doc, kFailed, reason + "; its device claim is gone");
  doc["restarts"] = restarts + 1;
  doc["lastRestart"] = {{"at", core_.now_rfc3339()}, {"reason", reason}};
  doc.erase("readyAt");
  return launch_locked(doc, *claim);
}

// Where the process answers, from its "listening" line (trainer-job serve prints it on stdout,
// which the backend sends to its log) and the node the backend says it runs on, once GET /health
// answers there with its secret; nullopt until then.
std::optional<json> Endpoints::answering_at(const json& doc, const std::string& node_address) const {
  std::optional<ListeningLine> line = read_listening_line(doc["_job"].value("log", std::string()));
  // A node that shares no folder with trainerd: the line as the process posted it in its log.
  if (!line) {
    auto posted = core_.store->job_log_tail(doc["_job"].value("jobId", std::string()), kPostedLinesRead);
    for (size_t i = 0; posted.is_ok() && !line && i < posted->size(); ++i) line = parse_listening_line((*posted)[i].text);
  }
  if (!line || line->port == 0) return std::nullopt;
  json job = doc["_job"];
  job["host"] = reachable_host(*line, node_address);
  job["port"] = line->port;
  if (http_call(serving_call(job, "GET", "/health", kProbeSeconds)).status != 200) return std::nullopt;
  return job;
}

// STARTING, READY, DELETING: the process looked at; its end decides the endpoint's.
Status Endpoints::follow_locked(json& doc, tasks::Step& step) {
  const std::string id = doc["endpointId"].get<std::string>();
  const std::string phase = doc.value("phase", std::string());
  const backend::JobHandle handle{doc["_job"].value("handle", std::string())};
  const backend::JobStatus status = core_.backend->poll(handle);
  step.due_at(step.now() + kFollowSeconds);
  if (phase == kDeleting) {
    if (status.state != backend::JobState::kRunning) return end_locked(doc, kDeleted, "");
    if (core_.now() - doc.value("deleteRequestedAt", core_.now()) > kStopSeconds) core_.backend->kill(handle);
    return Status::ok();
  }
  if (status.state != backend::JobState::kRunning) {
    const std::string tail = file_tail(doc["_job"].value("log", std::string()), kLogLinesInReason);
    std::string reason;
    if (doc["_job"].contains("hungAt")) {
      reason = "the serving process (" + core_.backend->describe(handle) + ") sent nothing, not even its heartbeat, "
               "for more than limits.jobSilenceSeconds (" + std::to_string(core_.options.config.limits.job_silence_seconds) +
               " s); trainerd stopped it";
    } else {
      reason = "the serving process (" + core_.backend->describe(handle) + ") " + how_it_ended(status);
    }
    if (!tail.empty()) reason += "; its last lines: " + tail;
    if (phase == kReady) return restart_locked(doc, reason);
    return end_locked(doc, kFailed, reason);
  }
  TRAINER_RETURN_IF_ERROR(watch_process_silence(doc, handle));
  if (phase == kReady) return Status::ok();
  const std::optional<json> answering = answering_at(doc, status.node_address);
  if (!answering) {
    if (core_.now() - doc.value("startedAtSeconds", core_.now()) > kStartSeconds) {
      core_.backend->kill(handle);
      return end_locked(doc, kFailed, "the serving process did not answer within " + std::to_string(static_cast<int>(kStartSeconds)) + " s");
    }
    return Status::ok();
  }
  doc["_job"] = *answering;
  doc["phase"] = kReady;
  doc["readyAt"] = core_.now_rfc3339();
  TRAINER_RETURN_IF_ERROR(core_.store->put_endpoint(doc));
  return core_.kernel->move("endpoint", id, kReady);
}

// A STARTING or READY endpoint's process heard from when its events file grew (its heartbeat);
// silent past limits.jobSilenceSeconds it is hung: SIGTERM, then SIGKILL after
// limits.cancelGraceSeconds, and its end restarts the endpoint (or fails it while STARTING).
Status Endpoints::watch_process_silence(json& doc, const backend::JobHandle& handle) {
  json& job = doc["_job"];
  const std::string events = job.value("events", std::string());
  if (events.empty()) return Status::ok();  // started without a heartbeat
  const double t = core_.now();
  std::error_code ec;
  const auto size = fs::file_size(events, ec);
  bool changed = false;
  if (!ec && static_cast<int64_t>(size) != job.value("eventsBytes", int64_t{-1})) {
    job["eventsBytes"] = static_cast<int64_t>(size);
    job["heardAt"] = t;
    changed = true;
  }
  // Its posted events (a node whose events file trainerd cannot see).
  const int64_t seen = job.value("eventsSeq", int64_t{0});
  if (auto posted = core_.store->job_events(job.value("jobId", std::string()), seen, 1000); posted.is_ok() && !posted->empty()) {
    job["eventsSeq"] = posted->back().seq;
    job["heardAt"] = t;
    changed = true;
  }
  const auto number = [&](const char* key) {
    return job.contains(key) && job[key].is_number() ? std::optional<double>(job[key].get<double>()) : std::nullopt;
  };
  const Limits& limits = core_.options.config.limits;
  switch (watch_silence(t, number("heardAt"), core_.started_at, number("hungAt"), limits.job_silence_seconds,
                        limits.cancel_grace_seconds)) {
    case SilenceAction::kNone:
      break;
    case SilenceAction::kStop:
      job["hungAt"] = t;
      changed = true;
      std::fprintf(stderr, "trainerd: endpoint %s: its serving process sent nothing for more than %d s "
                           "(limits.jobSilenceSeconds); stopping it as hung\n",
                   doc["endpointId"].get<std::string>().c_str(), limits.job_silence_seconds);
      core_.backend->request_stop(handle);
      break;
    case SilenceAction::kKill:
      core_.backend->kill(handle);
      break;
  }
  return changed ? core_.store->put_endpoint(doc) : Status::ok();
}

// How it ended (mu held, inside a transaction): DELETED or FAILED (why); its claim released.
Status Endpoints::end_locked(json& doc, const std::string& phase, const std::string& reason) {
  const std::string id = doc["endpointId"].get<std::string>();
  doc["phase"] = phase;
  doc["endedAt"] = core_.now_rfc3339();
  if (phase == kFailed) doc["failureReason"] = reason;
  TRAINER_RETURN_IF_ERROR(core_.store->put_endpoint(doc));
  TRAINER_RETURN_IF_ERROR(core_.kernel->move("endpoint", id, phase));
  TRAINER_RETURN_IF_ERROR(capacity_.release_claim(id));
  return capacity_.admit_locked();
}

}  // namespace trainer::service

// Construction, startup and shutdown of the service; the driver thread's loop.
#include "service/service.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>

#include "common/version.h"
#include "service/artifact_store.h"
#include "service/service_state.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

// "30 s", "2.5 s".
std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

json all_phase_names() {
  json out = json::array();
  for (int i = 0; i < kPhaseCount; ++i) out.push_back(phase_name(phase_at(i)));
  return out;
}

}  // namespace

ServiceImpl::ServiceImpl(ServiceOptions options, std::unique_ptr<store::Store> store,
                         std::unique_ptr<backend::Backend> backend, std::unique_ptr<storage::Storage> storage)
    : core_(std::move(options), std::move(store), std::move(backend), std::move(storage)),
      job_otlp_endpoint_(opt_.job_otlp_endpoint),
      run_tasks_(run_phase_table(), [this](tasks::Step& s) { return step_run_task(s.task().id); }) {
  kernel_->add_kind(base_models_.task_kind());  // a run waiting for its base model sees it ready in the same pass
  kernel_->add_kind(pipelines_.task_kind());  // a stage's run it starts is stepped in the same pass
  kernel_->add_kind(run_tasks_);
  kernel_->add_kind(registry_.task_kind());
  kernel_->add_kind(comparisons_.task_kind());  // an evaluation it starts is launched in the same pass
  kernel_->add_kind(evaluations_.task_kind());
  kernel_->add_kind(endpoints_.task_kind());
  kernel_->add_kind(analyses_.task_kind());
  kernel_->add_kind(curations_.task_kind());
  kernel_->add_kind(distillations_.task_kind());
}

ServiceImpl::~ServiceImpl() { stop(); }

Status ServiceImpl::start() {
  core_.started_at = now();
  add_step("open store", true, store_->description() + ", schema version " + std::to_string(store_->schema_version()));
  add_step("load configuration", true,
           opt_.config.source + ": " + std::to_string(opt_.config.base_models.size()) + " base models, " +
               std::to_string(opt_.config.pools.size()) + " pools");
  // A base model whose folder is missing fails only its own selection; the step says so.
  std::string missing;
  for (const auto& m : opt_.config.base_models) {
    std::error_code ec;
    if (!fs::is_directory(m.path, ec)) missing += (missing.empty() ? "" : "; ") + m.name + ": " + m.path;
  }
  add_step("check base model folders", missing.empty(),
           missing.empty() ? std::to_string(opt_.config.base_models.size()) + " found"
                           : "folders that do not exist on this host (selecting these fails): " + missing);
  if (!opt_.config.artifact_store.uri.empty()) {
    // Jobs publish every snapshot there: an artifact store that refuses us stops the start.
    auto store = open_artifact_store(opt_.config.artifact_store);
    add_step("connect artifact store", store.is_ok(),
             store.is_ok() ? (*store)->describe() : store.status().describe());
    if (!store.is_ok()) return store.status();
    core_.artifact_store = std::move(*store);
  }
  Status st = base_models_.resume();
  add_step("resume base model preparation", st.is_ok(), st.is_ok() ? "ok" : st.describe());
  if (!st.is_ok()) return st;
  std::string summary;
  st = recover_runs(&summary);
  add_step("recover runs", st.is_ok(), st.is_ok() ? summary : st.describe());
  if (!st.is_ok()) return st;
  st = evaluations_.resume(&summary);
  add_step("recover evaluations", st.is_ok(), st.is_ok() ? summary : st.describe());
  if (!st.is_ok()) return st;
  // Registrations left PENDING or COPYING by a previous trainerd are taken up again by their
  // tasks, before the driver runs; what a crashed copy or import left in the staging folder is
  // never read again.
  {
    std::error_code ec;
    fs::remove_all(fs::path(opt_.data_dir) / "registry-staging", ec);
  }
  st = registry_.resume();
  add_step("resume registrations", st.is_ok(), st.is_ok() ? "ok" : st.describe());
  if (!st.is_ok()) return st;
  st = comparisons_.resume();
  add_step("resume comparisons", st.is_ok(), st.is_ok() ? "ok" : st.describe());
  if (!st.is_ok()) return st;
  pipelines_.refresh_active();
  capacity_.read();
  add_step("read capacity", true, backend_->observed_source());
  // Replicas: this one's heartbeat, and a listener of the others' changes where the store can have
  // others (PostgreSQL). A step of its own only there: on SQLite, startup reads as it always did.
  auto listener = store_->listen_for_changes(opt_.replica);
  shared_store_ = listener.is_ok() && *listener;
  st = !listener.is_ok() ? listener.status() : shared_store_ ? beat() : Status::ok();
  if (!st.is_ok() || shared_store_) {
    add_step("join replicas", st.is_ok(),
             st.is_ok() ? "replica " + opt_.replica + ", task leases of " + seconds_text(opt_.lease_seconds) +
                              ", listening for the other replicas' changes"
                        : st.describe());
  }
  if (!st.is_ok()) return st;
  if (*listener) listener_ = std::thread([this, l = std::move(*listener)]() mutable { listen(*l); });
  driver_ = std::thread([this] { drive(); });
  add_step("start run driver", true, "every " + std::to_string(opt_.tick.count()) + " ms");
  ready_ = true;
  return Status::ok();
}

void ServiceImpl::stop() {
  stopping_ = true;
  if (driver_.joinable()) driver_.join();
  if (listener_.joinable()) listener_.join();
  kernel_->stop_work();
  kernel_->release_leases();
  if (ready_ && shared_store_) {
    Status st = store_->remove_replica(opt_.replica);
    if (!st.is_ok()) std::fprintf(stderr, "trainerd: warning: leaving the replicas table: %s\n", st.describe().c_str());
  }
}

// The listener thread: another replica's change wakes this one's long polls and its driver. Nothing
// escapes it; while the store cannot be reached it tries again every kListenRetry.
void ServiceImpl::listen(store::ChangeListener& listener) {
  constexpr auto kListenWait = std::chrono::milliseconds(500);  // how often it looks at stopping_
  constexpr auto kListenRetry = std::chrono::milliseconds(500);
  bool warned = false;
  while (!stopping_) {
    auto changed = listener.wait(kListenWait);
    if (changed.is_ok()) {
      warned = false;
      if (*changed) {
        core_.notify_here();
        kernel_->wake();
      }
      continue;
    }
    ++driver_errors_;
    if (!warned) {
      std::fprintf(stderr, "trainerd: warning: listening for other replicas' changes: %s (trying again)\n",
                   changed.status().describe().c_str());
      warned = true;
    }
    std::this_thread::sleep_for(kListenRetry);
  }
}

Status ServiceImpl::beat() {
  const double at = now();
  Status st = store_->beat_replica({opt_.replica, opt_.instance, core_.catalog_url, core_.started_at, at});
  if (st.is_ok()) last_beat_ = at;
  return st;
}

Result<json> ServiceImpl::live_replicas() const {
  if (!shared_store_) {  // one trainerd on the store: this one, as it is now
    return json::array({{{"name", opt_.replica},
                         {"instance", opt_.instance},
                         {"url", core_.catalog_url},
                         {"startedAt", rfc3339(core_.started_at)},
                         {"heartbeatAt", rfc3339(now())}}});
  }
  const double window = ServiceCore::kLiveBeats * std::chrono::duration<double>(opt_.heartbeat).count();
  TRAINER_ASSIGN_OR_RETURN(std::vector<store::ReplicaRow> rows, store_->live_replicas(now() - window));
  json out = json::array();
  for (const auto& r : rows) {
    out.push_back({{"name", r.name},
                   {"instance", r.instance},
                   {"url", r.url},
                   {"startedAt", rfc3339(r.started_at)},
                   {"heartbeatAt", rfc3339(r.heartbeat_at)}});
  }
  return out;
}

std::vector<StartupStep> ServiceImpl::startup_steps() const {
  std::lock_guard<std::mutex> lock(steps_mu_);
  return steps_;
}

void ServiceImpl::add_step(const std::string& name, bool ok, const std::string& message) {
  std::lock_guard<std::mutex> lock(steps_mu_);
  steps_.push_back({name, ok, message});
}

json ServiceImpl::info() const {
  json steps = json::array();
  for (const auto& s : startup_steps()) steps.push_back({{"name", s.name}, {"ok", s.ok}, {"message", s.message}});
  json configuration = config_to_json(opt_.config);
  // The live replicas; a store that does not answer says so in place of the list.
  json replicas = json::array();
  if (ready_) {
    auto live = live_replicas();
    replicas = live.is_ok() ? *live : json{{"error", live.status().describe()}};
  }
  return {{"backend", backend_->name()},
          {"build", {{"version", version_string()}}},
          {"instance", opt_.instance},
          {"replica", opt_.replica},
          {"replicas", replicas},
          {"dataDir", opt_.data_dir},
          {"storage", storage_->describe()},
          {"artifactStore", artifact_store_ ? artifact_store_->describe() : storage_->describe()},
          {"configuration", configuration},
          {"phases", all_phase_names()},
          {"taskKinds", kernel_->describe()},
          {"driver",
           {{"errors", driver_errors_.load() + kernel_->step_errors()},
            {"announceErrors", core_.announce_errors.load()}}},
          {"startup", {{"ready", ready_.load()}, {"steps", steps}}}};
}

// Releases claims of runs that ended or vanished and counts the open runs the driver resumes.
Status ServiceImpl::recover_runs(std::string* summary) {
  std::lock_guard<std::mutex> lock(mu_);
  auto claims = store_->list_claims();
  if (!claims.is_ok()) return claims.status();
  int released = 0;
  for (const auto& c : *claims) {
    auto run = store_->get_run(c.owner);
    // A run whose document cannot be read keeps its claim until the driver fails it by name.
    if (!run.is_ok()) continue;
    const bool ended = run->has_value() && (**run).contains("phase") && (**run)["phase"].is_string() &&
                       parse_phase((**run)["phase"].get<std::string>()) &&
                       is_terminal(*parse_phase((**run)["phase"].get<std::string>()));
    if (!run->has_value() && c.kind == "EVALUATION") {
      // An evaluation's claim: kept while the evaluation is open.
      auto e = store_->get_evaluation(c.owner);
      if (!e.is_ok()) return e.status();
      const std::string phase = e->has_value() ? (**e).value("phase", std::string()) : "";
      if (phase == "QUEUED" || phase == "RUNNING") continue;
    }
    if (!run->has_value() && c.kind == "SERVING") {
      // An endpoint's claim: kept while the endpoint is open.
      auto open = endpoints_.holds_claim(c.owner);
      if (!open.is_ok()) return open.status();
      if (*open) continue;
    }
    if (!run->has_value() || ended) {
      TRAINER_RETURN_IF_ERROR(capacity_.release_claim(c.owner));
      ++released;
    }
  }
  TRAINER_RETURN_IF_ERROR(capacity_.admit_locked());
  auto open = open_runs();
  if (!open.is_ok()) return open.status();
  int attached = 0, ended = 0, unreadable = 0;
  for (const auto& row : *open) {
    // Every open run is a task of the kernel (store migration 9 made them for older stores).
    auto task = store_->get_task("run", row.id);
    if (!task.is_ok()) return task.status();
    if (!task->has_value()) TRAINER_RETURN_IF_ERROR(kernel_->create("run", row.id, row.phase));
    auto r = parse_run_record(row.doc, row.id);
    if (!r.is_ok()) {
      ++unreadable;
      continue;
    }
    if (!r->job) continue;
    auto status = backend_->poll(r->job->handle);
    (status.state == backend::JobState::kRunning ? attached : ended) += 1;
  }
  *summary = std::to_string(open->size()) + " open runs; " + std::to_string(attached) + " jobs found running, " +
             std::to_string(ended) + " jobs ended while trainerd was down (their events decide the outcome); " +
             std::to_string(released) + " claims of ended runs released";
  if (unreadable > 0) {
    *summary += "; " + std::to_string(unreadable) + " runs whose stored document cannot be read (the driver fails them)";
  }
  return Status::ok();
}

// The driver thread: nothing escapes it. An exception is logged, counted and the loop goes on.
void ServiceImpl::drive() {
  auto last_capacity = opt_.clock->steady_now();
  while (!stopping_) {
    try {
      drive_once();
      if (opt_.clock->steady_now() - last_capacity > std::chrono::seconds(30)) {
        capacity_.read();
        last_capacity = opt_.clock->steady_now();
      }
      catalog_.sweep_leftovers_if_due();
      if (shared_store_ && now() - last_beat_ >= std::chrono::duration<double>(opt_.heartbeat).count()) {
        Status st = beat();
        if (!st.is_ok()) {
          ++driver_errors_;
          std::fprintf(stderr, "trainerd: warning: the replica's heartbeat failed: %s\n", st.describe().c_str());
        }
      }
    } catch (const std::exception& e) {
      ++driver_errors_;
      std::fprintf(stderr, "trainerd: warning: the run driver caught an error and goes on: %s\n", e.what());
    } catch (...) {
      ++driver_errors_;
      std::fprintf(stderr, "trainerd: warning: the run driver caught an unknown error and goes on\n");
    }
    kernel_->wait(opt_.tick);
  }
}

Result<std::unique_ptr<Service>> make_service(ServiceOptions options, std::unique_ptr<store::Store> store,
                                              std::unique_ptr<backend::Backend> backend) {
  std::error_code ec;
  for (const char* sub : {"datasets", "models", "runs"}) {
    fs::create_directories(fs::path(options.data_dir) / sub, ec);
    if (ec) return unavailable("cannot create " + (fs::path(options.data_dir) / sub).string() + ": " + ec.message());
  }
  if (!options.clock) options.clock = system_clock();
  auto storage = storage::make_folder_storage(options.data_dir);
  if (!storage.is_ok()) return storage.status();
  return std::unique_ptr<Service>(
      new ServiceImpl(std::move(options), std::move(store), std::move(backend), std::move(*storage)));
}

}  // namespace trainer::service

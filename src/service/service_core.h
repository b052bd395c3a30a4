// The state every part of the service shares: its options, the store, the backend, storage, the
// task kernel, telemetry, the one mutex of its durable writes, the clock, and the notice of run
// changes. ServiceImpl owns one and hands it by reference to each resource (bundles.h,
// datasets.h, base_models.h, workloads.h, model_registry.h, snapshot_catalog.h, capacity.h).
//
// Locking contract (every file of src/service follows it):
//   - mu serialises every read-modify-write of durable state (submissions, the driver's steps,
//     cancels, admission, dataset and workload changes). Methods named *_locked and every
//     method taking a RunRecord& to change it run with mu held, inside a store transaction.
//   - Reads that need no consistency with a write go to the store without mu.
//   - The small mutexes of each part guard only the members listed under them and are never held
//     while taking mu or calling the store (lock order: mu, then any one of them).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "service/metrics.h"
#include "service/run_record.h"
#include "service/run_traces.h"
#include "service/service.h"
#include "service/tasks/task_kernel.h"
#include "service/util.h"
#include "storage/storage.h"
#include "telemetry/relay.h"

namespace trainer::service {

// A new job attempt's token (TRAINER_JOB_TOKEN): 64 hex digits from /dev/urandom (job_reports.cpp).
std::string new_job_token();

class ServiceCore {
 public:
  ServiceCore(ServiceOptions options, std::unique_ptr<store::Store> store, std::unique_ptr<backend::Backend> backend,
              std::unique_ptr<storage::Storage> storage);

  // ---- constant after construction
  const ServiceOptions options;
  const std::unique_ptr<store::Store> store;
  const std::unique_ptr<backend::Backend> backend;
  const std::unique_ptr<storage::Storage> storage;  // the data folder: datasets, the model cache, runs
  // Every long-lived thing's task (tasks/task_kernel.h); each part adds its kind when it is built.
  const std::unique_ptr<tasks::TaskKernel> kernel;
  // The snapshots' store when artifactStore names one (set by ServiceImpl::start(), before the
  // driver runs); else null and snapshots live in `storage`. See artifacts().
  std::unique_ptr<storage::Storage> artifact_store;
  // trainerd's credential for its own calls to its API (a curation's judge or a distillation's
  // teacher served at one of our endpoints goes through the endpoint's chat route, so that the
  // forwarding meters count it): random at every start, held in memory only, never stored or
  // logged. Tokens::authenticate() answers it as submit on every workload.
  const std::string own_token;
  // trainerd's own API base URL ("http://127.0.0.1:9001"), which jobs call back for their reports
  // and the snapshot catalog (Service::set_catalog_url); set before start(), then constant.
  std::string catalog_url;
  // What a new job is given as TRAINER_CATALOG_URL: catalog_url, then the API URLs of the other
  // live replicas on the store (comma separated), so that its reports and snapshot commits reach a
  // replica while the one that started it is down (job/report_sender.h). catalog_url alone when
  // the store cannot list them, or on SQLite. Reads the store only.
  std::string job_catalog_urls() const;
  // What a new job is given as TRAINER_CATALOG_CA_FILE: the CA bundle that verifies catalog_url
  // when trainerd serves TLS (config tls.caFile, else tls.certFile); "" on plain HTTP.
  std::string job_catalog_ca_file() const {
    const TlsConfig& tls = options.config.tls;
    if (tls.cert_file.empty()) return "";
    return tls.ca_file.empty() ? tls.cert_file : tls.ca_file;
  }
  // A replica is live while its last heartbeat is at most this many heartbeat periods old.
  static constexpr int kLiveBeats = 3;
  // Wall seconds when trainerd started (set by ServiceImpl::start(), then constant): a job's
  // silence counts from it at the earliest (lost_attempts.h, watch_silence()).
  double started_at = 0;

  // ---- thread-safe
  ServiceTelemetry metrics;
  // The jobs' OTLP pushes, served on /metrics after the service's own series.
  telemetry::TelemetryRelay relay;
  // The runs' traces (config.telemetry.otlpTracesEndpoint; off when it names none).
  RunTraces traces;
  std::atomic<int64_t> driver_errors{0};  // errors caught at the edge of the driver and worker threads

  // Serialises every read-modify-write of durable state (see the contract above).
  std::mutex mu;

  // ---- time, through the injected clock
  double now() const { return options.clock->now_seconds(); }
  std::string now_rfc3339() const { return rfc3339(now()); }

  // Where snapshots and registered models live: the artifact store, else the data folder.
  storage::Storage& artifacts() { return artifact_store ? *artifact_store : *storage; }
  // Where an artifact key lives, as a URI ("file:///...", "s3://bucket/prefix/key").
  std::string artifact_uri(const std::string& key) const;

  // A run by id or unique id prefix; errors name `field`. Reads the store only (no mu needed).
  Result<RunRecord> resolve_run(const std::string& ref, const std::string& field);
  // The job attempt `job_id` when `token` is its (TRAINER_JOB_TOKEN): not_found, or
  // invalid_argument for another token. Reads the store only.
  Result<store::JobAttemptRow> authenticated_attempt(const std::string& job_id, const std::string& token);
  // The token of job attempt `job_id` once its row is durable. The first call registers the
  // attempt (for `owner_kind` `owner_id`, with a new token), wakes the kernel and answers none:
  // the caller starts the job on a later step, after the step's transaction committed the token
  // the job will carry. (A job started with a token that a crash then rolled back would be
  // adopted by the restarted trainerd, which had registered another: every call of the job
  // refused.) Inside a store transaction, mu held.
  Result<std::optional<std::string>> durable_job_token(const std::string& job_id, const std::string& owner_kind,
                                                       const std::string& owner_id);
  // A job's last `n` log lines: the ones its attempt `job_id` posted, else its log file's.
  std::string job_log_tail(const std::string& job_id, const std::string& log_path, int n);

  // ---- run changes: notify() after every change to any run (phase, progress, events, the models
  // and snapshots it shows); long polls wait for the next one. notify() also announces the change
  // to the other replicas on the store (store.h, announce_change(); when called inside a store
  // transaction, they hear of it at its commit), whose listeners call notify_here().
  void notify();
  // A change made elsewhere (another replica): wakes this process's waiters only.
  void notify_here();
  // Announcements that failed (the store unreachable): other replicas' long polls wait longer.
  std::atomic<int64_t> announce_errors{0};
  // `on_change` is called by every notify() from the notifying thread (Service::subscribe_run_changes).
  void subscribe(std::function<void()> on_change);
  // The count of notify() calls so far; wait_for_change() waits until it passes `seen`.
  uint64_t change_version();
  void wait_for_change(uint64_t seen, std::chrono::steady_clock::time_point until);

 private:
  std::mutex events_mu_;
  std::condition_variable events_cv_;
  uint64_t events_version_ = 0;                     // guarded by events_mu_: bumped on every run change
  std::vector<std::function<void()>> subscribers_;  // guarded by events_mu_
};

}  // namespace trainer::service

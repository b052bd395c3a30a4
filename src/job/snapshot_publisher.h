// Checkpoint staging and publication (docs/job-protocol.md, "Snapshots").
//
// Each new checkpoint is copied at once, on the training thread, into the job's protected local
// staging (the engine may prune its own folders; staging is the publisher's). Staged snapshots
// are published in order on a thread of their own while training goes on: reserve the snapshot
// in the service's catalog, upload each artifact kind to its immutable storage destination, then
// ask the catalog to verify and commit each kind and wait for its durable acknowledgement.
//
// An upload whose destination already holds the same manifest (the same bytes: a retry, or a
// resumed attempt saving the same step again) is a success; different bytes are a conflict,
// never overwritten. Transient failures (storage, catalog) are retried with backoff up to
// the publication's deadline; a conflict, a refused verification or a full disk is not: a save
// that met a full disk (staging's or the store's) is kept in disk_full(), and the job stops the
// run at once (cmd_run.cpp). A staged snapshot whose publication failed stays in staging. Every operation is timed into
// checkpoint.duration with its outcome and failure reason, uploads count their bytes into
// checkpoint.transfer.size, and checkpoint.publication.pending counts what awaits publication.
//
// Thread safety: stage() and drain() from one thread (the training thread); the publication
// thread is internal.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "job/report_sender.h"
#include "protocol/snapshot.h"
#include "storage/storage.h"
#include "telemetry/instruments.h"

namespace trainer::job {

// The checkpoint.storage.mode of a store: object storage (S3, no local path) or a shared folder.
inline telemetry::CheckpointStorageMode storage_mode_of(const storage::Storage& storage) {
  return storage.local_path(".").empty() ? telemetry::CheckpointStorageMode::kObjectStorage
                                         : telemetry::CheckpointStorageMode::kSharedFilesystem;
}

// The service's snapshot catalog, as the publisher calls it.
class Catalog {
 public:
  virtual ~Catalog() = default;
  // Reserves the snapshot before upload; ok when reserved now or earlier with the same content.
  virtual Status reserve(const protocol::Reservation& reservation) = 0;
  // Asks the catalog to verify and commit one uploaded kind; ok once the commit is durable.
  // invalid_argument when the catalog refused the upload (verification failed).
  virtual Status commit(const std::string& snapshot_id, const std::string& kind) = 0;
  // The committed snapshot's catalog entry (GET /v1/snapshots/{id}): what a restore validates
  // the stored manifests against. not_found when the catalog holds no committed snapshot so named.
  virtual Result<nlohmann::json> describe(const std::string& snapshot_id) = 0;
};

// The catalog over trainerd's HTTP API (`trainerd.base_url`, TRAINER_CATALOG_URL): POST
// /v1/runs/{run}/snapshots and POST /v1/snapshots/{id}/commit, each sent as the attempt
// (`X-Trainer-Job: TRAINER_JOB_ID`, `Authorization: Bearer TRAINER_JOB_TOKEN`). Unavailable when
// trainerd cannot be reached or answers 5xx; a refusal (401, 403: not the run's current attempt)
// is invalid_argument. describe() (a restore's read) retries an unavailable trainerd with backoff
// (0.25 s doubling to 5 s) until `read_deadline` has passed, so a trainerd restarting while an
// attempt starts never fails it; reserve() and commit() are retried by the publisher instead.
std::unique_ptr<Catalog> make_http_catalog(const ReportTarget& trainerd, const std::string& run_id,
                                           std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                           std::chrono::milliseconds read_deadline = std::chrono::seconds(0));

// One timed operation of a publication (reserve, upload, acknowledge: each try; publish: the
// whole publication, its retries included), for the job's traces (job_tracing.h).
struct PublicationOperation {
  telemetry::CheckpointOperation operation;
  std::string snapshot_id;
  int64_t step = 0;
  std::string kind;  // the artifact kind uploaded or acknowledged; "" for reserve and publish
  std::chrono::system_clock::time_point start, end;  // wall clock; end - start is the measured duration
  Status status;
};

struct PublisherOptions {
  std::string staging_dir;     // protected local staging, created when missing
  std::string run_id;          // the run the snapshots belong to
  int64_t attempt = 1;         // the attempt saving them
  std::string base_model_sha;  // recorded in each manifest; "" when unknown
  // One publication's deadline: transient failures are retried with backoff until it passes
  // (a trainerd restart or a storage hiccup is ridden out; a refusal is not retried).
  std::chrono::milliseconds deadline{std::chrono::minutes(5)};
  std::chrono::milliseconds backoff{250};       // first wait between tries, doubled after each
  std::chrono::milliseconds max_backoff{5000};  // longest wait between tries
  // When this many snapshots already await publication, later saves stage weights only.
  int max_pending_full = 2;
  // Called on the publication thread after each operation, when set. Must not block.
  std::function<void(const PublicationOperation&)> observer = {};
};

// What one staged snapshot became.
struct PublicationResult {
  std::string snapshot_id;
  int64_t step = 0;
  std::vector<std::string> kinds;  // staged kinds
  bool weights_only = false;       // trainingState dropped because uploads lagged
  Status status;                   // ok once every kind is committed
};

class SnapshotPublisher {
 public:
  SnapshotPublisher(PublisherOptions options, storage::Storage& storage, Catalog& catalog,
                    telemetry::MeterProvider& provider);
  ~SnapshotPublisher();  // stops the thread after the publication in flight; pending ones are dropped
  SnapshotPublisher(const SnapshotPublisher&) = delete;
  SnapshotPublisher& operator=(const SnapshotPublisher&) = delete;

  // Copies each kind's folder (kind -> folder) into staging, writes its manifest and queues the
  // snapshot. Returns the snapshot's id. The trainingState kind is left out when uploads lag,
  // unless `every_kind`: a run's final snapshot and a pause's keep all they were given (a run
  // resumes or continues from them).
  Result<std::string> stage(int64_t step, int64_t epoch, const std::map<std::string, std::string>& kind_dirs,
                            bool every_kind = false);
  // Waits until every staged snapshot is published or has failed. Returns how the newest staged
  // one fared (a run's final snapshot, a pause's): an earlier publication that failed (its store
  // was down past the deadline) was logged and counted, and the saves after it stand on their own.
  Status drain();
  // Every publication so far, in staging order.
  std::vector<PublicationResult> results() const;
  // The first save or publication that met a full disk (resource_exhausted, naming the folder), if any.
  std::optional<Status> disk_full() const;
  // Where the staged snapshot `snapshot_id` is kept ("" when it is not, or no longer, staged).
  std::string staged_dir(const std::string& snapshot_id) const;

 private:
  struct Staged {
    PublicationResult result;
    std::string dir;                                // staging/step-N
    std::map<std::string, std::string> manifests;   // kind -> manifest text
    std::map<std::string, int64_t> bytes;           // kind -> payload bytes
    int64_t epoch = 0;
  };
  // A step's status and, when it failed, its category (checkpoint.failure.reason).
  struct Outcome {
    Status status;
    std::optional<telemetry::CheckpointFailureReason> reason;
    bool retryable() const;
  };
  void loop();
  Outcome publish_once(const Staged& s);
  Outcome upload(const Staged& s, const std::string& kind);
  void record(telemetry::CheckpointOperation op, double seconds, const Outcome& outcome,
              std::optional<std::string> kind = std::nullopt);
  // Tells opt_.observer (when set) of an operation on `s` that started at `t0`.
  void observe(telemetry::CheckpointOperation op, std::chrono::steady_clock::time_point t0, const Status& status,
               const Staged& s, const std::string& kind = "") const;

  // Constant after construction.
  const PublisherOptions opt_;
  storage::Storage& storage_;
  Catalog& catalog_;
  telemetry::metrics::CheckpointDuration duration_;
  telemetry::metrics::CheckpointTransferSize transfer_;
  telemetry::metrics::CheckpointPublicationPending pending_gauge_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Staged> queue_;                 // guarded by mu_: staged, not yet taken
  bool in_flight_ = false;                   // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<PublicationResult> results_;   // guarded by mu_: finished, in order
  std::map<std::string, std::string> kept_;  // guarded by mu_: snapshot id -> staged folder of a failed one
  std::optional<Status> disk_full_;          // guarded by mu_: the first save that met a full disk
  std::thread thread_;
};

}  // namespace trainer::job

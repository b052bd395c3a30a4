#include "job/snapshot_publisher.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>

#include "common/files.h"
#include "common/json_parse.h"
#include "common/sha256.h"

namespace trainer::job {
namespace {

namespace fs = std::filesystem;
namespace tel = trainer::telemetry;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

tel::CheckpointArtifactKind artifact_kind(const std::string& kind) {
  return kind == protocol::kTrainingStateKind ? tel::CheckpointArtifactKind::kTrainingState
                                              : tel::CheckpointArtifactKind::kWeights;
}

// Copies the folder `from` to `to` (which must not exist), file by file.
Status copy_folder(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy(from, to, fs::copy_options::recursive, ec);
  if (ec) {
    Status st = error_code_status("cannot stage " + from.string() + " into", to.string(), ec);
    if (st.code() == StatusCode::kResourceExhausted) {
      return resource_exhausted("no space left on the disk of the job's staging folder " + to.parent_path().string() +
                                ": " + st.message());
    }
    return st;
  }
  return Status::ok();
}

class HttpCatalog final : public Catalog {
 public:
  HttpCatalog(const ReportTarget& trainerd, std::string run_id, std::chrono::milliseconds timeout,
              std::chrono::milliseconds read_deadline)
      : bases_(catalog_bases(trainerd.base_url)),
        run_id_(std::move(run_id)),
        ca_file_(trainerd.ca_file),
        timeout_(timeout),
        read_deadline_(read_deadline),
        headers_{{"X-Trainer-Job", trainerd.job_id}, {"Authorization", "Bearer " + trainerd.token}} {}

  Status reserve(const protocol::Reservation& reservation) override {
    return post("/v1/runs/" + run_id_ + "/snapshots", protocol::reservation_to_json(reservation));
  }
  Status commit(const std::string& snapshot_id, const std::string& kind) override {
    return post("/v1/snapshots/" + snapshot_id + "/commit", json{{"kind", kind}});
  }
  Result<json> describe(const std::string& snapshot_id) override {
    const auto deadline = Clock::now() + read_deadline_;
    std::chrono::milliseconds wait = kFirstReadBackoff;
    int tries = 0;
    while (true) {
      json answer;
      Status st = call("GET", "/v1/snapshots/" + snapshot_id, json(), &answer);
      ++tries;
      if (st.is_ok()) return answer;
      if (st.code() != StatusCode::kUnavailable || Clock::now() + wait > deadline) {
        if (tries == 1) return st;
        return Status(st.code(), st.message() + " (" + std::to_string(tries) + " tries within " +
                                     std::to_string(read_deadline_.count() / 1000) + " s)");
      }
      std::this_thread::sleep_for(wait);
      wait = std::min(wait * 2, kMaxReadBackoff);
    }
  }

 private:
  Status post(const std::string& path, const json& body) { return call("POST", path, body, nullptr); }

  // One call, to the replica that last answered, then to each other one while the one tried cannot
  // be reached or answers 5xx (every replica serves the catalog from the same store).
  Status call(const std::string& method, const std::string& path, const json& body, json* answer) {
    const size_t first = current_.load();
    Status st;
    for (size_t i = 0; i < bases_.size(); ++i) {
      const size_t at = (first + i) % bases_.size();
      st = call_one(bases_[at], method, path, body, answer);
      if (st.code() != StatusCode::kUnavailable) {
        current_.store(at);
        return st;
      }
    }
    return st;
  }

  Status call_one(const std::string& base, const std::string& method, const std::string& path, const json& body,
                  json* answer) {
    httplib::Client client(base);
    if (!ca_file_.empty()) client.set_ca_cert_path(ca_file_.c_str());
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout_);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout_ - s);
    client.set_connection_timeout(s.count(), us.count());
    client.set_read_timeout(s.count(), us.count());
    client.set_write_timeout(s.count(), us.count());
    auto response = method == "GET" ? client.Get(path, headers_) : client.Post(path, headers_, body.dump(), "application/json");
    if (!response) return unavailable("catalog " + base + path + ": " + httplib::to_string(response.error()));
    if (response->status >= 200 && response->status < 300) {
      if (answer != nullptr) {
        auto doc = parse_json(response->body, "catalog answer");
        if (!doc.is_ok()) return unavailable("catalog " + path + ": " + doc.status().message());
        *answer = std::move(*doc);
      }
      return Status::ok();
    }
    std::string message = response->body.substr(0, 500);
    if (auto doc = parse_json(response->body, "catalog answer"); doc.is_ok() && doc->is_object()) {
      message = doc->value("error", json::object()).value("message", message);
    }
    message = "catalog " + path + " answered HTTP " + std::to_string(response->status) + ": " + message;
    if (response->status == 409) return already_exists(message);
    if (response->status == 404) return not_found(message);
    if (response->status >= 400 && response->status < 500) return invalid_argument(message);
    return unavailable(message);
  }

  static constexpr std::chrono::milliseconds kFirstReadBackoff{250};
  static constexpr std::chrono::milliseconds kMaxReadBackoff{5000};

  const std::vector<std::string> bases_;  // the replicas TRAINER_CATALOG_URL names
  std::atomic<size_t> current_{0};        // the one that last answered
  const std::string run_id_;
  const std::string ca_file_;  // trusted for https:// bases; "" = the system's store
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds read_deadline_;  // describe() retries an unavailable trainerd this long
  const httplib::Headers headers_;  // the attempt's credentials, on every call
};

}  // namespace

std::unique_ptr<Catalog> make_http_catalog(const ReportTarget& trainerd, const std::string& run_id,
                                           std::chrono::milliseconds timeout, std::chrono::milliseconds read_deadline) {
  return std::make_unique<HttpCatalog>(trainerd, run_id, timeout, read_deadline);
}

bool SnapshotPublisher::Outcome::retryable() const {
  // Storage faults and an unreachable catalog pass; a refusal by the catalog does not.
  if (status.is_ok() || !reason) return false;
  // A full disk stays full until someone frees space: the run stops instead (disk_full()).
  if (*reason == tel::CheckpointFailureReason::kStorage) return status.code() != StatusCode::kResourceExhausted;
  return *reason == tel::CheckpointFailureReason::kCatalog && status.code() == StatusCode::kUnavailable;
}

SnapshotPublisher::SnapshotPublisher(PublisherOptions options, storage::Storage& storage, Catalog& catalog,
                                     tel::MeterProvider& provider)
    : opt_(std::move(options)),
      storage_(storage),
      catalog_(catalog),
      duration_(provider),
      transfer_(provider),
      pending_gauge_(provider) {
  pending_gauge_.set(0);
  thread_ = std::thread([this] { loop(); });
}

SnapshotPublisher::~SnapshotPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SnapshotPublisher::record(tel::CheckpointOperation op, double seconds, const Outcome& outcome,
                               std::optional<std::string> kind) {
  tel::metrics::CheckpointDuration::Attributes a{
      .checkpoint_operation = op,
      .checkpoint_outcome = outcome.status.is_ok() ? tel::CheckpointOutcome::kSuccess : tel::CheckpointOutcome::kFailure,
      .checkpoint_failure_reason = outcome.status.is_ok() ? std::nullopt : outcome.reason,
      .checkpoint_storage_mode = storage_mode_of(storage_)};
  if (kind) a.checkpoint_artifact_kind = artifact_kind(*kind);
  duration_.record(seconds, a);
}

Result<std::string> SnapshotPublisher::stage(int64_t step, int64_t epoch,
                                             const std::map<std::string, std::string>& kind_dirs, bool every_kind) {
  const auto t0 = Clock::now();
  Staged s;
  s.result.step = step;
  s.epoch = epoch;
  size_t waiting = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting = queue_.size() + (in_flight_ ? 1 : 0);
  }
  std::map<std::string, std::string> kinds = kind_dirs;
  if (!every_kind && waiting >= static_cast<size_t>(opt_.max_pending_full) && kinds.size() > 1 &&
      kinds.count(protocol::kTrainingStateKind)) {
    kinds.erase(protocol::kTrainingStateKind);
    s.result.weights_only = true;
    std::fprintf(stderr,
                 "trainer-job: warning: %zu snapshots await publication; the save at step %lld carries weights only\n",
                 waiting, static_cast<long long>(step));
  }
  char name[48];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  auto failed = [&](Status st) -> Result<std::string> {
    record(tel::CheckpointOperation::kStage, seconds_since(t0), {st, tel::CheckpointFailureReason::kInternal});
    std::error_code gone;
    fs::remove_all(fs::path(opt_.staging_dir) / (std::string(name) + ".staging"), gone);  // no half copy stays
    if (st.code() == StatusCode::kResourceExhausted) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!disk_full_) disk_full_ = st.with_context("saving the checkpoint of step " + std::to_string(step));
    }
    return st;
  };
  std::error_code ec;
  if (fs::exists(fs::path(opt_.staging_dir) / name, ec)) {
    // A save of the same step is still staged (a pause's save at a saveEvery step, its upload
    // under way on a slow store): stage this one beside it, never over it.
    static std::atomic<int> restaged{0};
    std::snprintf(name, sizeof(name), "step-%08lld.%d", static_cast<long long>(step), ++restaged);
  }
  const fs::path dir = fs::path(opt_.staging_dir) / name;
  const fs::path tmp = fs::path(opt_.staging_dir) / (std::string(name) + ".staging");
  fs::remove_all(tmp, ec);
  fs::remove_all(dir, ec);
  fs::create_directories(tmp, ec);
  if (ec) return failed(error_code_status("cannot create", tmp.string(), ec));
  std::map<std::string, std::string> digests;
  for (const auto& [kind, from] : kinds) {
    if (Status st = protocol::check_artifact_kind(kind, "kind"); !st.is_ok()) return failed(st);
    if (Status st = copy_folder(from, tmp / kind); !st.is_ok()) return failed(st);
    protocol::Manifest identity{.kind = kind,
                                .run_id = opt_.run_id,
                                .engine_step = step,
                                .epoch = epoch,
                                .base_model_sha = opt_.base_model_sha};
    auto manifest = protocol::manifest_of_folder((tmp / kind).string(), identity);
    if (!manifest.is_ok()) return failed(manifest.status());
    const std::string text = protocol::manifest_text(*manifest);
    if (Status st = write_file_atomic((tmp / kind / protocol::kManifestFile).string(), text); !st.is_ok()) {
      return failed(st);
    }
    digests[kind] = sha256_hex(text);
    s.manifests[kind] = text;
    s.bytes[kind] = manifest->total_bytes();
    s.result.kinds.push_back(kind);
  }
  fs::rename(tmp, dir, ec);
  if (ec) return failed(internal_error("cannot stage " + dir.string() + ": " + ec.message()));
  s.dir = dir.string();
  s.result.snapshot_id = protocol::snapshot_id(opt_.run_id, step, digests);
  record(tel::CheckpointOperation::kStage, seconds_since(t0), {Status::ok(), std::nullopt});
  const std::string id = s.result.snapshot_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(s));
    pending_gauge_.set(static_cast<int64_t>(queue_.size() + (in_flight_ ? 1 : 0)));
  }
  cv_.notify_all();
  return id;
}

Status SnapshotPublisher::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return (queue_.empty() && !in_flight_) || stopping_; });
  if (results_.empty()) return Status::ok();
  const PublicationResult& newest = results_.back();
  if (!newest.status.is_ok()) {
    return newest.status.with_context("publishing the snapshot of step " + std::to_string(newest.step));
  }
  return Status::ok();
}

std::vector<PublicationResult> SnapshotPublisher::results() const {
  std::lock_guard<std::mutex> lock(mu_);
  return results_;
}

std::optional<Status> SnapshotPublisher::disk_full() const {
  std::lock_guard<std::mutex> lock(mu_);
  return disk_full_;
}

std::string SnapshotPublisher::staged_dir(const std::string& snapshot_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = kept_.find(snapshot_id);
  return it == kept_.end() ? std::string() : it->second;
}

void SnapshotPublisher::loop() {
  while (true) {
    Staged s;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (stopping_) return;
      s = std::move(queue_.front());
      queue_.pop_front();
      in_flight_ = true;
    }
    const auto t0 = Clock::now();
    Outcome outcome;
    std::chrono::milliseconds backoff = opt_.backoff;
    const auto deadline = t0 + opt_.deadline;
    while (true) {
      outcome = publish_once(s);
      if (outcome.status.is_ok() || !outcome.retryable() || Clock::now() + backoff > deadline) break;
      std::fprintf(stderr, "trainer-job: publishing snapshot %s (step %lld) failed, retrying: %s\n",
                   s.result.snapshot_id.substr(0, 12).c_str(), static_cast<long long>(s.result.step),
                   outcome.status.message().c_str());
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, backoff, [&] { return stopping_; })) break;
      backoff = std::min(backoff * 2, opt_.max_backoff);
    }
    record(tel::CheckpointOperation::kPublish, seconds_since(t0), outcome);
    observe(tel::CheckpointOperation::kPublish, t0, outcome.status, s);
    if (!outcome.status.is_ok()) {
      std::fprintf(stderr, "trainer-job: publishing snapshot %s (step %lld) failed: %s\n",
                   s.result.snapshot_id.substr(0, 12).c_str(), static_cast<long long>(s.result.step),
                   outcome.status.message().c_str());
    } else {
      // Published: the staged copy is no longer needed.
      std::error_code ec;
      fs::remove_all(s.dir, ec);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      s.result.status = outcome.status;
      if (!outcome.status.is_ok()) kept_[s.result.snapshot_id] = s.dir;  // staged still: say where
      if (outcome.status.code() == StatusCode::kResourceExhausted && !disk_full_) {
        disk_full_ = outcome.status.with_context("publishing the snapshot of step " + std::to_string(s.result.step));
      }
      results_.push_back(s.result);
      in_flight_ = false;
      pending_gauge_.set(static_cast<int64_t>(queue_.size()));
    }
    cv_.notify_all();
  }
}

void SnapshotPublisher::observe(tel::CheckpointOperation op, Clock::time_point t0, const Status& status,
                                const Staged& s, const std::string& kind) const {
  if (!opt_.observer) return;
  const auto end = std::chrono::system_clock::now();
  const auto start = end - std::chrono::duration_cast<std::chrono::system_clock::duration>(Clock::now() - t0);
  opt_.observer({.operation = op, .snapshot_id = s.result.snapshot_id, .step = s.result.step, .kind = kind,
                 .start = start, .end = end, .status = status});
}

SnapshotPublisher::Outcome SnapshotPublisher::publish_once(const Staged& s) {
  protocol::Reservation r{.snapshot_id = s.result.snapshot_id, .attempt = opt_.attempt, .step = s.result.step,
                          .epoch = s.epoch};
  for (const auto& [kind, text] : s.manifests) r.kinds[kind] = {sha256_hex(text), s.bytes.at(kind)};
  {
    const auto t0 = Clock::now();
    Status st = catalog_.reserve(r);
    Outcome o{st, st.is_ok() ? std::nullopt : std::optional(tel::CheckpointFailureReason::kCatalog)};
    record(tel::CheckpointOperation::kReserve, seconds_since(t0), o);
    observe(tel::CheckpointOperation::kReserve, t0, st, s);
    if (!st.is_ok()) return o;
  }
  for (const auto& [kind, text] : s.manifests) {
    Outcome o = upload(s, kind);
    if (!o.status.is_ok()) return o;
  }
  for (const auto& [kind, text] : s.manifests) {
    const auto t0 = Clock::now();
    Status st = catalog_.commit(s.result.snapshot_id, kind);
    Outcome o{st, std::nullopt};
    if (!st.is_ok()) {
      o.reason = st.code() == StatusCode::kUnavailable ? tel::CheckpointFailureReason::kCatalog
                                                       : tel::CheckpointFailureReason::kValidation;
    }
    record(tel::CheckpointOperation::kAcknowledge, seconds_since(t0), o, kind);
    observe(tel::CheckpointOperation::kAcknowledge, t0, st, s, kind);
    if (!st.is_ok()) return o;
  }
  return {Status::ok(), std::nullopt};
}

SnapshotPublisher::Outcome SnapshotPublisher::upload(const Staged& s, const std::string& kind) {
  const auto t0 = Clock::now();
  const std::string key = protocol::snapshot_key(s.result.snapshot_id, kind);
  const std::string source = (fs::path(s.dir) / kind).string();
  Outcome o{Status::ok(), std::nullopt};
  int64_t transferred = 0;
  Status st = storage_.publish_new(source, key);
  if (st.is_ok()) {
    transferred = s.bytes.at(kind) + static_cast<int64_t>(s.manifests.at(kind).size());
  } else if (st.code() == StatusCode::kAlreadyExists) {
    // An immutable destination: the same manifest is the same bytes (success), else a conflict.
    auto there = storage_.get(key + "/" + protocol::kManifestFile);
    if (there.is_ok() && *there == s.manifests.at(kind)) {
      st = Status::ok();
    } else {
      o = {already_exists("the destination " + key + " already holds different bytes"),
           tel::CheckpointFailureReason::kConflict};
    }
  } else {
    o = {st, tel::CheckpointFailureReason::kStorage};
  }
  record(tel::CheckpointOperation::kUpload, seconds_since(t0), o, kind);
  observe(tel::CheckpointOperation::kUpload, t0, o.status, s, kind);
  if (transferred > 0 || !o.status.is_ok()) {
    transfer_.record(transferred, {.checkpoint_operation = tel::CheckpointOperation::kUpload,
                                   .checkpoint_outcome = o.status.is_ok() ? tel::CheckpointOutcome::kSuccess
                                                                          : tel::CheckpointOutcome::kFailure,
                                   .checkpoint_artifact_kind = artifact_kind(kind),
                                   .checkpoint_storage_mode = storage_mode_of(storage_)});
  }
  return o;
}

}  // namespace trainer::job

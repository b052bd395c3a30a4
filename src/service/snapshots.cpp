// The snapshot catalog: the job's callbacks (reserve before upload, commit each uploaded kind
// after verifying it) and the catalog as users read it. Only committed snapshots are listed;
// bytes from an interrupted upload stay a reservation, never a snapshot.
//
// Stored document (store.h's snapshots table): {snapshotId, runId, attempt, savedStep, epoch,
// state: reserved|committed, createdAt, kinds: {KIND: {manifestDigest, bytes, state, committedAt,
// location}}}. The snapshot is "committed" once any kind is; weights and trainingState commit
// separately.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "common/sha256.h"
#include "protocol/snapshot.h"
#include "service/phases.h"
#include "service/snapshot_catalog.h"

namespace trainer::service {
namespace {

namespace tel = trainer::telemetry;

constexpr int64_t kMaxSnapshotPage = 100;

// The commit test hook (ServiceOptions::commit_pause) holds the first commit a process serves.
std::atomic<bool> commit_held{false};

void hold_commit(std::chrono::milliseconds pause, const std::string& id, const std::string& kind,
                 const char* at) {
  if (pause.count() <= 0 || commit_held.exchange(true)) return;
  std::fprintf(stderr, "trainerd: test hook: commit of snapshot %s kind %s held %s for %lld ms\n", id.c_str(),
               kind.c_str(), at, static_cast<long long>(pause.count()));
  std::this_thread::sleep_for(pause);
}

}  // namespace

json present_snapshot(const json& doc) {
  json out = doc;
  json artifacts = json::array();
  int64_t bytes = 0;
  const json kinds = doc.value("kinds", json::object());
  for (const auto& [kind, k] : kinds.items()) {
    if (k.value("state", std::string()) != "committed") continue;
    artifacts.push_back(kind);
    bytes += k.value("bytes", int64_t{0});
  }
  out["artifacts"] = artifacts;
  out["sizeBytes"] = bytes;
  const std::string state = doc.value("state", std::string());
  out["status"] = state == "committed" ? "Available" : state == "unavailable" ? "Unavailable" : "Reserved";
  out["heldBy"] = doc.value("holds", json::array());
  out.erase("holds");
  return out;
}

Result<store::JobAttemptRow> SnapshotCatalog::authenticate_job(const JobCredentials& job) {
  if (job.job_id.empty()) {
    return invalid_field(kJobIdHeader, "no job attempt named: send X-Trainer-Job: TRAINER_JOB_ID");
  }
  if (job.token.empty()) {
    return invalid_field(kJobTokenHeader,
                         "job attempt " + job.job_id + ": no token: send Authorization: Bearer TRAINER_JOB_TOKEN");
  }
  auto attempt = core_.authenticated_attempt(job.job_id, job.token);
  if (attempt.is_ok()) return attempt;
  const Status& st = attempt.status();
  if (st.code() == StatusCode::kNotFound) return invalid_field(kJobIdHeader, st.message());
  if (st.code() == StatusCode::kInvalidArgument) return invalid_field(kJobTokenHeader, st.message());
  return st;  // the store did not answer
}

Status SnapshotCatalog::authorize_job(const store::JobAttemptRow& attempt, const std::string& run_id) {
  auto run = core_.resolve_run(run_id, "run");
  if (!run.is_ok()) return run.status();
  auto refuse = [](const std::string& message) {
    return Status(StatusCode::kFailedPrecondition, kJobIdHeader, message + ": it may not change its snapshots");
  };
  if (attempt.owner_kind != "run" || attempt.owner_id != run->id) {
    return refuse("job attempt " + attempt.job_id + " works for " + attempt.owner_kind + " " + attempt.owner_id +
                  ", not for run " + run->id);
  }
  const std::string current = run->id + "-" + std::to_string(run->attempt);
  if (attempt.job_id != current) {
    return refuse("job attempt " + attempt.job_id + " is not run " + run->id + "'s current attempt (" + current + ")");
  }
  return Status::ok();
}

Result<std::pair<json, bool>> SnapshotCatalog::reserve(const JobCredentials& job, const std::string& run_ref,
                                                            const json& body) {
  TRAINER_ASSIGN_OR_RETURN(store::JobAttemptRow caller, authenticate_job(job));
  std::lock_guard<std::mutex> lock(core_.mu);
  auto run = core_.resolve_run(run_ref, "run");
  if (!run.is_ok()) return run.status();
  TRAINER_RETURN_IF_ERROR(authorize_job(caller, run->id));
  TRAINER_ASSIGN_OR_RETURN(protocol::Reservation r, protocol::parse_reservation(body));
  if (is_terminal(run->phase)) {
    return failed_precondition("run " + run->id + " has ended (" + std::string(phase_name(run->phase)) +
                               "); it takes no new snapshots");
  }
  std::map<std::string, std::string> digests;
  for (const auto& [kind, k] : r.kinds) digests[kind] = k.manifest_digest;
  const std::string expected = protocol::snapshot_id(run->id, r.step, digests);
  if (expected != r.snapshot_id) {
    return invalid_field("snapshotId", "does not derive from the run, the step and the manifest digests (expected " +
                                           expected + ")");
  }
  json kinds = json::object();
  for (const auto& [kind, k] : r.kinds) {
    kinds[kind] = {{"manifestDigest", k.manifest_digest},
                   {"bytes", k.bytes},
                   {"state", "reserved"},
                   {"reservedAtSeconds", core_.now()},  // leftovers.cpp abandons it past the deadline
                   {"location", protocol::snapshot_key(r.snapshot_id, kind)}};
  }
  auto existing = core_.store->get_snapshot(r.snapshot_id);
  if (!existing.is_ok()) return existing.status();
  if (existing->has_value()) {
    // The id covers the run, the step and every digest: the same id is the same content. Its
    // kinds not committed are reserved again, from now: an upload is about to (re)start.
    json doc = std::move(**existing);
    bool renewed = false;
    for (auto& [kind, k] : doc["kinds"].items()) {
      const std::string state = k.value("state", std::string());
      if (state != "reserved" && state != "abandoned") continue;
      k["state"] = "reserved";
      k["reservedAtSeconds"] = core_.now();
      k.erase("abandonedAt");
      renewed = true;
    }
    if (renewed) {
      if (doc.value("state", std::string()) == "abandoned") doc["state"] = "reserved";
      TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status { return core_.store->update_snapshot(doc); }));
    }
    return std::make_pair(present_snapshot(doc), false);
  }
  json doc = {{"snapshotId", r.snapshot_id}, {"runId", run->id},   {"attempt", r.attempt},
              {"savedStep", r.step},         {"epoch", r.epoch},   {"state", "reserved"},
              {"createdAt", core_.now_rfc3339()},  {"kinds", kinds}};
  TRAINER_RETURN_IF_ERROR(core_.store->insert_snapshot(doc));
  return std::make_pair(present_snapshot(doc), true);
}

Result<std::string> SnapshotCatalog::resolve_id(const std::string& ref, const std::string& field) {
  if (ref.empty() || !is_hex(ref)) {
    return field_status(StatusCode::kNotFound, field, "no snapshot with id '" + ref + "' (snapshot ids are lowercase hex)");
  }
  auto ids = core_.store->snapshot_ids_with_prefix(ref, 10);
  if (!ids.is_ok()) return ids.status();
  if (std::find(ids->begin(), ids->end(), ref) != ids->end()) return ref;
  if (ids->size() > 1) {
    std::string c;
    for (const auto& i : *ids) c += (c.empty() ? "" : ", ") + i;
    return invalid_field(field, "'" + ref + "' is an ambiguous id prefix (candidates: " + c + ")");
  }
  if (ids->empty()) {
    return field_status(StatusCode::kNotFound, field,
                        "no snapshot with id '" + ref + "'; list a run's snapshots with: trainer runs snapshots RUN");
  }
  return ids->front();
}

// Reads the uploaded kind back from storage and checks it against the reservation: the
// manifest's digest, its identity (run, step, kind) and every payload file's size and digest.
Status SnapshotCatalog::verify_kind(const json& doc, const std::string& kind) {
  const json& k = doc["kinds"][kind];
  const std::string key = k.value("location", std::string());
  // A store that does not answer is its error (503: the job retries), not a missing upload (400).
  auto unreadable = [](const Status& st) { return st.code() != StatusCode::kNotFound; };
  auto text = core_.artifacts().get(key + "/" + protocol::kManifestFile);
  if (!text.is_ok() && unreadable(text.status())) return text.status().with_context("reading the uploaded manifest");
  if (!text.is_ok()) return invalid_field("kind", "no uploaded manifest under " + key + ": " + text.status().message());
  if (sha256_hex(*text) != k.value("manifestDigest", std::string())) {
    return invalid_field("kind", "the uploaded manifest of " + kind + " does not match the reserved digest");
  }
  auto manifest = protocol::parse_manifest(*text);
  if (!manifest.is_ok()) return manifest.status().with_field("manifest");
  if (manifest->kind != kind || manifest->run_id != doc.value("runId", std::string()) ||
      manifest->engine_step != doc.value("savedStep", int64_t{-1})) {
    return invalid_field("manifest", "declares kind " + manifest->kind + ", run " + manifest->run_id + ", step " +
                                         std::to_string(manifest->engine_step) + ", not what was reserved");
  }
  for (const auto& f : manifest->files) {
    auto bytes = core_.artifacts().get(key + "/" + f.path);
    if (!bytes.is_ok() && unreadable(bytes.status())) return bytes.status().with_context("reading " + f.path);
    if (!bytes.is_ok()) return invalid_field("manifest", "payload file " + f.path + " is missing");
    if (static_cast<int64_t>(bytes->size()) != f.bytes) {
      return invalid_field("manifest", "payload file " + f.path + " has " + std::to_string(bytes->size()) +
                                           " bytes, the manifest declares " + std::to_string(f.bytes));
    }
    if (sha256_hex(*bytes) != f.sha256) return invalid_field("manifest", "payload file " + f.path + " fails its digest");
  }
  return Status::ok();
}

Result<json> SnapshotCatalog::commit(const JobCredentials& job, const std::string& snapshot_ref,
                                          const json& body) {
  const double started = core_.now();
  TRAINER_ASSIGN_OR_RETURN(store::JobAttemptRow caller, authenticate_job(job));
  auto kind_it = body.find("kind");
  if (kind_it == body.end() || !kind_it->is_string()) return invalid_field("kind", "required: weights or trainingState");
  const std::string kind = kind_it->get<std::string>();
  TRAINER_RETURN_IF_ERROR(protocol::check_artifact_kind(kind, "kind"));
  auto attempt = [&](tel::ServiceStage stage, tel::ServiceOutcome outcome,
                     std::optional<tel::ServiceFailureReason> reason = std::nullopt) {
    core_.metrics.operation_attempt(
        {.operation = tel::ServiceOperation::kCommitSnapshot, .stage = stage, .outcome = outcome, .reason = reason});
  };
  auto ended = [&](tel::ServiceOutcome outcome, std::optional<tel::ServiceFailureReason> reason = std::nullopt) {
    core_.metrics.operation_ended(tel::ServiceOperation::kCommitSnapshot, outcome, core_.now() - started, reason);
  };
  std::lock_guard<std::mutex> lock(core_.mu);
  auto id = resolve_id(snapshot_ref, "snapshot");
  if (!id.is_ok()) return id.status();
  auto found = core_.store->get_snapshot(*id);
  if (!found.is_ok()) return found.status();
  if (!found->has_value()) return not_found("no snapshot with id '" + *id + "'");
  json doc = std::move(**found);
  TRAINER_RETURN_IF_ERROR(authorize_job(caller, doc.value("runId", std::string())));
  if (!doc["kinds"].contains(kind)) {
    return invalid_field("kind", "snapshot " + *id + " reserved no " + kind + " artifact");
  }
  if (doc["kinds"][kind].value("state", std::string()) == "committed") return present_snapshot(doc);  // once
  if (Status st = verify_kind(doc, kind); !st.is_ok()) {
    attempt(tel::ServiceStage::kVerify, tel::ServiceOutcome::kRejected, tel::ServiceFailureReason::kValidation);
    ended(tel::ServiceOutcome::kRejected, tel::ServiceFailureReason::kValidation);
    return st;
  }
  attempt(tel::ServiceStage::kVerify, tel::ServiceOutcome::kSuccess);
  if (!core_.options.commit_pause_stored) hold_commit(core_.options.commit_pause, *id, kind, "before its durable write");
  const std::string t = core_.now_rfc3339();
  doc["kinds"][kind]["state"] = "committed";
  doc["kinds"][kind]["committedAt"] = t;
  doc["state"] = "committed";
  Status st = core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->update_snapshot(doc));
    auto run = core_.resolve_run(doc.value("runId", std::string()), "run");
    if (!run.is_ok()) return run.status();
    const int64_t step = doc.value("savedStep", int64_t{0});
    json& latest = run->view["latestSnapshot"];
    if (!latest.is_object() || latest.value("savedStep", int64_t{-1}) <= step) {
      latest = {{"snapshotId", *id}, {"savedStep", step}};
    }
    // The newest restorable state: its training state and its weights both committed (the kinds
    // commit one at a time; a job killed between the two left a snapshot no attempt can restore).
    auto committed = [&](const char* k) {
      return doc["kinds"].contains(k) && doc["kinds"][k].value("state", std::string()) == "committed";
    };
    if ((kind == protocol::kTrainingStateKind || kind == protocol::kWeightsKind) &&
        committed(protocol::kTrainingStateKind) && committed(protocol::kWeightsKind) &&
        run->view.value("savedStep", int64_t{-1}) < step) {
      run->view["savedStep"] = step;
      run->view["savedSnapshot"] = *id;
    }
    return core_.store->update_run(run->to_json());
  });
  if (!st.is_ok()) {
    attempt(tel::ServiceStage::kCommit, tel::ServiceOutcome::kFailure, tel::ServiceFailureReason::kCatalog);
    ended(tel::ServiceOutcome::kFailure, tel::ServiceFailureReason::kCatalog);
    return st;
  }
  if (core_.options.commit_pause_stored) hold_commit(core_.options.commit_pause, *id, kind, "after its durable write");
  attempt(tel::ServiceStage::kCommit, tel::ServiceOutcome::kSuccess);
  ended(tel::ServiceOutcome::kSuccess);
  // Retention after the commit is durable; a failed sweep leaves more than the keep counts.
  if (Status swept = apply_retention(doc.value("runId", std::string())); !swept.is_ok()) {
    std::fprintf(stderr, "trainerd: warning: retention of run %s: %s\n", doc.value("runId", std::string()).c_str(),
                 swept.to_string().c_str());
  }
  core_.notify();
  return present_snapshot(doc);
}

Result<json> SnapshotCatalog::list_for_run(const std::string& run_ref, int64_t limit, int64_t offset) {
  if (limit < 1 || limit > kMaxSnapshotPage) {
    return invalid_field("limit", "must be between 1 and " + std::to_string(kMaxSnapshotPage));
  }
  if (offset < 0) return invalid_field("offset", "must not be negative");
  auto run = core_.resolve_run(run_ref, "run");
  if (!run.is_ok()) return run.status();
  auto page = core_.store->list_snapshots(run->id, "committed", limit, offset);
  if (!page.is_ok()) return page.status();
  json snapshots = json::array();
  for (const auto& s : page->snapshots) snapshots.push_back(present_snapshot(s));
  json out = {{"runId", run->id}, {"snapshots", snapshots}, {"total", page->total}};
  if (offset + static_cast<int64_t>(page->snapshots.size()) < page->total) {
    out["nextOffset"] = offset + static_cast<int64_t>(page->snapshots.size());
  }
  return out;
}

Result<json> SnapshotCatalog::get(const std::string& ref) {
  auto id = resolve_id(ref, "snapshot");
  if (!id.is_ok()) return id.status();
  auto found = core_.store->get_snapshot(*id);
  if (!found.is_ok()) return found.status();
  // A snapshot found missing or damaged stays readable, to say why it is Unavailable.
  const std::string state = found->has_value() ? (**found).value("state", std::string()) : "";
  if (state != "committed" && state != "unavailable") {
    return field_status(StatusCode::kNotFound, "snapshot", "no committed snapshot with id '" + ref + "'");
  }
  json out = present_snapshot(**found);
  // Provenance from the committed manifests: the writing engine and the base model.
  for (auto& [kind, k] : out["kinds"].items()) {
    if (k.value("state", std::string()) != "committed") continue;
    auto text = core_.artifacts().get(k.value("location", std::string()) + "/" + protocol::kManifestFile);
    if (!text.is_ok()) continue;
    auto m = protocol::parse_manifest(*text);
    if (!m.is_ok()) continue;
    k["files"] = static_cast<int64_t>(m->files.size());
    out["baseModelSha"] = m->base_model_sha;
  }
  return out;
}

}  // namespace trainer::service

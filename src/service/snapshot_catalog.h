// SnapshotCatalog: the durable record of every run's snapshots (protocol/snapshot.h). The job's
// two callbacks, reserve before it uploads and commit each uploaded kind after trainerd verified
// it, come from the run's current job attempt only (snapshots.cpp); users list and read committed
// snapshots; holds keep artifacts against retention (branches, pins, registrations), and
// retention removes the rest after every commit (snapshot_holds.cpp); a snapshot is checked in
// storage before anything restores it (snapshot_check.cpp); the leftovers of publications that
// died are swept (leftovers.cpp).
//
// Thread safety: every public method may be called from any thread and takes the core's mu
// where it changes the catalog; methods named *_locked, and those documented so, need it held
// inside a store transaction (service_core.h).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "service/service_core.h"

namespace trainer::service {

class SnapshotCatalog {
 public:
  explicit SnapshotCatalog(ServiceCore& core) : core_(core) {}

  // Service::reserve_snapshot, commit_snapshot, list_run_snapshots, get_snapshot, pin_snapshot,
  // unpin_snapshot, release_snapshot.
  Result<std::pair<json, bool>> reserve(const JobCredentials& job, const std::string& run_ref, const json& body);
  Result<json> commit(const JobCredentials& job, const std::string& snapshot_ref, const json& body);
  Result<json> list_for_run(const std::string& run_ref, int64_t limit, int64_t offset);
  Result<json> get(const std::string& ref);
  Result<json> pin(const std::string& ref, const json& body);
  Result<json> unpin(const std::string& ref, const json& body);
  Result<json> release(const std::string& ref);

  // For the other parts:
  // A snapshot's id from its id or unique prefix, whatever its state; errors name `field`.
  Result<std::string> resolve_id(const std::string& ref, const std::string& field);
  // mu held, inside a store transaction: adds the branch hold of child run `child` on
  // `artifacts` of the snapshot `doc` (stored).
  Status add_branch_hold(json& doc, const std::string& child, const std::vector<std::string>& artifacts);
  // mu held, inside a store transaction: an ended child run gives its source snapshot back.
  Status release_branch_hold(const RunRecord& run);
  // mu held: the committed `kinds` of snapshot `snapshot_id` are in the artifact store as
  // committed (manifest digest, every file's size); else a refusal naming the snapshot and what is
  // wrong, and the kind marked missing or damaged in the catalog (snapshot_check.cpp).
  Status verify_restorable_locked(const std::string& snapshot_id, const std::vector<std::string>& kinds);
  // The driver thread's tick: removes reservations never committed and storage temporaries
  // older than limits.abandonedPublicationSeconds, when a sweep is due; logs what it removed.
  void sweep_leftovers_if_due();
  // A hold was added or dropped (service telemetry).
  void hold_changed();

 private:
  // The catalog callbacks' caller: the attempt `job` names and proves, else a 401 refusal
  // (job_refusal_http_status()) blaming the header at fault.
  Result<store::JobAttemptRow> authenticate_job(const JobCredentials& job);
  // Whether that attempt is run `run_id`'s current one (else a 403 refusal); with mu held.
  Status authorize_job(const store::JobAttemptRow& attempt, const std::string& run_id);
  // Reads an uploaded kind back from storage and checks it against the reservation.
  Status verify_kind(const json& doc, const std::string& kind);
  // Retention of run `run_id`'s snapshots after a commit or a released hold (snapshot_holds.cpp).
  Status apply_retention(const std::string& run_id);
  // Marks reserved kinds older than the deadline abandoned and deletes their uploads; *removed
  // counts the snapshots it changed so (leftovers.cpp).
  Status sweep_abandoned_reservations(int64_t* removed);

  ServiceCore& core_;
  // When the driver last swept leftovers; none yet at first. The driver thread's only.
  std::optional<std::chrono::steady_clock::time_point> last_leftover_sweep_;
};

// A catalog document as users see it: the stored one plus what it implies (artifacts, sizeBytes,
// status, heldBy from its holds).
json present_snapshot(const json& doc);

}  // namespace trainer::service

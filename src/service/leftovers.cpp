// Leftovers of publications that died (docs/snapshots.md, "Abandoned publications"): a job
// killed between its reservation and its commit leaves a reservation that never commits, with
// whatever bytes it uploaded, and a folder store's publish killed mid-copy leaves its
// "KEY.tmp.PID.N" temporary. Neither is ever listed; both are removed here once older than
// limits.abandonedPublicationSeconds, which is at least the publication deadline, so no live
// job still works on one.
#include <algorithm>
#include <cstdio>

#include "service/phases.h"
#include "service/snapshot_catalog.h"

namespace trainer::service {
namespace {

// Reservations looked at per sweep, oldest first (the rest wait for the next sweep).
constexpr int64_t kReservationsPerSweep = 200;
// Sweeps run at most this often, and at least every quarter of the deadline.
constexpr std::chrono::seconds kLongestSweepInterval{60};

}  // namespace

void SnapshotCatalog::sweep_leftovers_if_due() {
  const auto deadline = std::chrono::seconds(core_.options.config.limits.abandoned_publication_seconds);
  const auto interval = std::clamp<std::chrono::steady_clock::duration>(deadline / 4, core_.options.tick, kLongestSweepInterval);
  const auto now_steady = core_.options.clock->steady_now();
  if (last_leftover_sweep_ && now_steady - *last_leftover_sweep_ < interval) return;
  last_leftover_sweep_ = now_steady;
  int64_t reservations = 0, temporaries = 0;
  Status st = sweep_abandoned_reservations(&reservations);
  for (storage::Storage* s : {core_.storage.get(), core_.artifact_store.get()}) {
    if (s == nullptr || !st.is_ok()) continue;
    auto removed = s->remove_abandoned_temporaries(deadline);
    if (removed.is_ok()) temporaries += *removed;
    if (!removed.is_ok()) st = removed.status().with_context(s->describe());
  }
  if (reservations > 0 || temporaries > 0) {
    std::fprintf(stderr,
                 "trainerd: removed the leftovers of publications that died over %lld s ago: %lld reservations "
                 "never committed, %lld temporaries\n",
                 static_cast<long long>(deadline.count()), static_cast<long long>(reservations),
                 static_cast<long long>(temporaries));
  }
  if (!st.is_ok()) {
    std::fprintf(stderr, "trainerd: warning: removing the leftovers of publications that died: %s (retried in %lld s)\n",
                 st.to_string().c_str(),
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(interval).count()));
  }
}

Status SnapshotCatalog::sweep_abandoned_reservations(int64_t* removed) {
  const double cutoff = core_.now() - core_.options.config.limits.abandoned_publication_seconds;
  auto found = core_.store->snapshots_with_reserved_kinds(kReservationsPerSweep);
  if (!found.is_ok()) return found.status();
  for (const json& listed : *found) {
    const std::string id = listed.value("snapshotId", std::string());
    std::vector<std::string> keys;  // what to delete from storage once the catalog says so
    {
      std::lock_guard<std::mutex> lock(core_.mu);  // a commit of the same snapshot waits, or came first
      auto current = core_.store->get_snapshot(id);
      if (!current.is_ok()) return current.status();
      if (!current->has_value()) continue;
      json doc = std::move(**current);
      bool changed = false, any_committed = false;
      for (auto& [kind, k] : doc["kinds"].items()) {
        const std::string state = k.value("state", std::string());
        if (state == "committed") any_committed = true;
        if (state != "reserved") continue;
        if (!k.contains("reservedAtSeconds")) {  // reserved before trainerd recorded when: from now
          k["reservedAtSeconds"] = core_.now();
          changed = true;
          continue;
        }
        if (k.value("reservedAtSeconds", 0.0) > cutoff) continue;
        k["state"] = "abandoned";
        k["abandonedAt"] = core_.now_rfc3339();
        keys.push_back(k.value("location", std::string()));
        changed = true;
      }
      if (!changed) continue;
      const bool whole = !any_committed && std::all_of(doc["kinds"].begin(), doc["kinds"].end(), [](const json& k) {
        return k.value("state", std::string()) == "abandoned";
      });
      if (whole) doc["state"] = "abandoned";
      TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status { return core_.store->update_snapshot(doc); }));
      if (whole && !keys.empty()) {
        // The snapshot's own folder ("snapshots/ID"), with anything else the upload left in it.
        const std::string& location = keys.front();
        const size_t slash = location.rfind('/');
        if (slash != std::string::npos && slash > 0) keys = {location.substr(0, slash)};
      }
    }
    for (const auto& key : keys) {
      if (key.empty()) continue;
      Status gone = core_.artifacts().remove(key);
      if (!gone.is_ok()) return gone.with_context("removing the upload of abandoned reservation " + id);
    }
    if (!keys.empty()) ++*removed;
  }
  return Status::ok();
}

}  // namespace trainer::service

// Before a run is admitted to restore a snapshot (`runs resume`, `branch`, `continue`, `sweep`):
// the snapshot's artifacts are still in the artifact store as they were committed. A snapshot
// deleted or damaged behind the catalog's back is refused by name at the request, before a
// device is claimed or a job started; a missing one is marked so in the catalog, never listed
// as Available again.
//
// The check reads each kind's manifest (its digest must be the committed one) and the size of
// every payload file; the job verifies every file's digest when it restores.
#include <cstdio>
#include <map>

#include "common/sha256.h"
#include "protocol/snapshot.h"
#include "service/phases.h"
#include "service/snapshot_catalog.h"

namespace trainer::service {
namespace {

// How a kind's artifacts differ from what was committed; "" when they match. `gone` says the
// difference is that something is missing (not damaged).
struct Finding {
  std::string problem;
  bool gone = false;
};

}  // namespace

Status SnapshotCatalog::verify_restorable_locked(const std::string& snapshot_id, const std::vector<std::string>& kinds) {
  auto found = core_.store->get_snapshot(snapshot_id);
  if (!found.is_ok()) return found.status();
  if (!found->has_value()) return field_status(StatusCode::kNotFound, "snapshot", "no snapshot with id '" + snapshot_id + "'");
  json doc = std::move(**found);
  // Anything but "not there" is the store's failure to answer (503), never the snapshot's fault.
  auto absent = [](const Status& st) { return st.code() == StatusCode::kNotFound; };
  // Every committed kind is looked at, so the catalog learns all that is gone; the request is
  // refused for the kinds it restores.
  std::map<std::string, Finding> findings;
  for (const auto& [kind, k] : doc["kinds"].items()) {
    if (k.value("state", std::string()) != "committed") continue;  // the caller's own check names it
    const std::string key = k.value("location", std::string());
    Finding finding;
    auto text = core_.artifacts().get(key + "/" + protocol::kManifestFile);
    if (!text.is_ok() && !absent(text.status())) {
      return text.status().with_context("checking snapshot " + snapshot_id + "'s " + kind);
    }
    if (!text.is_ok()) {
      finding = {"its manifest " + key + "/" + protocol::kManifestFile + " is gone", true};
    } else if (sha256_hex(*text) != k.value("manifestDigest", std::string())) {
      finding = {"its manifest " + key + "/" + protocol::kManifestFile + " is not the one committed", false};
    } else if (auto manifest = protocol::parse_manifest(*text); !manifest.is_ok()) {
      finding = {"its manifest cannot be read: " + manifest.status().message(), false};
    } else {
      for (const auto& f : manifest->files) {
        auto size = core_.artifacts().size(key + "/" + f.path);
        if (!size.is_ok() && !absent(size.status())) {
          return size.status().with_context("checking snapshot " + snapshot_id + "'s " + kind);
        }
        if (!size.is_ok()) {
          finding = {"its file " + key + "/" + f.path + " is gone", true};
          break;
        }
        if (*size != f.bytes) {
          finding = {"its file " + key + "/" + f.path + " has " + std::to_string(*size) + " bytes, " +
                         std::to_string(f.bytes) + " were committed",
                     false};
          break;
        }
      }
    }
    if (!finding.problem.empty()) findings[kind] = finding;
  }
  if (findings.empty()) return Status::ok();
  // The catalog notices: such a kind is no longer offered (listed, restored, branched from).
  bool any_committed = false;
  for (auto& [kind, k] : doc["kinds"].items()) {
    auto it = findings.find(kind);
    if (it != findings.end()) {
      k["state"] = it->second.gone ? "missing" : "damaged";
      k["unavailableSince"] = core_.now_rfc3339();
      k["unavailableReason"] = it->second.problem;
    }
    if (k.value("state", std::string()) == "committed") any_committed = true;
  }
  if (!any_committed) doc["state"] = "unavailable";
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status { return core_.store->update_snapshot(doc); }));
  std::fprintf(stderr, "trainerd: warning: snapshot %s is no longer restorable: %s\n", snapshot_id.c_str(),
               findings.begin()->second.problem.c_str());
  for (const auto& kind : kinds) {
    auto it = findings.find(kind);
    if (it == findings.end()) continue;
    const std::string run = doc.value("runId", std::string());
    return field_status(StatusCode::kFailedPrecondition, "snapshot",
                        "snapshot " + snapshot_id + " of run " + run + " (step " +
                            std::to_string(doc.value("savedStep", int64_t{0})) + ") cannot be restored: its " + kind +
                            " artifact is " + (it->second.gone ? "missing" : "damaged") + " (" + it->second.problem +
                            "); the catalog no longer offers it. Choose another with `trainer runs snapshots " +
                            run.substr(0, 8) + "`");
  }
  return Status::ok();
}

}  // namespace trainer::service

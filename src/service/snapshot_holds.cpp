// Holds on snapshots and retention (docs/lineage.md, "Holds and retention").
//
// A snapshot's document keeps `holds`: [{holder: branch|pin|registration, runId?, artifacts:
// [weights, trainingState], since}]. A running child run holds what it restores of its source
// until it ends; an operator pins (`snapshots pin|unpin`); a registration in progress holds the
// weights it copies (`snapshots release` drops the hold a failed one left behind).
//
// Retention, after every commit of a run's snapshot: of the run's committed snapshots, the
// newest execution.keepAdapters weights artifacts and the newest execution.keepTrainingStates
// training states (default 2: the newest to continue or pause against, and the one before it)
// stay, and so do the newest snapshot (a completed run's final one), the snapshot a
// paused run will resume from, and every held artifact. The others are marked "deleting" in the
// catalog (committed), removed from storage, then marked "deleted"; a snapshot with no
// artifact left leaves the listing (state "deleted").
#include <algorithm>
#include <set>

#include "protocol/snapshot.h"
#include "service/registry.h"
#include "service/phases.h"
#include "service/snapshot_catalog.h"

namespace trainer::service {
namespace {

namespace tel = trainer::telemetry;

constexpr int64_t kDefaultKeepAdapters = 4;        // plan.h's execution.keepAdapters default
constexpr int64_t kDefaultKeepTrainingStates = 2;  // plan.h's execution.keepTrainingStates default
constexpr int64_t kRetentionPage = 100;

json& holds_of(json& doc) {
  if (!doc.contains("holds") || !doc["holds"].is_array()) doc["holds"] = json::array();
  return doc["holds"];
}

bool held(const json& doc, const std::string& kind) {
  for (const auto& h : doc.value("holds", json::array())) {
    for (const auto& a : h.value("artifacts", json::array())) {
      if (a == kind) return true;
    }
  }
  return false;
}

std::string kind_state(const json& doc, const std::string& kind) {
  return doc.value("kinds", json::object()).value(kind, json::object()).value("state", std::string());
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : " and ") + i;
  return out;
}

// The artifact kinds a pin or unpin names ({kinds: [...]}); both when absent.
Result<std::vector<std::string>> requested_kinds(const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"kinds"}));
  auto it = body.find("kinds");
  if (it == body.end() || it->is_null()) return std::vector<std::string>{protocol::kWeightsKind, protocol::kTrainingStateKind};
  if (!it->is_array() || it->empty()) return invalid_field("kinds", "must be a list of weights and/or trainingState");
  std::vector<std::string> kinds;
  for (const auto& k : *it) {
    if (!k.is_string()) return invalid_field("kinds", "must be a list of weights and/or trainingState");
    TRAINER_RETURN_IF_ERROR(protocol::check_artifact_kind(k.get<std::string>(), "kinds"));
    if (std::find(kinds.begin(), kinds.end(), k.get<std::string>()) == kinds.end()) kinds.push_back(k);
  }
  return kinds;
}

}  // namespace

void SnapshotCatalog::hold_changed() {
  core_.metrics.operation_attempt({.operation = tel::ServiceOperation::kHoldSnapshot,
                              .stage = tel::ServiceStage::kRetain,
                              .outcome = tel::ServiceOutcome::kSuccess});
  core_.metrics.operation_ended(tel::ServiceOperation::kHoldSnapshot, tel::ServiceOutcome::kSuccess, 0.0);
}

Status SnapshotCatalog::add_branch_hold(json& doc, const std::string& child, const std::vector<std::string>& artifacts) {
  holds_of(doc).push_back(
      {{"holder", "branch"}, {"runId", child}, {"artifacts", artifacts}, {"since", core_.now_rfc3339()}});
  return core_.store->update_snapshot(doc);
}

Status SnapshotCatalog::release_branch_hold(const RunRecord& run) {
  const json source = run.view.value("sourceSnapshotId", json(nullptr));
  if (!source.is_string()) return Status::ok();
  auto found = core_.store->get_snapshot(source.get<std::string>());
  if (!found.is_ok()) return found.status();
  if (!found->has_value()) return Status::ok();
  json doc = std::move(**found);
  json& holds = holds_of(doc);
  const size_t before = holds.size();
  holds.erase(std::remove_if(holds.begin(), holds.end(),
                             [&](const json& h) {
                               return h.value("holder", std::string()) == "branch" &&
                                      h.value("runId", std::string()) == run.id;
                             }),
              holds.end());
  if (holds.size() == before) return Status::ok();
  return core_.store->update_snapshot(doc);
}

Status SnapshotCatalog::apply_retention(const std::string& run_id) {
  auto run = core_.resolve_run(run_id, "run");
  if (!run.is_ok()) return run.status();
  const json execution = run->view.value("plan", json::object()).value("execution", json::object());
  const int64_t keep_weights = std::max<int64_t>(1, execution.value("keepAdapters", kDefaultKeepAdapters));
  const int64_t keep_states = std::max<int64_t>(1, execution.value("keepTrainingStates", kDefaultKeepTrainingStates));
  // What a paused run will resume from, and what a resumed attempt restores until it trains.
  std::set<std::string> protect;
  const bool paused = run->phase == Phase::kPausing || run->phase == Phase::kPaused;
  if (paused && run->view.contains("pause") && run->view["pause"].value("snapshotId", json(nullptr)).is_string()) {
    protect.insert(run->view["pause"]["snapshotId"].get<std::string>());
  }
  if (run->resume_from && run->phase != Phase::kTraining && !is_terminal(run->phase)) {
    protect.insert(*run->resume_from);
  }

  std::vector<json> docs;
  for (int64_t offset = 0;; offset += kRetentionPage) {
    auto page = core_.store->list_snapshots(run->id, "committed", kRetentionPage, offset);
    if (!page.is_ok()) return page.status();
    docs.insert(docs.end(), page->snapshots.begin(), page->snapshots.end());
    if (page->snapshots.empty() || static_cast<int64_t>(docs.size()) >= page->total) break;
  }
  int64_t seen_weights = 0, seen_states = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    json& doc = docs[i];
    std::vector<std::string> sweep;
    for (const char* kind : {protocol::kWeightsKind, protocol::kTrainingStateKind}) {
      if (kind_state(doc, kind) == "deleting") {  // decided by an earlier sweep that did not finish
        sweep.push_back(kind);
        continue;
      }
      if (kind_state(doc, kind) != "committed") continue;
      int64_t& seen = kind == std::string(protocol::kWeightsKind) ? seen_weights : seen_states;
      const int64_t keep = kind == std::string(protocol::kWeightsKind) ? keep_weights : keep_states;
      if (++seen <= keep || i == 0 || held(doc, kind) || protect.count(doc.value("snapshotId", std::string()))) {
        continue;
      }
      sweep.push_back(kind);
    }
    if (sweep.empty()) continue;
    // Durable intent first: a pin or branch refuses a kind being deleted, and a restart finds it.
    for (const auto& kind : sweep) doc["kinds"][kind]["state"] = "deleting";
    TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status { return core_.store->update_snapshot(doc); }));
    bool any_left = false;
    for (const auto& kind : sweep) {
      const double started = core_.now();
      Status removed = core_.artifacts().remove(doc["kinds"][kind].value("location", std::string()));
      const auto outcome = removed.is_ok() ? tel::ServiceOutcome::kSuccess : tel::ServiceOutcome::kFailure;
      const auto reason = removed.is_ok() ? std::nullopt : std::optional(tel::ServiceFailureReason::kProvider);
      core_.metrics.operation_attempt({.operation = tel::ServiceOperation::kDeleteSnapshot,
                                  .stage = tel::ServiceStage::kDelete,
                                  .outcome = outcome,
                                  .reason = reason});
      core_.metrics.operation_ended(tel::ServiceOperation::kDeleteSnapshot, outcome, core_.now() - started, reason);
      if (!removed.is_ok()) {
        std::fprintf(stderr, "trainerd: warning: retention of snapshot %s %s: %s\n",
                     doc.value("snapshotId", std::string()).c_str(), kind.c_str(), removed.to_string().c_str());
        continue;  // stays "deleting": never offered again; the next sweep retries it
      }
      doc["kinds"][kind]["state"] = "deleted";
      doc["kinds"][kind]["deletedAt"] = core_.now_rfc3339();
    }
    for (const auto& [kind, k] : doc["kinds"].items()) {
      if (k.value("state", std::string()) == "committed") any_left = true;
    }
    if (!any_left) {
      doc["state"] = "deleted";
      // The snapshot's own folder, once every kind under it is gone (a folder store keeps it).
      const std::string location = doc["kinds"][sweep.front()].value("location", std::string());
      const std::string root = location.substr(0, location.rfind('/'));
      if (bool all_gone = true; !root.empty()) {
        for (const auto& [kind, k] : doc["kinds"].items()) all_gone = all_gone && k.value("state", "") == "deleted";
        if (all_gone) (void)core_.artifacts().remove(root);
      }
    }
    TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status { return core_.store->update_snapshot(doc); }));
  }
  return Status::ok();
}

Result<json> SnapshotCatalog::pin(const std::string& ref, const json& body) {
  TRAINER_ASSIGN_OR_RETURN(auto kinds, requested_kinds(body));
  std::lock_guard<std::mutex> lock(core_.mu);
  auto id = resolve_id(ref, "snapshot");
  if (!id.is_ok()) return id.status();
  auto found = core_.store->get_snapshot(*id);
  if (!found.is_ok()) return found.status();
  if (!found->has_value() || (**found).value("state", std::string()) != "committed") {
    return field_status(StatusCode::kNotFound, "snapshot", "no committed snapshot with id '" + ref + "'");
  }
  json doc = std::move(**found);
  // All or nothing: every kind named must be there to pin.
  for (const auto& kind : kinds) {
    const std::string state = kind_state(doc, kind);
    if (state == "deleting" || state == "deleted") {
      core_.metrics.operation_attempt({.operation = tel::ServiceOperation::kHoldSnapshot,
                                  .stage = tel::ServiceStage::kRetain,
                                  .outcome = tel::ServiceOutcome::kRejected,
                                  .reason = tel::ServiceFailureReason::kRetention});
      return field_status(StatusCode::kFailedPrecondition, "kinds",
                          "snapshot " + *id + ": retention already began deleting its " + kind + " artifact");
    }
    if (state != "committed") {
      return invalid_field("kinds", "snapshot " + *id + " has no committed " + kind + " artifact; pin --kind " +
                                        (kind == protocol::kWeightsKind ? protocol::kTrainingStateKind
                                                                        : protocol::kWeightsKind));
    }
  }
  json& holds = holds_of(doc);
  auto pin = std::find_if(holds.begin(), holds.end(), [](const json& h) { return h.value("holder", "") == "pin"; });
  std::vector<std::string> pinned;
  if (pin != holds.end()) {
    for (const auto& a : pin->value("artifacts", json::array())) pinned.push_back(a.get<std::string>());
  }
  std::vector<std::string> added;
  for (const auto& kind : kinds) {
    if (std::find(pinned.begin(), pinned.end(), kind) == pinned.end()) added.push_back(kind);
  }
  json out;
  if (added.empty()) {
    out = present_snapshot(doc);
    out["changed"] = false;
    out["message"] = "snapshot " + *id + " is already pinned (" + join(kinds) + ")";
    return out;
  }
  pinned.insert(pinned.end(), added.begin(), added.end());
  if (pin != holds.end()) {
    (*pin)["artifacts"] = pinned;
  } else {
    holds.push_back({{"holder", "pin"}, {"artifacts", pinned}, {"since", core_.now_rfc3339()}});
  }
  TRAINER_RETURN_IF_ERROR(core_.store->update_snapshot(doc));
  hold_changed();
  out = present_snapshot(doc);
  out["changed"] = true;
  out["message"] = "pinned " + join(added) + " of snapshot " + *id + " against retention";
  return out;
}

Result<json> SnapshotCatalog::unpin(const std::string& ref, const json& body) {
  TRAINER_ASSIGN_OR_RETURN(auto kinds, requested_kinds(body));
  std::lock_guard<std::mutex> lock(core_.mu);
  auto id = resolve_id(ref, "snapshot");
  if (!id.is_ok()) return id.status();
  auto found = core_.store->get_snapshot(*id);
  if (!found.is_ok()) return found.status();
  if (!found->has_value() || (**found).value("state", std::string()) != "committed") {
    return field_status(StatusCode::kNotFound, "snapshot", "no committed snapshot with id '" + ref + "'");
  }
  json doc = std::move(**found);
  json& holds = holds_of(doc);
  auto pin = std::find_if(holds.begin(), holds.end(), [](const json& h) { return h.value("holder", "") == "pin"; });
  std::vector<std::string> kept, removed;
  if (pin != holds.end()) {
    for (const auto& a : pin->value("artifacts", json::array())) {
      const std::string kind = a.get<std::string>();
      (std::find(kinds.begin(), kinds.end(), kind) != kinds.end() ? removed : kept).push_back(kind);
    }
  }
  json out;
  if (removed.empty()) {
    out = present_snapshot(doc);
    out["changed"] = false;
    out["message"] = "snapshot " + *id + " is not pinned" + (pin != holds.end() ? " (" + join(kinds) + ")" : "");
    return out;
  }
  if (kept.empty()) {
    holds.erase(pin);
  } else {
    (*pin)["artifacts"] = kept;
  }
  TRAINER_RETURN_IF_ERROR(core_.store->update_snapshot(doc));
  hold_changed();
  TRAINER_RETURN_IF_ERROR(apply_retention(doc.value("runId", std::string())));
  if (auto after = core_.store->get_snapshot(*id); after.is_ok() && after->has_value()) doc = std::move(**after);
  out = present_snapshot(doc);
  out["changed"] = true;
  out["message"] = "unpinned " + join(removed) + " of snapshot " + *id + "; retention applies to it again";
  return out;
}

Result<json> SnapshotCatalog::release(const std::string& ref) {
  std::lock_guard<std::mutex> lock(core_.mu);
  auto id = resolve_id(ref, "snapshot");
  if (!id.is_ok()) return id.status();
  auto found = core_.store->get_snapshot(*id);
  if (!found.is_ok()) return found.status();
  if (!found->has_value()) return field_status(StatusCode::kNotFound, "snapshot", "no snapshot with id '" + ref + "'");
  json doc = std::move(**found);
  json& holds = holds_of(doc);
  json kept = json::array();
  std::vector<std::string> released, remaining;
  for (const auto& h : holds) {
    const std::string holder = h.value("holder", std::string());
    bool leftover = false;
    if (holder == "registration") {
      // Only a failed registration's hold is left over: one still copying keeps what it copies.
      auto model = core_.store->get_trained_model(h.value("modelId", std::string()));
      leftover = !model.is_ok() || !model->has_value() || (**model).value("status", std::string()) == kModelFailed;
    }
    if (holder == "branch") {
      // A branch's hold is left over once its run has ended (or is gone).
      auto child = core_.resolve_run(h.value("runId", std::string()), "run");
      leftover = !child.is_ok() || is_terminal(child->phase);
    }
    const std::string who = holder + (h.contains("runId")     ? " " + h.value("runId", std::string())
                                      : h.contains("modelId") ? " " + h.value("modelId", std::string())
                                                              : "");
    (leftover ? released : remaining).push_back(who);
    if (!leftover) kept.push_back(h);
  }
  if (!released.empty()) {
    holds = kept;
    TRAINER_RETURN_IF_ERROR(core_.store->update_snapshot(doc));
    hold_changed();
  }
  // Retention applies to what is no longer held (including a branch's hold given back earlier).
  if (doc.value("state", std::string()) == "committed") {
    TRAINER_RETURN_IF_ERROR(apply_retention(doc.value("runId", std::string())));
    auto after = core_.store->get_snapshot(*id);
    if (after.is_ok() && after->has_value()) doc = std::move(**after);
  }
  json out = present_snapshot(doc);
  out["changed"] = !released.empty();
  out["message"] = released.empty() ? "snapshot " + *id +
                                          " has no hold of a failed registration or of an ended branch to release" +
                                          (remaining.empty() ? "" : "; still held by " + join(remaining))
                                    : "released " + join(released) + " of snapshot " + *id;
  return out;
}

}  // namespace trainer::service

// Lineage (docs/lineage.md): child runs started from a parent's snapshot (`runs branch`,
// `runs continue`) and the views of the family (`runs branches`, `runs tree`, `runs ancestry`).
//
// A child is a new run: the parent's resolved plan with the override document applied and
// config.hyperparams.training.maxSteps = its own budget (plan/overrides.h), the same workload,
// base model, grader and device count. Its document names where it came from: parentRunId,
// rootRunId, sourceSnapshotId, sourceStep, restore (weights | trainingState), stepBudget and
// childKind (branch | continue), parentMethod and, when the overrides changed the method,
// methodChange {from, to, dropped, message}. The run, its lineage row and its hold on the source snapshot
// are written in one transaction; the hold is given back when the child ends (finish()).
#include <algorithm>
#include <map>

#include "plan/overrides.h"
#include "protocol/snapshot.h"
#include "service/service_state.h"

namespace trainer::service {
namespace {

namespace tel = trainer::telemetry;

constexpr int64_t kMaxLineagePage = 100;   // most children one `runs branches` page lists
constexpr size_t kMaxTreeRuns = 1000;      // most descendants one `runs tree` answer lists
constexpr int kMaxGenerations = 1000;      // longest ancestry chain followed

// The lineage fields a child's document carries (and lineage views repeat).
const char* const kLineageFields[] = {"parentRunId", "rootRunId",  "sourceSnapshotId", "sourceStep",
                                      "restore",     "stepBudget", "childKind",        "sweepPoint",
                                      "parentMethod", "methodChange", "warmStart"};

bool kind_committed(const json& snapshot, const std::string& kind) {
  const json kinds = snapshot.value("kinds", json::object());
  return kinds.contains(kind) && kinds[kind].value("state", std::string()) == "committed";
}

std::string committed_kinds(const json& snapshot) {
  std::string out;
  const json kinds = snapshot.value("kinds", json::object());
  for (const auto& [kind, k] : kinds.items()) {
    if (k.value("state", std::string()) == "committed") out += (out.empty() ? "" : ", ") + kind;
  }
  return out.empty() ? "none" : out;
}

// One run as lineage views list it.
json lineage_entry(const RunRecord& r) {
  json e = {{"runId", r.id},
            {"phase", phase_name(r.phase)},
            {"method", r.method},
            {"createdAt", r.view.value("createdAt", json(nullptr))},
            {"progress", r.view.value("progress", json::object())}};
  for (const char* key : kLineageFields) {
    if (r.view.contains(key)) e[key] = r.view[key];
  }
  for (const char* key : {"configName", "description", "outcome"}) {
    if (r.view.contains(key)) e[key] = r.view[key];
  }
  if (r.outcome) e["outcome"] = *r.outcome;
  return e;
}

// A child's default config name, derived from its own settings: its parent's name followed by
// the config fields whose values differ from the parent's ("lr-3e-3 (learningRate=0.02, maxSteps=3)"),
// so that two configurations never share a name in score tables. `name` is the parent's (as
// `runs annotate --config-name` left it); null when it has none (the table names the child by its
// settings hash); the parent's own when nothing differs. A child of another kind of method
// (`method_changed`) names its method and the fields its overrides set (`overridden`, dotted
// below config): the fields it dropped and the new method's defaults follow from the method.
json derived_config_name(const json& name, const json& parent_plan, const json& child_plan, bool method_changed,
                         const std::map<std::string, json>& overridden) {
  if (!name.is_string() || name.get<std::string>().empty()) return nullptr;
  json a = json::object();
  json b = json::object();
  flatten(parent_plan.value("config", json::object()), "", a);
  flatten(child_plan.value("config", json::object()), "", b);
  auto set_by_overrides = [&](const std::string& key) {
    for (const auto& [path, value] : overridden) {
      const std::string below = path.substr(std::string("config.").size());
      if (key == below || key.rfind(below + ".", 0) == 0) return true;
    }
    return false;
  };
  std::string changed;
  for (const auto& [key, value] : b.items()) {
    if (a.contains(key) && a[key] == value) continue;
    if (method_changed && !a.contains(key) && !set_by_overrides(key)) continue;
    const std::string leaf = key.substr(key.find_last_of('.') == std::string::npos ? 0 : key.find_last_of('.') + 1);
    changed += (changed.empty() ? "" : ", ") + leaf + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  }
  for (const auto& [key, value] : a.items()) {
    if (b.contains(key) || method_changed) continue;
    changed += (changed.empty() ? "" : ", ") + key.substr(key.find_last_of('.') + 1) + "=unset";
  }
  if (changed.empty()) return name;
  return name.get<std::string>() + " (" + changed + ")";
}

// What the child's document says of a method change (plan::MethodChange).
json method_change_json(const plan::MethodChange& change) {
  std::string message = plan::dropped_fields_text(change);
  if (message.empty()) {
    message = std::string("method changed from ") + plan::method_name(change.from) + " to " +
              plan::method_name(change.to) + "; no field dropped";
  }
  return {{"from", plan::method_name(change.from)},
          {"to", plan::method_name(change.to)},
          {"dropped", change.dropped},
          {"message", message}};
}

// What `runs branch` and `runs continue` ask, checked before anything is read.
struct ChildRequest {
  int64_t steps = 0;
  plan::Restore restore = plan::Restore::kWeights;
  json overrides;
  std::optional<std::string> submission;
};

Result<ChildRequest> parse_child_request(const json& body, bool continuation) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"snapshot", "steps", "restore", "overrides", "submissionId"}));
  ChildRequest r;
  auto steps_it = body.find("steps");
  if (steps_it == body.end() || !steps_it->is_number_integer() || steps_it->get<int64_t>() < 1) {
    return invalid_field("steps", "required: the child's budget of optimizer updates, an integer of at least 1");
  }
  r.steps = steps_it->get<int64_t>();
  r.restore = continuation ? plan::Restore::kTrainingState : plan::Restore::kWeights;
  if (auto it = body.find("restore"); it != body.end() && !it->is_null()) {
    const std::string v = it->is_string() ? it->get<std::string>() : it->dump();
    if (v == "trainingState") {
      r.restore = plan::Restore::kTrainingState;
    } else if (v == "weights" && !continuation) {
      r.restore = plan::Restore::kWeights;
    } else if (continuation) {
      return invalid_field("restore", "runs continue restores the whole trainingState; to start from the weights "
                                      "alone use runs branch --restore weights");
    } else {
      return invalid_field("restore", "'" + v + "' is not weights or trainingState");
    }
  }
  r.overrides = body.value("overrides", json(nullptr));
  if (auto it = body.find("submissionId"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return invalid_field("submissionId", "must be a string");
    r.submission = it->get<std::string>();
  }
  return r;
}

// The parent's newest committed snapshot holding training state and weights (what `runs continue`
// starts from; a job killed between the two commits left one without weights).
Result<json> newest_training_state(store::Store& store, const std::string& parent_id) {
  int64_t seen = 0;
  for (int64_t offset = 0;; offset += kMaxLineagePage) {
    auto page = store.list_snapshots(parent_id, "committed", kMaxLineagePage, offset);
    if (!page.is_ok()) return page.status();
    for (const auto& s : page->snapshots) {
      if (kind_committed(s, protocol::kTrainingStateKind) && kind_committed(s, protocol::kWeightsKind)) return s;
    }
    seen += static_cast<int64_t>(page->snapshots.size());
    if (page->snapshots.empty() || seen >= page->total) break;
  }
  return field_status(
      StatusCode::kFailedPrecondition, "snapshot",
      "run " + parent_id + " cannot be continued: none of its " + std::to_string(seen) +
          " committed snapshots holds training state (" +
          (seen == 0 ? std::string("it has saved none yet: a run saves every execution.saveEvery updates and at "
                                   "the end")
                     : std::string("later saves carry weights only when uploads fall behind, and retention "
                                   "deletes older training state")) +
          "); start a child from the weights with: trainer runs branch " + parent_id.substr(0, 8) +
          " --snapshot SNAPSHOT --steps N");
}

// The source holds every kind the child restores, committed.
Status check_source_kinds(const json& snapshot, const std::vector<std::string>& needed, bool continuation,
                          const std::string& parent_id) {
  const std::string snapshot_id = snapshot.value("snapshotId", std::string());
  for (const auto& kind : needed) {
    if (kind_committed(snapshot, kind)) continue;
    const std::string state = snapshot.value("kinds", json::object()).value(kind, json::object()).value("state", "");
    std::string why = state == "deleted" || state == "deleting"
                          ? "its " + kind + " artifact was deleted by retention (execution.keepAdapters)"
                          : "it holds no committed " + kind + " artifact (it holds: " + committed_kinds(snapshot) + ")";
    std::string hint = kind == protocol::kTrainingStateKind && !continuation
                           ? "; branch with --restore weights, or choose a snapshot with training state"
                           : "; choose another snapshot (trainer runs snapshots " + parent_id.substr(0, 8) + ")";
    return field_status(StatusCode::kFailedPrecondition, "snapshot", "snapshot " + snapshot_id + ": " + why + hint);
  }
  return Status::ok();
}

// A submissionId seen before answers its child only for the same source, restore and point:
// the child's plan (what submit_plan compares) does not name them.
Status check_child_submission(store::Store& store, const std::string& submission, const json& lineage) {
  auto seen = store.run_by_submission(submission);
  if (!seen.is_ok()) return seen.status();
  if (!seen->has_value()) return Status::ok();
  auto earlier = RunRecord::from_json(**seen);
  if (!earlier.is_ok()) return earlier.status();
  for (const auto& [key, value] : lineage.items()) {
    if (earlier->view.value(key, json(nullptr)) == value) continue;
    const json& v = earlier->view;
    const std::string what =
        v.contains("parentRunId")
            ? "a " + v.value("childKind", std::string("child")) + " of run " + v.value("parentRunId", "") +
                  " from snapshot " + v.value("sourceSnapshotId", "") + " (restore " + v.value("restore", "") + ")"
            : "which is no child run";
    return field_status(StatusCode::kAlreadyExists, "submissionId",
                        "'" + submission + "' was used by run " + earlier->id + ", " + what + "; its " + key +
                            " differs from this request's; use a new submissionId");
  }
  return Status::ok();
}

// The branch operation: the source retained and the child started, in one transaction.
void record_branch(ServiceTelemetry& metrics, bool ok, double seconds) {
  const auto outcome = ok ? tel::ServiceOutcome::kSuccess : tel::ServiceOutcome::kRejected;
  const auto reason = ok ? std::nullopt : std::optional(tel::ServiceFailureReason::kValidation);
  metrics.operation_attempt(
      {.operation = tel::ServiceOperation::kBranch, .stage = tel::ServiceStage::kRetain, .outcome = outcome, .reason = reason});
  if (ok) {
    metrics.operation_attempt(
        {.operation = tel::ServiceOperation::kBranch, .stage = tel::ServiceStage::kStartChild, .outcome = outcome});
  }
  metrics.operation_ended(tel::ServiceOperation::kBranch, outcome, seconds, reason);
}

}  // namespace

Result<std::pair<json, bool>> ServiceImpl::branch_run(const std::string& parent_ref, const json& body, bool dry_run) {
  return start_child(parent_ref, body, dry_run, false);
}

Result<std::pair<json, bool>> ServiceImpl::continue_run(const std::string& ref, const json& body, bool dry_run) {
  return start_child(ref, body, dry_run, true);
}

Result<json> ServiceImpl::child_source_snapshot(const json& body, const std::string& parent_id, bool continuation) {
  auto it = body.find("snapshot");
  if (it == body.end() || it->is_null()) {
    if (continuation) return newest_training_state(*store_, parent_id);
    return invalid_field("snapshot", "required: the parent's snapshot the child starts from; list them with: "
                                     "trainer runs snapshots " + parent_id.substr(0, 8));
  }
  if (!it->is_string()) return invalid_field("snapshot", "must be a snapshot id or prefix");
  auto id = resolve_snapshot_id(it->get<std::string>(), "snapshot");
  if (!id.is_ok()) return id.status();
  auto found = store_->get_snapshot(*id);
  if (!found.is_ok()) return found.status();
  if (!found->has_value() || (**found).value("state", std::string()) != "committed") {
    return field_status(StatusCode::kNotFound, "snapshot", "no committed snapshot with id '" + *id + "'");
  }
  json snapshot = std::move(**found);
  if (snapshot.value("runId", std::string()) != parent_id) {
    return invalid_field("snapshot", "snapshot " + *id + " belongs to run " + snapshot.value("runId", std::string()) +
                                         ", not to run " + parent_id + "; list its snapshots with: trainer runs "
                                         "snapshots " + parent_id.substr(0, 8));
  }
  return snapshot;
}

Result<std::pair<json, bool>> ServiceImpl::start_child(const std::string& parent_ref, const json& body, bool dry_run,
                                                       bool continuation, const json& sweep_point) {
  const char* verb = continuation ? "runs continue" : "runs branch";
  auto request = parse_child_request(body, continuation);
  if (!request.is_ok()) return request.status();
  auto parent = resolve_run(parent_ref, continuation ? "run" : "parent");
  if (!parent.is_ok()) return parent.status();
  auto source = child_source_snapshot(body, parent->id, continuation);
  if (!source.is_ok()) return source.status();
  const json& snapshot = *source;
  const std::string snapshot_id = snapshot.value("snapshotId", std::string());
  std::vector<std::string> needed = {protocol::kWeightsKind};
  if (request->restore == plan::Restore::kTrainingState) needed.push_back(protocol::kTrainingStateKind);
  TRAINER_RETURN_IF_ERROR(check_source_kinds(snapshot, needed, continuation, parent->id));
  {
    std::lock_guard<std::mutex> lock(mu_);  // a missing artifact is marked in the catalog
    TRAINER_RETURN_IF_ERROR(catalog_.verify_restorable_locked(snapshot_id, needed));
  }

  auto derived = plan::child_plan(parent->view.value("plan", json::object()), request->overrides,
                                  {.restore = request->restore, .continuation = continuation}, request->steps);
  if (!derived.is_ok()) return derived.status();
  json& child = derived->plan;
  child["workload"] = parent->workload_id;  // the workload itself, whatever it is called now
  // The child's name says how its settings differ from its parent's (a continuation keeps the name).
  if (!continuation) {
    auto overridden = plan::flatten_overrides(request->overrides);  // child_plan() accepted them
    const json name = derived_config_name(parent->view.value("configName", json(nullptr)),
                                          parent->view.value("plan", json::object()), child,
                                          derived->method_change.has_value(),
                                          overridden.is_ok() ? *overridden : std::map<std::string, json>{});
    if (name.is_string()) {
      child["configName"] = name;
    } else {
      child.erase("configName");
    }
  }
  if (request->submission) child["submissionId"] = *request->submission;

  json lineage = {{"parentRunId", parent->id},
                  {"rootRunId", parent->view.value("rootRunId", parent->id)},
                  {"sourceSnapshotId", snapshot_id},
                  {"sourceStep", snapshot.value("savedStep", int64_t{0})},
                  {"restore", plan::restore_name(request->restore)},
                  {"stepBudget", request->steps},
                  {"childKind", continuation ? "continue" : "branch"}};
  if (!sweep_point.is_null()) {
    lineage["childKind"] = "sweep";
    lineage["sweepPoint"] = sweep_point;
  }
  if (request->submission && !dry_run) {
    TRAINER_RETURN_IF_ERROR(check_child_submission(*store_, *request->submission, lineage));
  }
  // What the child's plan already says, in words: both methods, and what a change dropped.
  lineage["parentMethod"] = parent->method;
  if (derived->method_change) lineage["methodChange"] = method_change_json(*derived->method_change);
  telemetry::SpanContext child_trace;  // the child's root span, once inserted
  // Under mu_, in the run's transaction: the source is still there, the child holds it.
  auto on_insert = [&](RunRecord& run) -> Status {
    auto found = store_->get_snapshot(snapshot_id);
    if (!found.is_ok()) return found.status();
    if (!found->has_value()) return not_found("snapshot " + snapshot_id + " left the catalog");
    json doc = std::move(**found);
    for (const auto& kind : needed) {
      if (!kind_committed(doc, kind)) {
        return field_status(StatusCode::kFailedPrecondition, "snapshot",
                            "snapshot " + snapshot_id + ": its " + kind + " artifact was deleted meanwhile");
      }
    }
    for (const auto& [key, value] : lineage.items()) run.view[key] = value;
    run.link_trace_id = parent->trace_id;  // the child's own trace links to its parent's
    run.link_span_id = parent->root_span_id;
    child_trace = RunTraces::root_of(run);
    TRAINER_RETURN_IF_ERROR(store_->insert_child(run.id, parent->id));
    return catalog_.add_branch_hold(doc, run.id, needed);
  };
  const double started = now();
  auto out = submit_plan(child, dry_run, on_insert, {{"child", lineage}});
  if (!dry_run) record_branch(metrics_, out.is_ok(), now() - started);
  if (!dry_run && (!out.is_ok() || out->second)) {
    // The branch in the parent's trace, linked to the child's own trace.
    std::vector<telemetry::Attribute> attributes = {{"trainer.child.kind", lineage["childKind"].get<std::string>()},
                                                    {"trainer.snapshot.id", snapshot_id}};
    if (out.is_ok() && out->first.contains("runId")) {
      attributes.push_back({"trainer.child.run_id", out->first["runId"].get<std::string>()});
    }
    core_.traces.operation(*parent, kBranchSpan, started, now(), std::move(attributes),
                           out.is_ok() ? Status::ok() : out.status(),
                           !out.is_ok() || child_trace.trace_id.empty()
                               ? std::vector<telemetry::SpanContext>{}
                               : std::vector<telemetry::SpanContext>{child_trace});
  }
  if (!out.is_ok()) {
    // The plan parser blames the child's plan; say it came from the overrides where it did.
    const Status& st = out.status();
    if (st.field().rfind("config.", 0) == 0 && !request->overrides.is_null()) {
      return Status(st.code(), st.field(), st.message() + " (in the " + std::string(verb) + " overrides)");
    }
  }
  return out;
}

// The children of `parent` that submission `submission` made, all of them (newest first), with a
// count by phase: one submission's state (`runs branches --submission`).
Result<json> ServiceImpl::submission_branches(const RunRecord& parent, const std::string& submission) {
  json branches = json::array();
  json phases = json::object();
  for (int64_t offset = 0;;) {
    TRAINER_ASSIGN_OR_RETURN(auto page, store_->run_children(parent.id, kMaxLineagePage, offset));
    for (const auto& id : page.run_ids) {
      auto child = resolve_run(id, "run");
      if (!child.is_ok()) continue;
      const std::string sid = child->view.value("submissionId", std::string());
      if (sid != submission && sid.rfind(submission + "-", 0) != 0) continue;
      const std::string phase = phase_name(child->phase);
      phases[phase] = phases.value(phase, int64_t{0}) + 1;
      branches.push_back(present_run(*child));
    }
    offset += static_cast<int64_t>(page.run_ids.size());
    if (page.run_ids.empty() || offset >= page.total) break;
  }
  if (branches.empty()) {
    return field_status(StatusCode::kNotFound, "submission",
                        "run " + parent.id + " has no child submitted with '" + submission +
                            "' (`trainer runs branches " + parent.id.substr(0, 12) + "` lists its children)");
  }
  return json{{"runId", parent.id}, {"submissionId", submission}, {"branches", branches},
              {"total", static_cast<int64_t>(branches.size())}, {"phases", phases}};
}

Result<json> ServiceImpl::run_branches(const std::string& ref, int64_t limit, int64_t offset,
                                       const std::string& submission) {
  if (limit < 1 || limit > kMaxLineagePage) {
    return invalid_field("limit", "must be between 1 and " + std::to_string(kMaxLineagePage));
  }
  if (offset < 0) return invalid_field("offset", "must not be negative");
  auto run = resolve_run(ref, "run");
  if (!run.is_ok()) return run.status();
  if (!submission.empty()) return submission_branches(*run, submission);
  auto page = store_->run_children(run->id, limit, offset);
  if (!page.is_ok()) return page.status();
  json branches = json::array();
  for (const auto& id : page->run_ids) {
    auto child = resolve_run(id, "run");
    if (!child.is_ok()) continue;  // a damaged document: `runs get` reports it
    branches.push_back(present_run(*child));
  }
  json out = {{"runId", run->id}, {"branches", branches}, {"total", page->total}};
  if (offset + static_cast<int64_t>(page->run_ids.size()) < page->total) {
    out["nextOffset"] = offset + static_cast<int64_t>(page->run_ids.size());
  }
  return out;
}

Result<json> ServiceImpl::run_tree(const std::string& ref, int64_t depth) {
  if (depth < 0) return invalid_field("depth", "must not be negative (0 = every generation)");
  auto root = resolve_run(ref, "run");
  if (!root.is_ok()) return root.status();
  json runs = json::array();
  bool truncated = false;
  // Depth first, children newest first, so that each run is followed by its own descendants.
  std::vector<std::pair<std::string, int64_t>> stack = {{root->id, 0}};
  while (!stack.empty()) {
    auto [id, level] = stack.back();
    stack.pop_back();
    auto run = resolve_run(id, "run");
    if (!run.is_ok()) continue;
    json entry = lineage_entry(*run);
    entry["depth"] = level;
    if (runs.size() >= kMaxTreeRuns) {
      truncated = true;
      break;
    }
    runs.push_back(entry);
    if (depth != 0 && level >= depth) continue;
    std::vector<std::string> children;
    for (int64_t offset = 0;; offset += kMaxLineagePage) {
      auto page = store_->run_children(id, kMaxLineagePage, offset);
      if (!page.is_ok()) return page.status();
      children.insert(children.end(), page->run_ids.begin(), page->run_ids.end());
      if (page->run_ids.empty() || static_cast<int64_t>(children.size()) >= page->total) break;
    }
    for (auto it = children.rbegin(); it != children.rend(); ++it) stack.emplace_back(*it, level + 1);
  }
  json out = {{"runId", root->id}, {"runs", runs}};
  if (truncated) out["truncated"] = true;
  return out;
}

namespace {

// The run a run's weights came from: its parent, else the run that trained the model it
// warm-started from (warm_start.cpp); "" for a run that started from the base model.
std::string weights_source_run(const RunRecord& r) {
  const std::string parent = r.view.value("parentRunId", std::string());
  if (!parent.empty()) return parent;
  const json warm = r.view.value("warmStart", json::object());
  return warm.is_object() && warm.value("sourceRunId", json(nullptr)).is_string() ? warm["sourceRunId"].get<std::string>()
                                                                                    : std::string();
}

}  // namespace

Result<json> ServiceImpl::run_ancestry(const std::string& ref) {
  auto run = resolve_run(ref, "run");
  if (!run.is_ok()) return run.status();
  std::vector<json> chain = {lineage_entry(*run)};
  std::string parent = weights_source_run(*run);
  for (int generation = 0; !parent.empty() && generation < kMaxGenerations; ++generation) {
    auto up = resolve_run(parent, "run");
    if (!up.is_ok()) {
      chain.push_back({{"runId", parent}, {"missing", true}});
      break;
    }
    chain.push_back(lineage_entry(*up));
    parent = weights_source_run(*up);
  }
  std::reverse(chain.begin(), chain.end());
  return json{{"runId", run->id}, {"runs", chain}};
}

}  // namespace trainer::service

// `runs sweep PARENT --snapshot S --grid F` (docs/lineage.md, "Sweeps"): one child run per point
// of a grid, all from one snapshot. The grid's axes ({path, values}) span a Cartesian product,
// the last axis varying fastest; each point's values are its child's override document. Every
// point is validated (as a dry run of its child) before any is submitted, so a bad point starts
// nothing. Each child's submissionId is the sweep's with the point's index: a repeated sweep
// reaches the same children, and finishes a sweep a crash interrupted (children it already
// started are answered, not started again, and do not count against the fan).
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "service/service_state.h"

namespace trainer::service {
namespace {

// Two paths that are the same or one inside the other.
bool overlaps(const std::string& a, const std::string& b) {
  auto strip = [](const std::string& p) { return p.rfind("config.", 0) == 0 ? p.substr(7) : p; };
  const std::string x = strip(a), y = strip(b);
  return x == y || x.rfind(y + ".", 0) == 0 || y.rfind(x + ".", 0) == 0;
}

// A sweep's submissionId leaves room for the "-INDEX" of each child's (children's are 1-255).
constexpr size_t kMaxSweepSubmissionId = 250;

std::string child_submission(const std::string& sweep, int64_t index) {
  return sweep + "-" + std::to_string(index);
}

// For each dry-run answer of a sweep's points (`checked`), the id of an existing child of the
// parent that trains exactly the same, or "": not FAILED or CANCELLED, the same source snapshot,
// restore and resolved config, and not started by this sweep's `submission`.
Result<std::vector<std::string>> repeated_children(ServiceCore& core, const std::string& parent_id,
                                                   const std::vector<json>& checked, const std::string& submission) {
  std::vector<std::string> repeats(checked.size());
  std::vector<RunRecord> kids;
  for (int64_t offset = 0;;) {
    auto page = core.store->run_children(parent_id, kMaxFan, offset);
    if (!page.is_ok()) return page.status();
    for (const auto& id : page->run_ids) {
      auto kid = core.resolve_run(id, "run");
      if (kid.is_ok()) kids.push_back(std::move(*kid));  // a damaged document: `runs get` reports it
    }
    offset += static_cast<int64_t>(page->run_ids.size());
    if (page->run_ids.empty() || offset >= page->total) break;
  }
  for (size_t index = 0; index < checked.size(); ++index) {
    const json& answer = checked[index];
    const json config = answer.value("plan", json::object()).value("config", json());
    const json lineage = answer.value("child", json::object());  // the dry run's lineage of the child
    const std::string own = submission.empty() ? "" : child_submission(submission, static_cast<int64_t>(index));
    for (const RunRecord& kid : kids) {
      if (kid.phase == Phase::kFailed || kid.phase == Phase::kCancelled) continue;
      const json& v = kid.view;
      const json sid = v.value("submissionId", json(nullptr));
      if (!own.empty() && sid.is_string() && sid.get<std::string>() == own) continue;
      if (v.value("sourceSnapshotId", json()) != lineage.value("sourceSnapshotId", json()) ||
          v.value("restore", json()) != lineage.value("restore", json()) ||
          v.value("plan", json::object()).value("config", json()) != config) {
        continue;
      }
      repeats[index] = kid.id;
      break;
    }
  }
  return repeats;
}

}  // namespace

Result<json> ServiceImpl::sweep_run(const std::string& parent_ref, const json& body, bool dry_run) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"snapshot", "steps", "restore", "grid", "submissionId", "force"}));
  const json force_field = body.value("force", json(false));
  if (!force_field.is_boolean()) return invalid_field("force", "must be true or false, got " + force_field.dump());
  const bool force = force_field.get<bool>();
  auto grid = body.find("grid");
  if (grid == body.end() || !grid->is_object()) {
    return invalid_field("grid", "required: {axes: [{path, values}, ...]}");
  }
  TRAINER_RETURN_IF_ERROR(check_fields(*grid, {"axes"}).with_field("grid"));
  auto axes_it = grid->find("axes");
  if (axes_it == grid->end() || !axes_it->is_array() || axes_it->empty()) {
    return invalid_field("grid.axes", "required: a non-empty list of {path, values}");
  }
  const json& axes = *axes_it;
  // Each axis sets its own field and the fan holds at most kMaxFan points: more axes than that
  // cannot make a useful grid, and checking them against each other would hold the request.
  if (static_cast<int64_t>(axes.size()) > kMaxSweepAxes) {
    return invalid_field("grid.axes", "at most " + std::to_string(kMaxSweepAxes) + " axes (each sets its own field), got " +
                                          std::to_string(axes.size()));
  }
  std::string submission;
  if (auto it = body.find("submissionId"); it != body.end() && !it->is_null()) {
    const size_t length = it->is_string() ? it->get<std::string>().size() : 0;
    if (length == 0 || length > kMaxSweepSubmissionId) {
      return invalid_field("submissionId", "must be a string of 1-" + std::to_string(kMaxSweepSubmissionId) +
                                               " characters (each child's is it with \"-INDEX\")");
    }
    submission = it->get<std::string>();
  }
  int64_t points = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const std::string at = "grid.axes[" + std::to_string(i) + "]";
    if (!axes[i].is_object()) return invalid_field(at, "must be {path, values}");
    TRAINER_RETURN_IF_ERROR(check_fields(axes[i], {"path", "values"}).with_field(at));
    if (!axes[i].contains("path") || !axes[i]["path"].is_string() || axes[i]["path"].get<std::string>().empty()) {
      return invalid_field(at + ".path", "required: the dotted config field this axis sets");
    }
    if (!axes[i].contains("values") || !axes[i]["values"].is_array() || axes[i]["values"].empty()) {
      return invalid_field(at + ".values", "required: a non-empty list of the values to try");
    }
    for (size_t j = 0; j < i; ++j) {
      if (overlaps(axes[i]["path"], axes[j]["path"])) {
        return invalid_field(at + ".path", "'" + axes[i]["path"].get<std::string>() + "' overlaps axis " +
                                               std::to_string(j) + " ('" + axes[j]["path"].get<std::string>() +
                                               "'); each axis sets its own field");
      }
    }
    points *= static_cast<int64_t>(axes[i]["values"].size());
    if (points > kMaxFan) break;
  }
  auto parent = resolve_run(parent_ref, "parent");
  if (!parent.is_ok()) return parent.status();
  auto existing = store_->run_children(parent->id, 1, 0);
  if (!existing.is_ok()) return existing.status();
  // Children an earlier request with this submissionId started are already in the fan.
  int64_t started_before = 0;
  if (!submission.empty() && points <= kMaxFan) {
    for (int64_t index = 0; index < points; ++index) {
      auto seen = store_->run_by_submission(child_submission(submission, index));
      if (!seen.is_ok()) return seen.status();
      if (seen->has_value()) ++started_before;
    }
  }
  if (points + existing->total - started_before > kMaxFan) {
    return invalid_field("grid", "the grid has " + (points > kMaxFan ? "more than " + std::to_string(kMaxFan)
                                                                     : std::to_string(points)) +
                                     " points and run " + parent->id + " already has " +
                                     std::to_string(existing->total - started_before) +
                                     " other children; a parent's fan is at most " +
                                     std::to_string(kMaxFan) + " (the most branch models one comparison covers)");
  }

  // Every point, last axis fastest, validated before anything is submitted.
  std::vector<json> values(static_cast<size_t>(points));
  std::vector<json> children(static_cast<size_t>(points));
  std::vector<json> checked_children(static_cast<size_t>(points));
  for (int64_t index = 0; index < points; ++index) {
    json point = json::object();
    int64_t rest = index;
    for (size_t a = axes.size(); a-- > 0;) {
      const size_t n = axes[a]["values"].size();
      point[axes[a]["path"].get<std::string>()] = axes[a]["values"][static_cast<size_t>(rest) % n];
      rest /= static_cast<int64_t>(n);
    }
    json child = {{"steps", body.value("steps", json(nullptr))}, {"overrides", point}};
    for (const char* key : {"snapshot", "restore"}) {
      if (body.contains(key)) child[key] = body[key];
    }
    auto checked = start_child(parent->id, child, true, false, point);
    if (!checked.is_ok()) {
      const Status& st = checked.status();
      return Status(st.code(), st.field(),
                    st.message() + " (grid point " + std::to_string(index) + ": " + point.dump() + ")");
    }
    values[static_cast<size_t>(index)] = point;
    children[static_cast<size_t>(index)] = dry_run ? checked->first : child;
    checked_children[static_cast<size_t>(index)] = checked->first;
  }
  // A point whose child would train exactly what an existing child of the parent trains (the same
  // snapshot, restore and resolved settings; the child not FAILED or CANCELLED) is refused without
  // `force`, naming that run; with it, or in a dry run, its entry names the run ("repeats").
  // The children this sweep's own submissionId started are no repeat: repeating it finishes it.
  TRAINER_ASSIGN_OR_RETURN(std::vector<std::string> repeats,
                           repeated_children(core_, parent->id, checked_children, submission));
  if (!force && !dry_run) {
    for (int64_t index = 0; index < points; ++index) {
      const std::string& same = repeats[static_cast<size_t>(index)];
      if (same.empty()) continue;
      return field_status(StatusCode::kFailedPrecondition, "grid",
                          "grid point " + std::to_string(index) + " (" + values[static_cast<size_t>(index)].dump() +
                              ") repeats run " + same +
                              " exactly (the same snapshot, restore and settings); drop the point, or add --force "
                              "to train it again (`trainer runs get " + same.substr(0, 12) + "` shows the run)");
    }
  }
  json out = {{"parentRunId", parent->id}, {"total", points}, {"points", json::array()}};
  if (submission.empty()) submission = random_hex(16);
  int64_t created = 0;
  for (int64_t index = 0; index < points; ++index) {
    json entry = {{"index", index}, {"values", values[static_cast<size_t>(index)]}};
    if (!repeats[static_cast<size_t>(index)].empty()) entry["repeats"] = repeats[static_cast<size_t>(index)];
    if (dry_run) {
      entry["plan"] = children[static_cast<size_t>(index)]["plan"];
    } else {
      json child = children[static_cast<size_t>(index)];
      child["submissionId"] = child_submission(submission, index);
      auto started = start_child(parent->id, child, false, false, values[static_cast<size_t>(index)]);
      if (!started.is_ok()) {
        const Status& st = started.status();
        if (st.code() == StatusCode::kAlreadyExists) {  // the token names another request: no repeat helps
          return Status(st.code(), st.field(), st.message() + " (grid point " + std::to_string(index) + ")");
        }
        return Status(st.code(), st.field(),
                      st.message() + " (grid point " + std::to_string(index) + " of " + std::to_string(points) + "; " +
                          std::to_string(index) + " started before it; repeat the sweep with submissionId " +
                          submission + " to finish it)");
      }
      entry["runId"] = started->first.value("runId", std::string());
      entry["created"] = started->second;  // false: an earlier request with this submissionId started it
      if (started->second) ++created;
      if (opt_.sweep_pause.count() > 0 && index + 1 < points) {
        std::fprintf(stderr, "trainerd: test hook: sweep %s paused after point %lld for %lld ms\n",
                     submission.c_str(), static_cast<long long>(index),
                     static_cast<long long>(opt_.sweep_pause.count()));
        std::this_thread::sleep_for(opt_.sweep_pause);
      }
    }
    out["points"].push_back(entry);
  }
  if (!dry_run) {
    out["submissionId"] = submission;
    out["created"] = created;
  }
  return out;
}

}  // namespace trainer::service

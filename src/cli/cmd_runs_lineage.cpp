// `trainer runs branches PARENT`, `trainer runs tree ROOT` and `trainer runs ancestry RUN`: the
// family of a run (docs/lineage.md).
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/list_command.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

std::string step_text(const json& run, const char* key) {
  return run.contains(key) && run[key].is_number_integer() ? std::to_string(run[key].get<int64_t>()) : "-";
}

// "grpo", or "grpo (from sft)" for a child whose method differs from its parent's.
std::string method_text(const json& run) {
  const std::string method = run.value("method", std::string("-"));
  const std::string parent = run.value("parentMethod", std::string());
  return parent.empty() || parent == method ? method : method + " (from " + parent + ")";
}

std::string progress_text(const json& run) {
  const json p = run.value("progress", json::object());
  const std::string step = p.contains("step") && p["step"].is_number() ? std::to_string(p["step"].get<int64_t>()) : "0";
  const std::string total =
      p.contains("totalSteps") && p["totalSteps"].is_number() ? std::to_string(p["totalSteps"].get<int64_t>()) : "?";
  return step + "/" + total;
}

const json kNoPhases = json::object();

int runs_branches(Context& ctx) {
  const std::string parent = ctx.inv.positionals[0];
  ListView view;
  view.path = "/v1/runs/" + seg(parent) + "/branches";
  const auto submission = ctx.inv.get("submission");
  if (submission) view.path += "?submission=" + seg(*submission);
  view.paging = Paging::kLimitOffset;
  view.items = "branches";
  view.header = {"RUN", "KIND", "METHOD", "SNAPSHOT", "SOURCE STEP", "RESTORE", "STEPS", "PHASE", "PROGRESS"};
  view.row = [](const json& b, double) -> std::vector<std::string> {
    return {short_id(b.value("runId", std::string())), b.value("childKind", std::string()), method_text(b),
            short_id(b.value("sourceSnapshotId", std::string())), step_text(b, "sourceStep"),
            b.value("restore", std::string()), step_text(b, "stepBudget"), b.value("phase", std::string()),
            progress_text(b)};
  };
  view.empty = [parent](const json& doc) {
    const std::string id = short_id(doc.value("runId", parent));
    return "Run " + id + " has no branches. Start one with `trainer runs branch " + id + " --snapshot SNAPSHOT --steps N`.\n";
  };
  view.more = [parent](const json& doc) {
    if (doc.contains("submissionId")) {  // one submission's children, with a count by phase
      std::string counts;
      const json& phases = doc.contains("phases") && doc["phases"].is_object() ? doc["phases"] : kNoPhases;
      for (auto it = phases.begin(); it != phases.end(); ++it) {
        counts += (counts.empty() ? "" : ", ") + std::to_string(it.value().get<int64_t>()) + " " + it.key();
      }
      return "Submission " + doc.value("submissionId", std::string()) + ": " +
             std::to_string(doc.value("total", int64_t{0})) + " children (" + counts + ")\n";
    }
    return more_line(doc, "trainer runs branches " + short_id(doc.value("runId", parent)));
  };
  return run_list(ctx, view);
}

int runs_tree(Context& ctx) {
  std::string path = "/v1/runs/" + seg(ctx.inv.positionals[0]) + "/tree";
  int code = kExitOk;
  auto depth = int_flag(ctx, "depth", &code);
  if (code != kExitOk) return code;
  if (depth) append_query(&path, "depth", std::to_string(*depth));
  return show(ctx, path, [&](const json& doc) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& r : doc.value("runs", json::array())) {
      const int64_t level = r.value("depth", int64_t{0});
      rows.push_back({std::string(static_cast<size_t>(level) * 2, ' ') + short_id(r.value("runId", std::string())),
                      method_text(r), step_text(r, "sourceStep"), r.value("restore", std::string("-")), r.value("phase", std::string()),
                      progress_text(r)});
    }
    out(render_table({"RUN", "METHOD", "SOURCE STEP", "RESTORE", "PHASE", "PROGRESS"}, rows));
    if (doc.value("truncated", false)) out("(truncated: the tree has more runs than one answer lists)\n");
  });
}

int runs_ancestry(Context& ctx) {
  return show(ctx, "/v1/runs/" + seg(ctx.inv.positionals[0]) + "/ancestry", [&](const json& doc) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& r : doc.value("runs", json::array())) {
      // A warm start: the weights of a registered model the run above trained.
      const json warm = r.value("warmStart", json(nullptr));
      const std::string restore = warm.is_object() ? "warm start from model " + short_id(warm.value("modelId", std::string()))
                                                   : r.value("restore", std::string("-"));
      rows.push_back({short_id(r.value("runId", std::string())), method_text(r),
                      short_id(r.value("sourceSnapshotId", std::string("-"))),
                      step_text(r, "sourceStep"), step_text(r, "stepBudget"), restore, r.value("phase", std::string())});
    }
    out(render_table({"RUN", "METHOD", "SNAPSHOT", "SOURCE STEP", "STEPS", "RESTORE", "PHASE"}, rows));
  });
}

}  // namespace

Command runs_branches_command() {
  Command c{"branches", {}, "List a run's direct children, newest first", "PARENT",
            "Children started with `runs branch` or `runs continue`; SOURCE STEP is the parent's step\n"
            "the child started from. --submission TOKEN shows one submission's children instead (a\n"
            "branch's, continue's or sweep's token, as they print it), all of them, and how many are in\n"
            "each phase: whether a submission whose answer was lost made its children.",
            with_paging({{"submission", 0, "TOKEN", "only the children this submission made", ""}},
                        "at most N children (1-100; default 50)", "skip the first N (newest first)"),
            {}, runs_branches, 1, 1, {}};
  c.examples = {{"a run's children", "trainer runs branches 7d496e82"},
                {"their ids, for scripts", "trainer runs branches 7d496e82 --jq '.branches[].runId'"},
                {"what a sweep whose answer was lost made", "trainer runs branches 7d496e82 --submission 5f1d2c3b"}};
  return c;
}

Command runs_tree_command() {
  Command c{"tree", {}, "Show a run's descendants across generations, indented", "ROOT",
            "Each run is followed by its own children (newest first), indented one level deeper.",
            {{"depth", 0, "N", "generations to show (0 = all, the default)", ""}}, {}, runs_tree, 1, 1, {}};
  c.examples = {{"the whole family below a run", "trainer runs tree 7d496e82"},
                {"children and grandchildren only", "trainer runs tree 7d496e82 --depth 2"}};
  return c;
}

Command runs_ancestry_command() {
  Command c{"ancestry", {}, "Show the chain from the root run down to this run", "RUN",
            "Root first. Each child names its parent's snapshot, the step it started from and its budget.\n"
            "A run that is nobody's child is a chain of one.",
            {}, {}, runs_ancestry, 1, 1, {}};
  c.examples = {{"where a run comes from", "trainer runs ancestry 7d496e82"},
                {"its root run's id", "trainer runs ancestry 7d496e82 --jq '.runs[0].runId'"}};
  return c;
}

}  // namespace trainer::cli

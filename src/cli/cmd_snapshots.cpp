// `trainer runs snapshots RUN` and `trainer snapshots get|list`: the snapshot catalog.
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

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string held_by(const json& s) {
  std::string out;
  for (const auto& h : s.value("heldBy", json::array())) {
    out += (out.empty() ? "" : ",") + (h.is_string() ? h.get<std::string>() : h.value("holder", std::string()));
  }
  return out.empty() ? "-" : out;
}

int list_snapshots(Context& ctx, const std::string& run_ref) {
  ListView view;
  view.path = "/v1/runs/" + seg(run_ref) + "/snapshots";
  view.paging = Paging::kLimitOffset;
  view.items = "snapshots";
  view.header = {"SAVED STEP", "EPOCH", "SNAPSHOT", "ARTIFACTS", "SIZE", "STATUS", "HELD BY"};
  view.row = [](const json& s, double) -> std::vector<std::string> {
    return {std::to_string(s.value("savedStep", int64_t{0})), std::to_string(s.value("epoch", int64_t{0})),
            short_id(s.value("snapshotId", std::string())), str(s, "artifacts"),
            format_bytes(s.value("sizeBytes", int64_t{0})), s.value("status", std::string()), held_by(s)};
  };
  view.empty = [run_ref](const json& doc) {
    const std::string run = short_id(doc.value("runId", run_ref));
    return "No committed snapshots for run " + run +
           " (a run saves every execution.saveEvery updates, and at the end; see `trainer runs get " + run + "`).\n";
  };
  view.more = [run_ref](const json& doc) {
    return more_line(doc, "trainer runs snapshots " + short_id(doc.value("runId", run_ref)));
  };
  return run_list(ctx, view);
}

int runs_snapshots(Context& ctx) { return list_snapshots(ctx, ctx.inv.positionals[0]); }

int snapshots_get(Context& ctx) {
  return show(ctx, "/v1/snapshots/" + seg(ctx.inv.positionals[0]), [&](const json& doc) {
    std::vector<std::pair<std::string, std::string>> rows = {
        {"Snapshot", doc.value("snapshotId", std::string())},
        {"Run", doc.value("runId", std::string())},
        {"Attempt", std::to_string(doc.value("attempt", int64_t{0}))},
        {"Saved step", std::to_string(doc.value("savedStep", int64_t{0}))},
        {"Epoch", std::to_string(doc.value("epoch", int64_t{0}))},
        {"Status", doc.value("status", std::string())},
        {"Size", format_bytes(doc.value("sizeBytes", int64_t{0}))},
        {"Base model sha", doc.value("baseModelSha", std::string())},
        {"Held by", held_by(doc)},
        {"Created", doc.value("createdAt", std::string())}};
    const json kinds = doc.value("kinds", json::object());
    for (const auto& [kind, k] : kinds.items()) {
      rows.push_back({kind, k.value("state", std::string()) + ", manifest " + k.value("manifestDigest", std::string()) +
                                ", " + format_bytes(k.value("bytes", int64_t{0})) + ", at " +
                                k.value("location", std::string())});
    }
    out(render_fields(rows));
  });
}

const std::vector<Flag>& page_flags() {
  static const std::vector<Flag> flags =
      with_paging({}, "at most N snapshots (1-100; service default 50)", "skip the first N (newest first)");
  return flags;
}

}  // namespace

Command runs_snapshots_command() {
  Command c{"snapshots", {}, "List the snapshots the catalog committed for a run, newest first", "RUN",
            "Only verified, committed snapshots are listed; bytes from an interrupted upload never are.\n"
            "Weights and trainingState commit separately: ARTIFACTS names those committed.",
            page_flags(), {}, runs_snapshots, 1, 1, {}};
  c.examples = {{"a run's snapshots", "trainer runs snapshots 7d496e82"},
                {"as JSON, for scripts", "trainer runs snapshots 7d496e82 -o json"}};
  return c;
}

Command snapshots_command() {
  Command g;
  g.name = "snapshots";
  g.summary = "Snapshots: immutable saves of a run that the catalog has verified and committed";
  g.examples = {{"a run's snapshots", "trainer snapshots list 7d496e82"},
                {"one of them", "trainer snapshots get 3f2a9c71bd04"}};
  Command get{"get", {}, "Show one snapshot: origin, artifact kinds, manifest digests, size", "SNAPSHOT",
              "SNAPSHOT is an id or any unambiguous prefix of one.", {}, {}, snapshots_get, 1, 1, {}};
  get.examples = {{"a snapshot by prefix", "trainer snapshots get 3f2a9c71bd04"},
                  {"its manifest digests, as JSON", "trainer snapshots get 3f2a9c71bd04 -o json"}};
  g.children.push_back(get);
  Command list{"list", {}, "List a run's committed snapshots (as `runs snapshots RUN`)", "RUN", "", page_flags(), {},
               runs_snapshots, 1, 1, {}};
  list.examples = {{"a run's snapshots", "trainer snapshots list 7d496e82"}};
  g.children.push_back(list);
  g.children.push_back(snapshots_register_command());
  g.children.push_back(snapshots_candidate_command());
  for (auto& c : snapshot_hold_commands()) g.children.push_back(std::move(c));
  return g;
}

}  // namespace trainer::cli

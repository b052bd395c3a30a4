// `trainer comparisons create|get|list` (docs/comparisons.md): a source snapshot scored against
// candidate and branch models under one pinned contract.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/list_command.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

std::string score_text(const json& v) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4f", v.get<double>());
  return buf;
}

// "12/40": the rows an evaluation answered of its dataset's, or "-" before it starts.
std::string rows_text(const json& progress) {
  if (!progress.is_object() || !progress.contains("rowsDone") || !progress["rowsDone"].is_number_integer()) return "-";
  const json total = progress.value("rowsTotal", json(nullptr));
  return std::to_string(progress["rowsDone"].get<int64_t>()) + "/" +
         (total.is_number_integer() ? std::to_string(total.get<int64_t>()) : "?");
}

// "+0.1667 [-0.0833, +0.4167]": a target's mean difference from the source and its interval.
std::string interval_text(const json& v) {
  if (!v.is_object() || !v.value("meanDifference", json(nullptr)).is_number()) return "-";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%+.4f [%+.4f, %+.4f]", v.value("meanDifference", 0.0), v.value("low", 0.0),
                v.value("high", 0.0));
  return buf;
}

// "95% paired bootstrap, 2000 resamples": how the intervals were made.
std::string method_text(const json& statistics) {
  if (!statistics.is_object()) return "paired bootstrap";
  return std::to_string(static_cast<int>(statistics.value("confidence", 0.95) * 100 + 0.5)) + "% " +
         statistics.value("method", std::string("paired bootstrap")) + ", " +
         std::to_string(statistics.value("resamples", int64_t{0})) + " resamples";
}

std::string value_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string fan_text(const json& fan) {
  std::string text;
  for (const auto& f : fan) {
    text += (text.empty() ? "" : "; ") + std::to_string(f.value("seen", int64_t{0})) + " completed branch(es) of run " +
            short_id(f.value("parentRunId", std::string())) + " seen (later completions are not added)";
  }
  return text;
}

}  // namespace

void print_comparison(const json& c) {
  const json contract = c.value("contract", json::object());
  const json source = c.value("source", json::object());
  const json dataset = contract.value("dataset", json::object());
  std::vector<std::pair<std::string, std::string>> rows = {
      {"Comparison", c.value("comparisonId", std::string())},
      {"Phase", c.value("phase", std::string())},
      {"Source", "snapshot " + short_id(source.value("snapshotId", std::string())) + " of run " +
                     short_id(source.value("runId", std::string())) + " (model " +
                     short_id(source.value("modelId", std::string())) + ", protected)"},
      {"Dataset", dataset.value("ref", std::string()) + " (hash " + dataset.value("hash", std::string()).substr(0, 16) + ")"},
      {"Grader", contract.value("grader", json::object()).value("kind", std::string()) + " (" +
                     contract.value("graderSource", std::string()) + ")"},
      {"Max new tokens", std::to_string(contract.value("maxNewTokens", int64_t{0}))}};
  if (!c.value("fan", json::array()).empty()) rows.push_back({"Fan", fan_text(c["fan"])});
  const json winner = c.value("winner", json(nullptr));
  const json leader = c.value("leader", json(nullptr));
  auto named = [](const json& t) {
    return t.value("kind", std::string()) + " " + t.value("target", std::string()) + " (model " +
           short_id(t.value("modelId", std::string())) + ", mean " + score_text(t.value("meanScore", json(nullptr))) + ")";
  };
  const std::string method = method_text(c.value("statistics", json(nullptr)));
  if (winner.is_object()) {
    rows.push_back({"Winner", named(winner) + ": ahead of every other target by more than chance (" + method + ")"});
  } else if (c.value("outcome", json(nullptr)) == "noClearWinner") {
    rows.push_back({"Winner", "no clear winner: " + (leader.is_object() ? "the highest mean, " + named(leader) + ", is"
                                                                          : "no target is") +
                                  " not ahead of every other target by more than chance (" + method +
                                  "; intervals in VS SOURCE)"});
  } else if (c.value("phase", std::string()) == "PARTIAL") {
    rows.push_back({"Winner", "none named: not every target completed"});
  }
  const json cost = c.value("cost", json::object());
  const json training = cost.value("training", json::object());
  const json evaluation = cost.value("evaluation", json::object());
  rows.push_back({"Training spend", format_device_time(training.value("byDeviceKind", json::object()))});
  rows.push_back({"Evaluation spend", format_device_time(evaluation.value("byDeviceKind", json::object()))});
  rows.push_back({"Created", c.value("createdAt", std::string())});
  out(render_fields(rows));

  std::vector<std::vector<std::string>> table;
  std::string failures;
  std::string differences;
  std::string reused;
  for (const auto& t : c.value("targets", json::array())) {
    const std::string target = t.value("kind", std::string()) == "source" ? short_id(t.value("target", std::string()))
                                                                          : t.value("target", std::string());
    table.push_back({target, t.value("kind", std::string()), short_id(t.value("modelId", std::string("-"))),
                     t["evaluationId"].is_string() ? short_id(t["evaluationId"].get<std::string>()) : "-",
                     t.value("status", std::string()), rows_text(t.value("progress", json(nullptr))),
                     score_text(t.value("meanScore", json(nullptr))),
                     score_text(t.value("exactMatch", json(nullptr))),
                     t.value("kind", std::string()) == "source" ? "(source)" : interval_text(t.value("versusSource", json(nullptr)))});
    if (t.value("reused", false) && t["evaluationId"].is_string()) {
      reused += "  " + target + ": evaluation " + short_id(t["evaluationId"].get<std::string>()) +
                " already scored this model under this contract; reused, not run again\n";
    }
    if (t.value("failure", json(nullptr)).is_string()) failures += "  " + target + ": " + t["failure"].get<std::string>() + "\n";
    for (const auto& d : t.value("configDifferences", json::array())) {
      differences += "  " + target + ": " + d.value("field", std::string()) + " " + value_text(d.value("source", json(nullptr))) +
                     " -> " + value_text(d.value("target", json(nullptr))) + "\n";
    }
  }
  out("\n" + render_table({"TARGET", "KIND", "MODEL", "EVALUATION", "STATUS", "ROWS", "MEAN", "EXACT", "VS SOURCE"}, table));
  if (!reused.empty()) out("\nReused evaluations:\n" + reused);
  if (!failures.empty()) out("\nFailed or refused:\n" + failures);
  if (!differences.empty()) out("\nConfig differences against the source:\n" + differences);
}

namespace {

// How often `comparisons create --wait` looks again (the comparison moves as its evaluations do).
constexpr auto kComparisonPoll = std::chrono::milliseconds(500);

bool comparison_ended(const std::string& phase) {
  return phase == "COMPLETED" || phase == "PARTIAL" || phase == "FAILED";
}

// "RUNNING, 1 of 3 evaluations ended": the progress line of a wait.
std::string comparison_progress(const json& c) {
  const json targets = c.value("targets", json::array());
  size_t done = 0;
  for (const auto& t : targets) {
    const std::string status = t.value("status", std::string());
    if (status == "COMPLETED" || status == "FAILED" || status == "REFUSED" || status == "CANCELLED") ++done;
  }
  return c.value("phase", std::string()) + ", " + std::to_string(done) + " of " + std::to_string(targets.size()) +
         " targets ended";
}

}  // namespace

std::optional<json> follow_comparison(Context& ctx, const std::string& id, int* code) {
  double timeout_seconds = 0;
  if (auto t = ctx.inv.get("timeout")) {
    auto parsed = parse_duration(*t);
    if (!parsed) {
      *code = ctx.fail("--timeout \"" + *t + "\" is not a duration; write it like 90s, 15m0s or 2h", kExitUsage);
      return std::nullopt;
    }
    timeout_seconds = *parsed;
  }
  const std::string short_ref = short_id(id);
  const auto start = std::chrono::steady_clock::now();
  std::string last;
  for (;;) {
    auto c = ctx.get("/v1/comparisons/" + seg(id));
    if (!c) {
      *code = ctx.last_failure_code();
      return std::nullopt;
    }
    const std::string line = comparison_progress(*c);
    if (ctx.text() && !ctx.quiet && line != last) std::fprintf(stderr, "comparison %s: %s\n", short_ref.c_str(), line.c_str());
    last = line;
    if (comparison_ended(c->value("phase", std::string()))) return c;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds > 0 && elapsed >= timeout_seconds) {
      *code = ctx.fail("stopped waiting after " + format_duration(timeout_seconds) + " (--timeout); comparison " +
                           short_ref + " carries on: `trainer comparisons get " + short_ref + "` shows it",
                       kExitTimeout);
      return std::nullopt;
    }
    std::this_thread::sleep_for(kComparisonPoll);
  }
}

namespace {

// Follows a comparison until it ends, then shows it as `comparisons get` does (JSON: the final
// record). --exit-status: 3 when it ended FAILED.
int wait_for_comparison(Context& ctx, const std::string& id) {
  int code = kExitOk;
  auto c = follow_comparison(ctx, id, &code);
  if (!c) return code;
  if (ctx.text()) print_comparison(*c);
  else ctx.print_json(*c);
  return ctx.inv.has("exit-status") && c->value("phase", std::string()) == "FAILED" ? kExitRunFailed : kExitOk;
}

int comparisons_create(Context& ctx) {
  json body = {{"source", ctx.inv.get_or("source", "")}, {"dataset", ctx.inv.get_or("dataset", "")}};
  for (const auto& [flag, key] : {std::pair<const char*, const char*>{"candidate", "candidates"},
                                  {"branch", "branches"},
                                  {"all-branches", "allBranches"}}) {
    auto it = ctx.inv.repeated.find(flag);
    if (it != ctx.inv.repeated.end()) body[key] = it->second;
  }
  for (const auto& [flag, key] : {std::pair<const char*, const char*>{"grader", "grader"}, {"submission-id", "submissionId"}}) {
    if (auto v = ctx.inv.get(flag)) body[key] = *v;
  }
  int code = kExitOk;
  auto max_new = int_flag(ctx, "max-new-tokens", &code);
  if (code != kExitOk) return code;
  if (max_new) body["maxNewTokens"] = *max_new;
  auto c = ctx.post("/v1/comparisons", body);
  if (!c) return ctx.last_failure_code();
  if (ctx.inv.has("wait")) return wait_for_comparison(ctx, c->value("comparisonId", std::string()));
  if (!ctx.text()) {
    ctx.print_json(*c);
    return kExitOk;
  }
  const std::string id = c->value("comparisonId", std::string());
  const size_t targets = c->value("targets", json::array()).size();
  out("Comparison " + id + " " + c->value("phase", std::string()) + ": the source and " + std::to_string(targets - 1) +
      " target(s) on one contract.\n");
  if (!c->value("fan", json::array()).empty()) out("Fan: " + fan_text((*c)["fan"]) + "\n");
  for (const auto& t : c->value("targets", json::array())) {
    if (t.value("status", std::string()) == "REFUSED" && t.value("failure", json(nullptr)).is_string()) {
      out("Refused target " + t.value("target", std::string()) + ": " + t["failure"].get<std::string>() + "\n");
    }
  }
  out("Follow it with: trainer comparisons get " + short_id(id) + "\n");
  return kExitOk;
}

int comparisons_get(Context& ctx) {
  return show(ctx, "/v1/comparisons/" + seg(ctx.inv.positionals[0]), [&](const json& c) {
    print_comparison(c);
  });
}

int comparisons_list(Context& ctx) {
  ListView view;
  view.path = "/v1/comparisons";
  auto source = ctx.inv.get("source");
  if (source) append_query(&view.path, "source", *source);
  view.paging = Paging::kLimitOffset;
  view.items = "comparisons";
  view.header = {"COMPARISON", "SOURCE", "PHASE", "COMPLETED", "WINNER", "CREATED"};
  view.row = [](const json& c, double) -> std::vector<std::string> {
    const json winner = c.value("winner", json(nullptr));
    return {short_id(c.value("comparisonId", std::string())),
            short_id(c.value("source", json::object()).value("snapshotId", std::string())),
            c.value("phase", std::string()),
            std::to_string(c.value("targetsCompleted", int64_t{0})) + "/" + std::to_string(c.value("targets", int64_t{0})),
            winner.is_object()                                  ? short_id(winner.value("modelId", std::string()))
            : c.value("outcome", json(nullptr)) == "noClearWinner" ? "no clear winner"
                                                                   : "-",
            c.value("createdAt", std::string())};
  };
  view.empty = [](const json&) -> std::string {
    return "No comparisons. Start one with `trainer comparisons create --source SNAPSHOT --branch RUN --dataset D`.\n";
  };
  view.more = [source](const json& doc) {
    return more_line(doc, "trainer comparisons list", source ? " --source " + *source : "");
  };
  return run_list(ctx, view);
}

}  // namespace

Command comparisons_command() {
  Command g;
  g.name = "comparisons";
  g.aliases = {"comparison"};
  g.summary = "Comparisons: a source snapshot against candidate and branch models on one contract";
  g.description =
      "One contract is pinned at create time: the dataset's hash, the grader and the completion-token\n"
      "ceiling; every target, the source included, is scored by an evaluation with exactly that contract.\n"
      "The source snapshot is registered automatically as a protected candidate. Phases: PREPARING,\n"
      "RUNNING, then COMPLETED, PARTIAL (some targets failed or were refused; no winner) or FAILED.\n"
      "A winner is named only when its lead is larger than chance: each target's 95% paired-bootstrap\n"
      "interval of the score difference against the source is shown (VS SOURCE), and a COMPLETED\n"
      "comparison whose best target is not ahead of every other beyond chance says \"no clear winner\".\n"
      "An evaluation of a target under exactly the pinned contract that already exists is reused.\n"
      "Training spend is kept apart from evaluation spend. See docs/comparisons.md.";
  g.examples = {{"a snapshot against every completed branch from it", "trainer comparisons create --source 3c1f9a2b --all-branches 7d496e82 --dataset eval"},
                {"its phase, for a script", "trainer comparisons get 5e2b7c90 --jq .phase"}};
  Command create{"create", {}, "Start a durable comparison (returns once it is recorded)", "",
                 "Targets: --candidate, --branch and --all-branches may each be repeated and combined; at\n"
                 "least one is required, and at most 50 branch models. --all-branches takes every COMPLETED\n"
                 "child of PARENT branched from the source, as seen now (the Fan line). A --branch run that is\n"
                 "not COMPLETED is a refused target. The same --source and --submission-id name the same\n"
                 "comparison: repeating the request creates nothing new.",
                 {{"source", 0, "SNAPSHOT", "the source snapshot (id or unique prefix)", ""},
                  {"candidate", 0, "MODEL", "a registered model's id (repeatable)", ""},
                  {"branch", 0, "RUN", "a run whose registered final model is a target (repeatable)", ""},
                  {"all-branches", 0, "PARENT", "every completed child of PARENT branched from the source (repeatable)", ""},
                  {"dataset", 0, "DATASET", "dataset name, hash or unique prefix (pinned to its hash)", ""},
                  {"grader", 0, "GRADER", "default: the source workload's grader, else json-label-match", ""},
                  {"max-new-tokens", 0, "N", "the completion-token ceiling (default 256)", ""},
                  {"submission-id", 0, "TOKEN", "makes the request idempotent", ""},
                  {"wait", 0, "", "follow it until it ends (a line each time a target ends), then show it", ""},
                  {"timeout", 0, "DURATION", "with --wait: stop waiting after DURATION (it carries on; exit 5)", "wait"},
                  {"exit-status", 0, "", "with --wait: exit 3 when the comparison ends FAILED", "wait"}},
                 {}, comparisons_create, 0, 0, {}};
  create.examples = {g.examples[0],
                     {"start one and wait for its winner",
                      "trainer comparisons create --source 3c1f9a2b --all-branches 7d496e82 --dataset eval --wait"},
                     {"two branches and a registered model, idempotently",
                      "trainer comparisons create --source 3c1f9a2b --branch 9a01 --branch 9a02 --candidate 41d0 --dataset eval --submission-id nightly-7"}};
  Command get{"get", {}, "Show the contract, each target's status and results, config differences and spend", "COMPARISON",
              "", {}, {}, comparisons_get, 1, 1, {}};
  get.examples = {g.examples[1], {"each target's mean score", "trainer comparisons get 5e2b7c90 --jq .targets[].meanScore"}};
  Command list{"list", {}, "List comparisons, newest first", "", "",
               with_paging({{"source", 0, "SNAPSHOT", "only this source snapshot's", ""}}, "at most N (1-100; default 100)",
                           "skip the first N (newest first)"),
               {}, comparisons_list, 0, 0, {}};
  list.examples = {{"every comparison of one snapshot", "trainer comparisons list --source 3c1f9a2b"}};
  g.children = {create, get, list};
  return g;
}

}  // namespace trainer::cli

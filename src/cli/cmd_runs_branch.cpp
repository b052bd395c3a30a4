// `trainer runs branch PARENT --snapshot S --steps N` and `trainer runs continue RUN --steps N`:
// child runs started from a parent's snapshot (docs/lineage.md).
#include <chrono>
#include <optional>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/interrupt.h"
#include "cli/run_view.h"
#include "plan/document.h"
#include "plan/plan.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

constexpr int kSubmissionIdBytes = 8;

std::string new_submission_id() {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < kSubmissionIdBytes; ++i) {
    const unsigned v = rd() & 0xff;
    id += kHex[v >> 4];
    id += kHex[v & 15];
  }
  return id;
}

std::string overrides_text(const json& flat, const std::string& prefix = "") {
  std::string out;
  for (const auto& [key, value] : flat.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object()) {
      out += overrides_text(value, path);
    } else {
      out += "  " + path + ": " + value.dump() + "\n";
    }
  }
  return out;
}

// "Method: sft -> grpo; dropped config.validationDataset, ...: SFT fields a grpo run does not
// have." for a child whose overrides changed its method (`lineage`: the answer's child or run).
std::string method_change_line(const json& lineage) {
  const json change = lineage.value("methodChange", json());
  if (!change.is_object()) return "";
  return "Method: " + change.value("from", std::string()) + " -> " + change.value("to", std::string()) + "; " +
         change.value("message", std::string()) + ".\n";
}

// --method M: the child's method, as an override of `method` (an override document may set it
// too, to the same value). Returns a usage error's text, or "".
std::string apply_method_flag(const std::string& method, json& overrides) {
  if (method != "sft" && method != "grpo" && method != "gspo") {
    return "--method must be sft, grpo or gspo, got '" + method + "'";
  }
  if (overrides.is_null()) overrides = json::object();
  for (const char* key : {"method", "config.method"}) {
    if (!overrides.contains(key)) continue;
    if (overrides[key] != method) {
      return std::string("--method ") + method + " and the overrides' " + key + ": " + overrides[key].dump() +
             " disagree; give the method once";
    }
    return "";
  }
  if (overrides.contains("config") && overrides["config"].is_object() && overrides["config"].contains("method")) {
    if (overrides["config"]["method"] != method) {
      return std::string("--method ") + method + " and the overrides' config.method: " +
             overrides["config"]["method"].dump() + " disagree; give the method once";
    }
    return "";
  }
  overrides["method"] = method;
  return "";
}

int start_child(Context& ctx, bool continuation) {
  const char* verb = continuation ? "continue" : "branch";
  const std::string parent = ctx.inv.positionals[0];
  const bool dry_run = ctx.inv.has("dry-run");
  if (dry_run && ctx.inv.has("wait")) return ctx.fail("--dry-run starts nothing to wait for; drop --wait", kExitUsage);
  auto steps_text = ctx.inv.get("steps");
  if (!steps_text) {
    return ctx.fail(std::string("runs ") + verb + " needs --steps N: the child's budget of optimizer updates", kExitUsage);
  }
  char* end = nullptr;
  const long long steps = std::strtoll(steps_text->c_str(), &end, 10);
  if (steps_text->empty() || *end != '\0' || steps < 1) {
    return ctx.fail("--steps must be a positive integer, got \"" + *steps_text + "\"", kExitUsage);
  }
  json body = {{"steps", steps}};
  if (auto s = ctx.inv.get("snapshot")) body["snapshot"] = *s;
  if (!continuation) {
    if (!body.contains("snapshot")) {
      return ctx.fail("runs branch needs --snapshot SNAPSHOT (list them with `trainer runs snapshots " + parent + "`)",
                      kExitUsage);
    }
    const std::string restore = ctx.inv.get_or("restore", "weights");
    if (restore != "weights" && restore != "trainingState") {
      return ctx.fail("--restore must be weights or trainingState, got '" + restore + "'", kExitUsage);
    }
    body["restore"] = restore;
  }
  std::string overrides_source;
  if (auto file = ctx.inv.get("overrides")) {
    std::string error;
    auto text = read_input(*file, &error);
    if (!text) return ctx.fail(error, kExitError);
    overrides_source = *file == "-" ? "stdin" : *file;
    auto doc = plan::parse_document(*text, overrides_source);
    if (!doc.is_ok()) return ctx.fail(doc.status().message(), kExitError);
    if (!doc->is_null() && !doc->is_object()) {
      return ctx.fail(overrides_source + ": an override document maps config fields to new values, e.g. "
                                         "hyperparams.optimizer.learningRate: 5e-5",
                      kExitError);
    }
    body["overrides"] = *doc;
  }
  if (auto method = ctx.inv.get("method")) {
    json overrides = body.value("overrides", json());
    if (std::string error = apply_method_flag(*method, overrides); !error.empty()) return ctx.fail(error, kExitUsage);
    body["overrides"] = overrides;
  }
  const std::string base = "/v1/runs/" + seg(parent) + "/" + verb;
  if (dry_run) {
    auto checked = ctx.post(base + "?dryRun=true", body);
    if (!checked) return ctx.last_failure_code();
    if (!ctx.text()) {
      ctx.print_json(*checked);
      return kExitOk;
    }
    const json child = checked->value("child", json::object());
    out("The child is valid: " + std::to_string(child.value("stepBudget", int64_t{0})) + " steps from snapshot " +
        short_id(child.value("sourceSnapshotId", std::string())) + " (step " +
        std::to_string(child.value("sourceStep", int64_t{0})) + " of run " +
        short_id(child.value("parentRunId", std::string())) + "), restoring " +
        child.value("restore", std::string()) + ".\n");
    out(method_change_line(child));
    if (body.contains("overrides") && body["overrides"].is_object() && !body["overrides"].empty()) {
      out("Overrides:\n" + overrides_text(body["overrides"]));
    }
    out("\nResolved child plan:\n" + to_yaml_text(checked->value("plan", json::object()), 2));
    out("Nothing was started; drop --dry-run to start it.\n");
    return kExitOk;
  }
  // A retried request reaches the same child: the caller's token, or a generated one.
  const std::string token = ctx.inv.get_or("submission-id", new_submission_id());
  body["submissionId"] = token;
  ctx.retry_hint = std::string(" (the child may have been started: repeat the command with --submission-id ") + token +
                   " to reach the same child instead of starting another)";
  auto run = ctx.post(base, body);
  ctx.retry_hint.clear();
  if (!run) return ctx.last_failure_code();
  const std::string id = run->value("runId", std::string());
  if (!ctx.text()) {
    if (!ctx.inv.has("wait")) ctx.print_json(*run);
  } else {
    out("Started run " + id + ": " + verb + " of run " + short_id(run->value("parentRunId", std::string())) +
        " from snapshot " + short_id(run->value("sourceSnapshotId", std::string())) + " (step " +
        std::to_string(run->value("sourceStep", int64_t{0})) + "), " + std::to_string(steps) + " steps, restoring " +
        run->value("restore", std::string()) + " (submission " + token + ").\n");
    out(method_change_line(*run));
    if (!ctx.inv.has("wait")) out("Follow it with `trainer runs wait " + short_id(id) + "`.\n");
    if (!ctx.inv.has("submission-id")) {
      out("To repeat this safely (the same child, never a second one), add --submission-id " + token + ".\n");
    }
  }
  std::fflush(stdout);
  if (ctx.inv.has("wait")) return wait_for_run(ctx, id);
  return kExitOk;
}

// How often `runs sweep --wait` looks at the children that have not ended.
constexpr auto kSweepPoll = std::chrono::seconds(1);

// "lr=0.001, batchSize=4": a sweep point's values.
std::string point_values(const json& point) {
  std::string values;
  const json chosen = point.value("values", json::object());
  for (const auto& [k, v] : chosen.items()) {
    values += (values.empty() ? "" : ", ") + k + "=" + v.dump();
  }
  return values;
}

// Follows every child of a sweep (`doc`, the sweep's answer) until each has ended, a line on
// stderr as each ends; each point of `doc` gets its child's final record as "run". kExitOk, or
// the exit code of a failure it printed.
int follow_sweep(Context& ctx, const std::string& parent, json& doc) {
  double timeout_seconds = 0;
  if (auto t = ctx.inv.get("timeout")) {
    auto parsed = parse_duration(*t);
    if (!parsed) return ctx.fail("--timeout \"" + *t + "\" is not a duration; write it like 90s, 15m0s or 2h", kExitUsage);
    timeout_seconds = *parsed;
  }
  explain_interrupt("the sweep of run " + short_id(parent), "trainer runs branches " + short_id(parent),
                    "trainer runs cancel CHILD");
  json& points = doc["points"];
  const size_t total = points.size();
  size_t ended = 0;
  const auto start = std::chrono::steady_clock::now();
  while (ended < total) {
    for (auto& p : points) {
      if (p.contains("run") && is_terminal_phase(p["run"].value("phase", std::string()))) continue;
      auto run = ctx.get("/v1/runs/" + seg(p.value("runId", std::string())));
      if (!run) return ctx.last_failure_code();
      p["run"] = *run;
      const std::string phase = run->value("phase", std::string());
      if (!is_terminal_phase(phase)) continue;
      ++ended;
      if (ctx.text() && !ctx.quiet) {
        std::fprintf(stderr, "sweep: point %d (%s), run %s: %s (%zu of %zu ended)\n", p.value("index", 0),
                     point_values(p).c_str(), short_id(p.value("runId", std::string())).c_str(), phase.c_str(), ended,
                     total);
      }
    }
    if (ended == total) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds > 0 && elapsed >= timeout_seconds) {
      return ctx.fail("stopped waiting after " + format_duration(timeout_seconds) + " (--timeout); " +
                          std::to_string(total - ended) + " of the sweep's " + std::to_string(total) +
                          " children carry on: `trainer runs branches " + short_id(parent) + "` lists them",
                      kExitTimeout);
    }
    std::this_thread::sleep_for(kSweepPoll);
  }
  return kExitOk;
}

// A followed sweep's points and how each ended: a table (JSON: the answer, each point with its
// child's final record as "run"). Its exit code under --exit-status: 3 when a child FAILED, else
// 4 when one was CANCELLED.
int report_sweep(Context& ctx, const json& doc, bool print) {
  const json& points = doc["points"];
  bool failed = false, cancelled = false;
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : points) {
    const json& run = p["run"];
    const std::string phase = run.value("phase", std::string());
    failed = failed || phase == "FAILED";
    cancelled = cancelled || phase == "CANCELLED";
    const json latest = run.value("latest", json::object());
    std::string result = "-";
    if (latest.contains("reward") && latest["reward"].is_number()) result = "reward " + format_number(latest["reward"].get<double>());
    else if (latest.contains("loss") && latest["loss"].is_number()) result = "loss " + format_number(latest["loss"].get<double>());
    rows.push_back({std::to_string(p.value("index", 0)), point_values(p), short_id(p.value("runId", std::string())),
                    phase, result});
  }
  if (ctx.text()) {
    out(render_table({"POINT", "VALUES", "RUN", "PHASE", "LAST"}, rows));
  } else if (print) {
    ctx.print_json(doc);
  }
  if (!ctx.inv.has("exit-status")) return kExitOk;
  return failed ? kExitRunFailed : (cancelled ? kExitRunCancelled : kExitOk);
}

// `runs sweep --wait`: follows the children, then lists how each ended.
int wait_for_sweep(Context& ctx, const std::string& parent, json doc) {
  if (int code = follow_sweep(ctx, parent, doc); code != kExitOk) return code;
  return report_sweep(ctx, doc, true);
}

// The comparison `runs sweep --compare` asks for once every child ended: the sweep's snapshot
// against the children that COMPLETED, on --dataset (--grader, --max-new-tokens as given).
struct CompareRequest {
  std::string snapshot = {};
  std::string dataset = {};
  std::optional<std::string> grader = {};
  std::optional<long long> max_new_tokens = {};
};

// `runs sweep --compare`: follows the children, lists how each ended, then starts the comparison
// of the source snapshot against those that completed (idempotent by the sweep's submission id),
// follows it and shows it. JSON: {sweep, comparison}. --exit-status: 3 when a child or the
// comparison FAILED, else 4 when a child was CANCELLED.
int compare_sweep(Context& ctx, const std::string& parent, json doc, const CompareRequest& request,
                  const std::string& token) {
  if (int code = follow_sweep(ctx, parent, doc); code != kExitOk) return code;
  const int sweep_code = report_sweep(ctx, doc, false);
  json branches = json::array();
  std::string left_out;
  for (const auto& p : doc["points"]) {
    const std::string phase = p["run"].value("phase", std::string());
    if (phase == "COMPLETED") {
      branches.push_back(p.value("runId", std::string()));
    } else {
      left_out += (left_out.empty() ? "" : ", ") + short_id(p.value("runId", std::string())) + " " + phase;
    }
  }
  if (branches.empty()) {
    return ctx.fail("no child of the sweep COMPLETED (" + left_out + "), so there is nothing to compare; `trainer runs get "
                    "CHILD` says why each ended",
                    ctx.inv.has("exit-status") ? kExitRunFailed : kExitError);
  }
  if (ctx.text() && !ctx.quiet && !left_out.empty()) {
    std::fprintf(stderr, "sweep: left out of the comparison (no model): %s\n", left_out.c_str());
  }
  json body = {{"source", request.snapshot}, {"branches", branches}, {"dataset", request.dataset},
               {"submissionId", token + "-compare"}};
  if (request.grader) body["grader"] = *request.grader;
  if (request.max_new_tokens) body["maxNewTokens"] = *request.max_new_tokens;
  auto created = ctx.post("/v1/comparisons", body);
  if (!created) return ctx.last_failure_code();
  const std::string id = created->value("comparisonId", std::string());
  if (ctx.text() && !ctx.quiet) {
    std::fprintf(stderr, "sweep: comparison %s of snapshot %s against %zu children started\n", short_id(id).c_str(),
                 short_id(request.snapshot).c_str(), branches.size());
  }
  int code = kExitOk;
  auto comparison = follow_comparison(ctx, id, &code);
  if (!comparison) return code;
  if (ctx.text()) {
    out("\n");
    print_comparison(*comparison);
  } else {
    ctx.print_json(json{{"sweep", doc}, {"comparison", *comparison}});
  }
  if (ctx.inv.has("exit-status") && comparison->value("phase", std::string()) == "FAILED") return kExitRunFailed;
  return sweep_code;
}

int runs_sweep(Context& ctx) {
  const std::string parent = ctx.inv.positionals[0];
  auto snapshot = ctx.inv.get("snapshot");
  auto grid_file = ctx.inv.get("grid");
  auto steps_text = ctx.inv.get("steps");
  if (!snapshot || !grid_file || !steps_text) {
    return ctx.fail("runs sweep needs --snapshot SNAPSHOT, --steps N and --grid FILE", kExitUsage);
  }
  char* end = nullptr;
  const long long steps = std::strtoll(steps_text->c_str(), &end, 10);
  if (steps_text->empty() || *end != '\0' || steps < 1) {
    return ctx.fail("--steps must be a positive integer, got \"" + *steps_text + "\"", kExitUsage);
  }
  std::string error;
  auto text = read_input(*grid_file, &error);
  if (!text) return ctx.fail(error, kExitError);
  auto grid = plan::parse_document(*text, *grid_file == "-" ? "stdin" : *grid_file);
  if (!grid.is_ok()) return ctx.fail(grid.status().message(), kExitError);
  const std::string restore = ctx.inv.get_or("restore", "weights");
  if (restore != "weights" && restore != "trainingState") {
    return ctx.fail("--restore must be weights or trainingState, got '" + restore + "'", kExitUsage);
  }
  json body = {{"snapshot", *snapshot}, {"steps", steps}, {"restore", restore}, {"grid", *grid}};
  if (ctx.inv.has("force")) body["force"] = true;
  const bool dry_run = ctx.inv.has("dry-run");
  if (dry_run && ctx.inv.has("wait")) return ctx.fail("--dry-run starts nothing to wait for; drop --wait", kExitUsage);
  // --compare: everything it needs is checked before a child starts.
  const bool compare = ctx.inv.has("compare");
  for (const char* flag : {"timeout", "exit-status"}) {
    if (ctx.inv.has(flag) && !ctx.inv.has("wait") && !compare) {
      return ctx.fail(std::string("--") + flag + " applies with --wait or --compare", kExitUsage);
    }
  }
  CompareRequest compare_request{.snapshot = *snapshot};
  if (compare) {
    if (dry_run) return ctx.fail("--dry-run starts nothing to compare; drop --compare", kExitUsage);
    auto dataset = ctx.inv.get("dataset");
    if (!dataset || dataset->empty()) {
      return ctx.fail("runs sweep --compare needs --dataset DATASET: the rows the comparison scores the source "
                      "snapshot and every child on",
                      kExitUsage);
    }
    compare_request.dataset = *dataset;
    compare_request.grader = ctx.inv.get("grader");
    int code = kExitOk;
    compare_request.max_new_tokens = int_flag(ctx, "max-new-tokens", &code);
    if (code != kExitOk) return code;
    if (compare_request.max_new_tokens && *compare_request.max_new_tokens < 1) {
      return ctx.fail("--max-new-tokens must be at least 1, got " + std::to_string(*compare_request.max_new_tokens),
                      kExitUsage);
    }
    if (!ctx.get("/v1/datasets/" + seg(*dataset))) return ctx.last_failure_code();  // names the dataset
  }
  std::string path = "/v1/runs/" + seg(parent) + "/sweep";
  std::string token;  // the submission id sent (none for a dry run)
  if (dry_run) {
    path += "?dryRun=true";
  } else {
    // The children's submissionIds derive from it: repeating the sweep with the same token
    // starts each child once (and finishes a sweep an outage interrupted).
    token = ctx.inv.get_or("submission-id", new_submission_id());
    body["submissionId"] = token;
    ctx.retry_hint = " (the sweep may have been started: repeat the command with --submission-id " + token +
                     " to finish it; no child starts twice)";
  }
  auto doc = ctx.post(path, body);
  ctx.retry_hint.clear();
  if (!doc) return ctx.last_failure_code();
  const bool wait = ctx.inv.has("wait");
  if (!ctx.text()) {
    if (compare) return compare_sweep(ctx, parent, *doc, compare_request, token);
    if (wait) return wait_for_sweep(ctx, parent, *doc);
    ctx.print_json(*doc);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : doc->value("points", json::array())) {
    rows.push_back({std::to_string(p.value("index", 0)), point_values(p),
                    dry_run ? "(valid)" : short_id(p.value("runId", std::string()))});
    // A point that trains exactly what an existing child trains (the service refuses it without --force).
    if (const std::string same = p.value("repeats", std::string()); !same.empty()) {
      std::fprintf(stderr, "Warning: point %d (%s) repeats run %s exactly (the same snapshot, restore and settings)%s\n",
                   p.value("index", 0), point_values(p).c_str(), short_id(same).c_str(),
                   dry_run ? "; the sweep is refused without --force" : "; trained again (--force)");
    }
  }
  out(render_table({"POINT", "VALUES", "RUN"}, rows));
  if (dry_run) {
    out("Every point is valid; nothing was started. Drop --dry-run to start " +
        std::to_string(doc->value("total", 0)) + " children.\n");
    return kExitOk;
  }
  const int64_t total = doc->value("total", int64_t{0});
  const int64_t created = doc->value("created", total);
  std::string said = "Started " + std::to_string(created) + " children of run " + short_id(parent);
  if (created < total) {
    said += "; " + std::to_string(total - created) + " of the " + std::to_string(total) +
            " were started before by submission id " + doc->value("submissionId", std::string());
  }
  out(said + " (submission " + token + "). List them with `trainer runs branches " + short_id(parent) + "`.\n");
  if (!ctx.inv.has("submission-id")) {
    out("To repeat this sweep safely (each child started once), add --submission-id " + token + ".\n");
  }
  std::fflush(stdout);
  if (compare) return compare_sweep(ctx, parent, *doc, compare_request, token);
  if (wait) return wait_for_sweep(ctx, parent, *doc);
  return kExitOk;
}

int runs_branch(Context& ctx) { return start_child(ctx, false); }
int runs_continue(Context& ctx) { return start_child(ctx, true); }

std::vector<Flag> child_flags(bool continuation) {
  std::vector<Flag> flags = {
      {"snapshot", 0, "SNAPSHOT",
       continuation ? "the snapshot to continue (id or prefix); default: the newest with training state"
                    : "the parent's snapshot to start from (id or prefix); required",
       ""},
      {"steps", 0, "N", "the child's budget of optimizer updates; required", ""}};
  if (!continuation) {
    flags.push_back({"restore", 0, "weights|trainingState",
                     "weights (default): a fresh optimizer from the adapter; trainingState: everything", ""});
    flags.push_back({"method", 0, "sft|grpo|gspo",
                     "the child's method (as an override of method): the parent's fields of the other kind are "
                     "dropped, the weights restored alone",
                     ""});
  }
  flags.push_back({"overrides", 0, "FILE", "YAML or JSON of the config fields to change (dotted or nested)", ""});
  flags.push_back({"dry-run", 0, "", "show the resolved child plan; start nothing", ""});
  flags.push_back({"submission-id", 0, "TOKEN",
                   "idempotency key: a repeat with the same TOKEN answers the same child (default: generated)",
                   ""});
  flags.push_back({"wait", 0, "", "follow the child to a terminal phase", ""});
  flags.push_back({"exit-status", 0, "", "exit non-zero when the child ends FAILED (3) or CANCELLED (4)", "wait"});
  return flags;
}

}  // namespace

Command runs_branch_command() {
  Command c{"branch", {}, "Start a child run from a parent's snapshot", "PARENT",
            "The child is a new run with the parent's plan (workload, base model, grader, device count),\n"
            "a budget of --steps updates counted from zero, and the overrides applied. The parent is\n"
            "unchanged. --restore weights (default) loads the adapter with a fresh optimizer, schedule,\n"
            "RNG and data order; trainingState restores all of them and allows only the learning rate\n"
            "to change. Overrides name only declared config fields (docs/plans.md); epochs and maxSteps\n"
            "cannot be overridden (--steps is the budget). The child holds its source snapshot against\n"
            "retention until it ends.\n"
            "\n"
            "--method (or `method` in the overrides) changes the method: an SFT snapshot branched into a\n"
            "grpo or gspo run, or an RL one into sft. The parent's fields the new method does not have\n"
            "(validationDataset, hyperparams.optimizer, SFT batch sizes; or reward, klBeta,\n"
            "rlHyperparams) are dropped and listed; the child starts from the snapshot's weights alone\n"
            "(--restore trainingState is refused); from sft to grpo/gspo the overrides must name\n"
            "reward.terms (rlHyperparams take their defaults unless given).",
            child_flags(false), {}, runs_branch, 1, 1, {}};
  c.examples = {
      {"see the child plan first", "trainer runs branch 7d496e82 --snapshot 3f2a9c71 --steps 200 --overrides lr.yaml --dry-run"},
      {"branch from the weights with a new learning rate, follow it",
       "trainer runs branch 7d496e82 --snapshot 3f2a9c71 --steps 200 --overrides lr.yaml --wait --exit-status"},
      {"continue everything from a snapshot", "trainer runs branch 7d496e82 --snapshot 3f2a9c71 --steps 100 --restore trainingState"},
      {"SFT, then RL: GRPO from an SFT snapshot's weights (rl.yaml: reward.terms, rlHyperparams)",
       "trainer runs branch 7d496e82 --snapshot 3f2a9c71 --steps 50 --method grpo --overrides rl.yaml --dry-run"}};
  return c;
}

Command runs_sweep_command() {
  Command c{"sweep", {}, "Start one child run per point of a parameter grid, all from one snapshot", "PARENT",
            "The grid file (YAML or JSON) lists axes: [{path, values}]; the points are their Cartesian\n"
            "product, the last axis varying fastest, and each point's values are its child's overrides\n"
            "(as `runs branch --overrides`). Two axes may not set the same or nested fields. Every point\n"
            "is validated before any is submitted; a parent's children may not pass 50. Each child is\n"
            "labelled with its point (sweepPoint). A sweep cut short (trainerd restarted, the answer\n"
            "lost) is finished by repeating it with the same --submission-id: no child starts twice.\n"
            "\n"
            "--compare waits for every child to end, then compares them (docs/comparisons.md): the\n"
            "source snapshot against each child that COMPLETED, scored on --dataset, and shows the\n"
            "comparison (the winner only beyond chance). The comparison's submission id derives from\n"
            "the sweep's, so repeating the command compares once. --dataset is checked before any child\n"
            "starts.",
            {{"snapshot", 0, "SNAPSHOT", "the parent's snapshot every child starts from; required", ""},
             {"steps", 0, "N", "each child's budget of optimizer updates; required", ""},
             {"grid", 0, "FILE", "the grid: axes: [{path, values}]; - reads stdin", ""},
             {"restore", 0, "weights|trainingState", "what each child restores (default weights)", ""},
             {"dry-run", 0, "", "validate every point and list them; start nothing", ""},
             {"submission-id", 0, "TOKEN",
              "idempotency key: a repeat with the same TOKEN starts each child once (default: generated)", ""},
             {"force", 0, "", "start points that repeat an existing child exactly (refused otherwise)", ""},
             {"wait", 0, "", "follow every child until it ends (a line as each ends), then list how each ended", ""},
             {"timeout", 0, "DURATION",
              "with --wait or --compare: stop waiting after DURATION (the children and comparison carry on; exit 5)",
              ""},
             {"exit-status", 0, "",
              "with --wait or --compare: exit 3 when a child (or the comparison) ends FAILED, else 4 when a child "
              "is CANCELLED",
              ""},
             {"compare", 0, "",
              "wait for every child, then compare the source snapshot with those that completed (implies --wait)", ""},
             {"dataset", 0, "DATASET", "with --compare: the rows the comparison scores on (required)", "compare"},
             {"grader", 0, "GRADER", "with --compare: default the source workload's grader, else json-label-match",
              "compare"},
             {"max-new-tokens", 0, "N", "with --compare: the completion-token ceiling (default 256)", "compare"}},
            {}, runs_sweep, 1, 1, {}};
  c.examples = {{"check a grid of learning rates and batch sizes",
                 "trainer runs sweep 7d496e82 --snapshot 3f2a9c71 --steps 100 --grid grid.yaml --dry-run"},
                {"start it", "trainer runs sweep 7d496e82 --snapshot 3f2a9c71 --steps 100 --grid grid.yaml"},
                {"start it, wait for every child, then compare them with the source on held-out rows",
                 "trainer runs sweep 7d496e82 --snapshot 3f2a9c71 --steps 100 --grid grid.yaml --compare --dataset eval"},
                {"start it safely to repeat (the same token never starts a child twice)",
                 "trainer runs sweep 7d496e82 --snapshot 3f2a9c71 --steps 100 --grid grid.yaml "
                 "--submission-id lr-grid-1"}};
  return c;
}

Command runs_continue_command() {
  Command c{"continue", {}, "Continue a snapshot's full training state as a child run", "RUN",
            "Restores weights, optimizer moments, RNG and data position from --snapshot (default: the\n"
            "newest snapshot with training state) and trains --steps more updates as a new run on the\n"
            "same device count; its schedule spans its own budget. Overrides may set only the learning\n"
            "rate and hyperparams.training.validationFrequencySteps. Says why when a run cannot be\n"
            "continued.",
            child_flags(true), {}, runs_continue, 1, 1, {}};
  c.examples = {{"check it, then run it", "trainer runs continue 7d496e82 --steps 200 --overrides lr.yaml --dry-run"},
                {"continue 200 more steps and follow", "trainer runs continue 7d496e82 --steps 200 --wait --exit-status"}};
  return c;
}

}  // namespace trainer::cli

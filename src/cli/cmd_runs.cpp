// `trainer runs ...`: start, list, get, wait, cancel, annotate (metrics, hparams, compare, rollouts,
// pause, resume and snapshots have files of their own).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <random>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/list_command.h"
#include "cli/command_support.h"
#include "cli/format.h"
#include "cli/run_view.h"
#include "common/spelling.h"
#include "plan/plan.h"
#include "plan/plan_errors.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

constexpr int kSubmissionIdBytes = 8;




std::string generate_submission_id() {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < kSubmissionIdBytes; ++i) {
    unsigned v = rd() & 0xff;
    id += kHex[v >> 4];
    id += kHex[v & 15];
  }
  return id;
}

ViewStyle view_style(const Context& ctx) {
  ViewStyle style;
  style.unicode = ctx.redraw;
  style.color = ctx.color;
  return style;
}

// ---- start ----------------------------------------------------------------------------------

// `written`: the plan as the user wrote it (names); `plan`: as the service resolved it (hashes).
std::string plan_summary(const json& plan, const json& written = json::object()) {
  const json config = plan.value("config", json::object());
  std::string method = config.value("method", "sft");
  for (auto& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string text = method + " run of workload " + plan.value("workload", std::string("?"));
  if (plan.contains("baseModel") && plan["baseModel"].is_string()) {
    text += " on " + plan["baseModel"].get<std::string>();
  }
  if (config.contains("dataset") && config["dataset"].is_string()) {
    const std::string resolved = config["dataset"].get<std::string>();
    std::string name;
    if (written.contains("config") && written["config"].is_object() && written["config"].contains("dataset") &&
        written["config"]["dataset"].is_string()) {
      name = written["config"]["dataset"].get<std::string>();
    }
    if (name.empty() || name == resolved) text += ", dataset " + short_id(resolved);
    else if (resolved.rfind(name, 0) == 0) text += ", dataset " + short_id(resolved);  // a hash prefix
    else text += ", dataset " + name + " (" + short_id(resolved) + ")";
  }
  const json execution = plan.value("execution", json::object());
  if (execution.contains("gpus") && execution["gpus"].is_number()) {
    const int gpus = execution["gpus"].get<int>();
    text += gpus == 0 ? ", on the CPU" : ", " + std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs");
  }
  return text;
}

// A warning object of a dry run: {"field": "config.maxSeqLength", "message": "..."}.
std::string describe_warning(const json& w) {
  const std::string field = w.value("field", std::string());
  const std::string message = w.value("message", w.dump());
  return field.empty() || message.rfind(field, 0) == 0 ? message : field + ": " + message;
}

// Every error of a plan in one answer, each with its file:line:column, in the order of the text:
// one error on one line ("stdin:3:5: config.x: ..."), several under a count, the first
// kMaxPlanErrors of them, then how many more.
constexpr size_t kMaxPlanErrors = 20;

std::string plan_errors_text(const std::string& text, const std::string& source, const std::vector<Status>& errors) {
  struct Located {
    int line = 0, column = 0;
    std::string text;
  };
  std::vector<Located> all;
  for (const Status& st : errors) {
    Located l;
    if (st.field().empty()) {
      l.text = st.message();
    } else if (auto at = plan::locate_field(text, st.field())) {
      l = {at->line, at->column,
           source + ":" + std::to_string(at->line) + ":" + std::to_string(at->column) + ": " + st.describe()};
    } else {
      l.text = source + ": " + st.describe();
    }
    all.push_back(std::move(l));
  }
  std::stable_sort(all.begin(), all.end(), [](const Located& a, const Located& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  if (all.size() == 1) return all[0].text;
  std::string out = source + " has " + std::to_string(all.size()) + " errors; nothing was started:";
  for (size_t i = 0; i < all.size() && i < kMaxPlanErrors; ++i) out += "\n  " + all[i].text;
  if (all.size() > kMaxPlanErrors) {
    out += "\n  ... and " + std::to_string(all.size() - kMaxPlanErrors) + " more (fix these and run it again)";
  }
  return out;
}

int runs_start(Context& ctx) {
  auto file = ctx.inv.get("file");
  if (!file) return ctx.fail("runs start needs -f PLAN (a JSON or YAML run plan; - reads stdin)", kExitUsage);
  const bool dry_run = ctx.inv.has("dry-run");
  if (dry_run && ctx.inv.has("wait")) return ctx.fail("--dry-run starts nothing to wait for; drop --wait", kExitUsage);
  std::string error;
  auto text = read_input(*file, &error);
  if (!text) return ctx.fail(error, kExitError);
  const std::string source = *file == "-" ? "stdin" : *file;
  // "plan.yaml:7:5" for a field the plan parser or the service blames.
  ctx.locate_field = [&](const std::string& field) {
    auto at = plan::locate_field(*text, field);
    return at ? source + ":" + std::to_string(at->line) + ":" + std::to_string(at->column) : source;
  };
  std::vector<Status> errors;
  auto parsed = plan::parse_plan(*text, source, &errors);
  if (!parsed.is_ok()) return ctx.fail(plan_errors_text(*text, source, errors), kExitError);
  plan::Plan plan = std::move(parsed.value());
  const bool generated_id = !plan.submissionId.has_value();
  if (generated_id && !dry_run) plan.submissionId = generate_submission_id();
  const json body = plan::to_json(plan);

  // The service checks the plan before anyone is asked (and that is all a dry run does).
  if (dry_run || !ctx.inv.has("force")) {
    auto checked = ctx.post("/v1/runs?dryRun=true", body);
    if (!checked) return ctx.last_failure_code();
    const json resolved = checked->contains("plan") ? (*checked)["plan"] : *checked;
    // What the service found worth saying about a plan it accepts (rows it would cut, ...).
    if (ctx.text() && checked->contains("warnings") && (*checked)["warnings"].is_array()) {
      for (const auto& w : (*checked)["warnings"]) {
        const std::string line = w.is_string() ? w.get<std::string>()
                                               : (w.is_object() ? describe_warning(w) : w.dump());
        std::fprintf(stderr, "Warning: %s\n", line.c_str());
      }
    }
    if (dry_run) {
      if (!ctx.text()) {
        ctx.print_json(*checked);
      } else {
        out("Plan is valid: " + plan_summary(resolved, body) + ".\n");
        if (ctx.inv.has("show-resolved")) {
          out("\nResolved plan (every default filled in):\n" + to_yaml_text(resolved, 2));
          if (checked->contains("judgeInstructions")) out("\n" + judge_instructions_text((*checked)["judgeInstructions"]));
        } else {
          out("Nothing was started. Add --show-resolved to see every default, or drop --dry-run to start it.\n");
        }
      }
      return kExitOk;
    }
    switch (confirm(ctx, "Start the " + plan_summary(resolved, body) + "?", *file == "-")) {
      case Confirmation::kYes:
        break;
      case Confirmation::kNo:
        return ctx.fail("not started", kExitError);
      case Confirmation::kNoTerminal:
        return ctx.fail(no_terminal_message("runs start"), kExitUsage);
    }
  }

  Response r;
  CallError e;
  if (!ctx.client.post("/v1/runs", body, &r, &e)) {
    std::string message = describe_failure(e);
    if (!e.transport) {
      message += next_step(ctx, e, "/v1/runs", &body);
      if (!e.field.empty()) message = ctx.locate_field(e.field) + ": " + message;
    }
    if (e.transport && plan.submissionId) {
      message += " (the run may have been accepted: resubmit with submissionId: " + *plan.submissionId +
                 " in the plan to reach the same run)";
    }
    return ctx.fail(message, e.transport ? kExitUnreachable : kExitError);
  }
  const json& run = r.body;
  const std::string run_id = run.value("runId", std::string());
  if (!ctx.text()) {
    if (!ctx.inv.has("wait")) ctx.print_json(run);
  } else if (r.http_status == 200) {
    out("Submission " + plan.submissionId.value_or("") + " was already accepted: run " + run_id + " (" +
        run.value("phase", std::string()) + ").\n");
  } else {
    const json stored = run.contains("plan") && run["plan"].is_object() ? run["plan"] : body;
    out("Started run " + run_id + ": the " + plan_summary(stored, body) + " (submission " +
        plan.submissionId.value_or("") + ").\n");
    if (!ctx.inv.has("wait")) {
      out("Follow it with `trainer runs wait " + short_id(run_id) + "`.\n");
    }
  }
  std::fflush(stdout);
  ctx.locate_field = nullptr;  // from here on, errors are about the run, not the plan file
  if (ctx.inv.has("wait")) return wait_for_run(ctx, run_id);
  return kExitOk;
}

// ---- list / get -----------------------------------------------------------------------------

int runs_list(Context& ctx) {
  ListView view;
  view.path = "/v1/runs";
  if (auto phase = ctx.inv.get("phase")) {
    std::string p = *phase;
    if (p != "open") {
      for (auto& c : p) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    append_query(&view.path, "phase", p);
  }
  if (auto w = ctx.inv.get("workload")) append_query(&view.path, "workload", *w);
  view.paging = Paging::kLimitOffset;
  view.items = "runs";
  view.header = run_list_header();
  view.row = run_list_row;
  view.empty = [&ctx](const json&) -> std::string {
    return ctx.inv.has("phase") || ctx.inv.has("offset") ? "No runs match.\n"
                                                         : "No runs yet; start one with `trainer runs start -f plan.yaml`.\n";
  };
  view.more_after_empty = true;
  view.more = [](const json& doc) -> std::string {
    if (!doc.contains("nextOffset") || !doc["nextOffset"].is_number()) return "";
    std::string more = "More runs: --offset " + std::to_string(doc["nextOffset"].get<long long>());
    if (doc.contains("total") && doc["total"].is_number()) {
      more += " (" + std::to_string(doc["total"].get<long long>()) + " in all)";
    }
    return more + "\n";
  };
  return run_list(ctx, view);
}

int runs_get(Context& ctx) {
  if (ctx.inv.has("follow")) return wait_for_run(ctx, ctx.inv.positionals[0]);
  return show(ctx, "/v1/runs/" + seg(ctx.inv.positionals[0]), [&](const json& run) {
    out(run_detail(run, view_style(ctx)));
  });
}

// ---- cancel / annotate ----------------------------------------------------------------------

int runs_cancel(Context& ctx) {
  auto run = ctx.get("/v1/runs/" + seg(ctx.inv.positionals[0]));
  if (!run) return ctx.last_failure_code();
  const std::string run_id = run->value("runId", std::string());
  const std::string phase = run->value("phase", std::string());
  if (is_terminal_phase(phase)) {
    return ctx.fail("run " + run_id + " has already ended (" + phase + "); there is nothing to cancel", kExitError);
  }
  // A plan without execution.saveEvery saves its adapter only at the end: cancelling keeps none.
  const json& plan = run->contains("plan") ? (*run)["plan"] : json();
  const bool keeps_nothing = plan.is_object() && plan.contains("execution") && plan["execution"].is_object() &&
                             (!plan["execution"].contains("saveEvery") || plan["execution"]["saveEvery"].is_null());
  const std::string nothing_kept =
      "its plan saves the adapter only at the end (execution.saveEvery is unset), so nothing it trained is kept";
  if (keeps_nothing && ctx.text()) std::fprintf(stderr, "Note: %s.\n", nothing_kept.c_str());
  switch (confirm(ctx, "Cancel run " + run_id + " (" + phase + ") and free its devices?", false)) {
    case Confirmation::kYes:
      break;
    case Confirmation::kNo:
      return ctx.fail("not cancelled", kExitError);
    case Confirmation::kNoTerminal:
      return ctx.fail(no_terminal_message("runs cancel"), kExitUsage);
  }
  auto after = ctx.post("/v1/runs/" + seg(run_id) + "/cancel", json::object());
  if (!after) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*after);
  else out("Cancel requested for run " + run_id + "; `trainer runs wait " + short_id(run_id) +
           "` shows it reach CANCELLED." + (keeps_nothing ? " No adapter is kept: " + nothing_kept + "." : "") +
           "\n");
  return kExitOk;
}

int runs_annotate(Context& ctx) {
  json body = json::object();
  if (auto d = ctx.inv.get("description")) body["description"] = *d;
  if (auto n = ctx.inv.get("config-name")) body["configName"] = *n;
  if (body.empty()) {
    return ctx.fail("runs annotate needs --description TEXT and/or --config-name NAME (\"\" clears either)",
                    kExitUsage);
  }
  auto run = ctx.patch("/v1/runs/" + seg(ctx.inv.positionals[0]), body);
  if (!run) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*run);
  else out("Annotated run " + run->value("runId", std::string()) + "\n");
  return kExitOk;
}

int runs_wait(Context& ctx) { return wait_for_run(ctx, ctx.inv.positionals[0]); }

}  // namespace

Command runs_command() {
  Command g;
  g.name = "runs";
  g.aliases = {"run"};
  g.summary = "Training runs: start them from a plan, follow, cancel and inspect them";
  g.examples = {{"check a plan, then start it and follow it to the end",
                 "trainer runs start -f examples/sentiment/run.yaml --dry-run --show-resolved"},
                {"start it and follow it; exit 3 if it fails", "trainer runs start -f examples/sentiment/run.yaml --wait --exit-status"},
                {"see what ran", "trainer runs list --phase open"}};
  const Flag wait_flag{"wait", 0, "", "follow the run to a terminal phase (as `runs wait` does)", ""};
  const Flag exit_status{"exit-status", 0, "", "exit non-zero when the run ends FAILED (3) or CANCELLED (4)", ""};
  const Flag timeout{"timeout", 0, "DURATION", "stop watching after this long (90s, 15m0s, 2h); exits 5, the run carries on", ""};
  const Flag force{"force", 0, "", "do not ask for confirmation", ""};
  Flag start_exit_status = exit_status;
  start_exit_status.requires_flag = "wait";
  Flag start_timeout = timeout;
  start_timeout.requires_flag = "wait";
  Flag get_exit_status = exit_status;
  get_exit_status.requires_flag = "follow";

  Command start{"start", {}, "Start a run from a JSON or YAML plan", "",
                "The plan is checked on this machine, then by the service; then you are asked to confirm,\n"
                "unless --force. A plan without submissionId gets a generated one; resubmitting a plan with\n"
                "the same submissionId reaches the same run instead of starting another.\n"
                "\n"
                "A short plan (every field not written takes its default):\n"
                "\n"
                "  kind: run\n"
                "  workload: sentiment-demo          # trainer workloads create sentiment-demo\n"
                "  baseModel: tiny-qwen3             # trainer base-models list --all\n"
                "  config:\n"
                "    dataset: sentiment-train        # trainer datasets create -f FILE --name sentiment-train\n"
                "    hyperparams:\n"
                "      optimizer: {learningRate: 0.003}\n"
                "      training: {maxSteps: 60, batchSize: 8}\n"
                "    maxSeqLength: 128\n"
                "  execution: {gpus: 0}              # 0 trains on the CPU\n"
                "\n"
                "A complete one is examples/sentiment/run.yaml. `--dry-run --show-resolved` prints a plan\n"
                "with every default filled in; docs/plans.md lists every field with its default and range.",
                {{"file", 'f', "PLAN", "the run plan (JSON or YAML); - reads stdin", ""},
                 {"dry-run", 0, "", "check the plan with the service, start nothing", ""},
                 {"show-resolved", 0, "", "print the plan with every default filled in", "dry-run"},
                 wait_flag, start_exit_status, start_timeout, force},
                {}, runs_start, 0, 0, {}};
  start.examples = {
      {"check a plan and print every default; starts nothing",
       "trainer runs start -f examples/sentiment/run.yaml --dry-run --show-resolved"},
      {"start it without asking, follow it live, exit 3 if it fails",
       "trainer runs start -f examples/sentiment/run.yaml --force --wait --exit-status"},
      {"start a plan piped on stdin (no prompt can be asked: --force) and print the run as JSON",
       "cat examples/sentiment/run.yaml | trainer runs start -f - --force -o json"}};
  g.children.push_back(start);

  Command list{"list", {}, "List runs, newest first", "", "",
               with_paging({{"phase", 0, "PHASE", "open (every unfinished run) or a phase: QUEUED, TRAINING, COMPLETED, ...", ""},
                            {"workload", 0, "WORKLOAD", "only this workload's runs", ""}},
                           "at most N runs (service default 50, max 100)", "skip the first N runs"),
               {}, runs_list, 0, 0, {}};
  list.examples = {{"every run, newest first", "trainer runs list"},
                   {"the unfinished ones of one workload", "trainer runs list --phase open --workload sentiment-demo"},
                   {"the next page of 20", "trainer runs list --limit 20 --offset 20"}};
  g.children.push_back(list);

  Command get{"get", {}, "Show a run: state, progress, results, cost", "RUN",
              "RUN is a run id or any unambiguous prefix of one (`trainer runs list` shows them).",
              {{"follow", 0, "", "keep the progress line live until the run ends (as `runs wait`)", ""},
               get_exit_status},
              {}, runs_get, 1, 1, {}};
  get.examples = {{"a run by an id prefix", "trainer runs get 7d496e82"},
                  {"the whole record as JSON", "trainer runs get 7d496e82 -o json"},
                  {"follow it live; exit 3 if it fails", "trainer runs get 7d496e82 --follow --exit-status"}};
  g.children.push_back(get);

  Command wait{"wait", {"watch"}, "Follow a run live until it reaches COMPLETED, FAILED or CANCELLED", "RUN",
               "Exits 0 on any terminal phase unless --exit-status. Ctrl-C or --timeout stop the\n"
               "watching only; the run carries on. A dropped connection is retried 8 times over about\n"
               "two minutes. With -o json: one event per line, a terminal event, then the full record.",
               {exit_status, timeout}, {}, runs_wait, 1, 1, {}};
  wait.examples = {{"follow a run to its end", "trainer runs wait 7d496e82"},
                   {"in a script: at most 2 hours, non-zero unless it completed",
                    "trainer runs wait 7d496e82 --timeout 2h --exit-status"},
                   {"its events, one JSON object per line", "trainer runs wait 7d496e82 -o json-compact"}};
  g.children.push_back(wait);

  Command cancel{"cancel", {}, "Cancel a run and free its devices (asks first unless --force)", "RUN",
                 "Returns once the service accepted the request; `runs wait` shows CANCELLED. A run whose plan\n"
                 "sets no execution.saveEvery saves its adapter only at the end: cancelling it keeps none.",
                 {force}, {}, runs_cancel, 1, 1, {}};
  cancel.examples = {{"cancel a run (asks first)", "trainer runs cancel 7d496e82"},
                     {"in a script", "trainer runs cancel 7d496e82 --force"}};
  g.children.push_back(cancel);

  Command annotate{"annotate", {}, "Set a run's description and/or config name", "RUN", "",
                   {{"description", 0, "TEXT", "free text (\"\" clears it)", ""},
                    {"config-name", 0, "NAME", "label of this configuration in score tables (\"\" clears it)", ""}},
                   {}, runs_annotate, 1, 1, {}};
  annotate.examples = {{"describe a run", "trainer runs annotate 7d496e82 --description \"rank 16, lr 3e-3\""},
                       {"label its configuration, clear the description",
                        "trainer runs annotate 7d496e82 --config-name r16-lr3e-3 --description \"\""}};
  g.children.push_back(annotate);

  g.children.push_back(runs_metrics_command());
  g.children.push_back(runs_hparams_command());
  g.children.push_back(runs_engine_config_command());
  g.children.push_back(runs_engine_runtime_command());
  g.children.push_back(runs_rollouts_command());
  g.children.push_back(runs_tensorboard_command());
  g.children.push_back(runs_pause_command());
  g.children.push_back(runs_resume_command());
  g.children.push_back(runs_snapshots_command());
  g.children.push_back(runs_compare_command());
  g.children.push_back(runs_branch_command());
  g.children.push_back(runs_continue_command());
  g.children.push_back(runs_sweep_command());
  g.children.push_back(runs_branches_command());
  g.children.push_back(runs_tree_command());
  g.children.push_back(runs_ancestry_command());
  return g;
}

}  // namespace trainer::cli

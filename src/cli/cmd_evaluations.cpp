// `trainer evaluations start|list|get|wait|report|rows|cancel|annotate` (docs/evaluations.md).
#include <chrono>
#include <map>
#include <thread>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/list_command.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

bool ended(const std::string& phase) { return phase == "COMPLETED" || phase == "FAILED" || phase == "CANCELLED"; }

std::string model_text(const json& e) {
  const json m = e.value("model", json::object());
  const std::string kind = m.value("kind", std::string());
  // An adapter has two identities, the run that trained it and the model it was registered as:
  // both are shown, the one it was named by first.
  const std::string run = m.contains("runId") ? short_id(m.value("runId", std::string())) : "";
  const std::string model = m.contains("modelId") ? short_id(m.value("modelId", std::string())) : "";
  if (kind == "runAdapter") return "run " + run + " adapter" + (model.empty() ? "" : " (model " + model + ")");
  if (kind == "registeredAdapter") return "model " + model + (run.empty() ? "" : " (run " + run + "'s adapter)");
  if (kind == "registeredBase") return "model " + short_id(m.value("modelId", std::string())) + " (base)";
  return m.value("baseModel", std::string()) + " (base)";
}

// Dataset content hash -> the name that points at it now (datasets without a name left out).
using DatasetNames = std::map<std::string, std::string>;

// The names of the datasets answered at `path` (one dataset, or a list under "datasets"); quietly
// none on any failure: the names only dress the hashes up.
DatasetNames dataset_names(Context& ctx, const std::string& path) {
  DatasetNames names;
  Response r;
  CallError e;
  if (!ctx.client.get(path, &r, &e) || !r.body.is_object()) return names;
  const json list = r.body.contains("datasets") ? r.body["datasets"] : json::array({r.body});
  for (const auto& d : list) {
    if (d.is_object() && d.contains("name") && d["name"].is_string()) names[str(d, "hash")] = str(d, "name");
  }
  return names;
}

// The evaluated dataset as a user knows it: "NAME (HASH12)", or the short hash alone.
std::string dataset_text(const json& e, const DatasetNames& names) {
  const std::string hash = e.value("dataset", json::object()).value("hash", std::string());
  auto it = names.find(hash);
  return it == names.end() ? short_id(hash) : it->second + " (" + short_id(hash) + ")";
}

std::string progress_text(const json& e) {
  const json p = e.value("progress", json::object());
  const std::string total = p.contains("rowsTotal") && !p["rowsTotal"].is_null() ? std::to_string(p["rowsTotal"].get<int64_t>()) : "?";
  return std::to_string(p.value("rowsDone", int64_t{0})) + "/" + total;
}

void print_report_text(const json& report) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"Mean score", score_text(report, "meanScore") + " over " + std::to_string(report.value("scoredRows", int64_t{0})) +
                         " scored rows of " + std::to_string(report.value("rows", int64_t{0}))},
      {"Exact match", score_text(report, "exactMatchRate")}};
  std::string unscored;
  const json causes = report.value("unscored", json::object());
  for (const auto& [cause, n] : causes.items()) {
    unscored += (unscored.empty() ? "" : ", ") + cause + " " + std::to_string(n.get<int64_t>());
  }
  rows.push_back({"Unscored", unscored.empty() ? "none" : unscored + " (not counted in the mean)"});
  out(render_fields(rows));
  const json fields = report.value("perFieldAccuracy", json::array());
  if (!fields.empty()) {
    std::vector<std::vector<std::string>> table;
    for (const auto& f : fields) {
      table.push_back({f.value("field", std::string()), score_text(f, "accuracy"),
                       std::to_string(f.value("correct", int64_t{0})) + "/" + std::to_string(f.value("rows", int64_t{0}))});
    }
    out("\nPer-field accuracy, worst first:\n" + render_table({"FIELD", "ACCURACY", "CORRECT"}, table));
  }
}

int print_evaluation(Context& ctx, const json& e) {
  if (!ctx.text()) {
    ctx.print_json(e);
    return kExitOk;
  }
  const json grader = e.value("grader", json::object());
  std::vector<std::pair<std::string, std::string>> rows = {
      {"Evaluation", e.value("evaluationId", std::string())},
      {"Phase", e.value("phase", std::string())},
      {"Model", model_text(e)},
      {"Dataset", dataset_text(e, dataset_names(ctx, "/v1/datasets/" + seg(e.value("dataset", json::object())
                                                                               .value("hash", std::string()))))},
      {"Grader", grader.value("kind", std::string())},
      {"Grader instructions", e.value("graderInstructionsSource", std::string())},
      {"Workload", e["workload"].is_object() ? e["workload"].value("name", std::string()) : "-"},
      {"Max new tokens", std::to_string(e.value("maxNewTokens", int64_t{0}))},
      {"Progress", progress_text(e) + " rows"},
      {"Created", e.value("createdAt", std::string())}};
  // Its attempts, when one was lost (an evaluation's job gets at most 3: docs/durability.md).
  const json attempts = e.value("attempts", json::array());
  if (attempts.is_array() && !attempts.empty()) {
    const json as_run = {{"attempts", attempts},
                         {"attempt", attempts.back().value("number", 1)},
                         {"plan", {{"execution", {{"maxAttempts", 3}}}}}};
    if (std::string text = attempts_text(as_run, false); !text.empty()) rows.push_back({"Attempts", text});
  }
  const json claim = e.value("claim", json(nullptr));
  if (claim.is_object()) {
    const std::string devices = std::to_string(claim.value("devices", 1)) + " device(s) of pool " + str(claim, "pool");
    const std::string state = str(claim, "state");
    rows.push_back({"Devices", state == "QUEUED" ? "waiting for " + devices + " (queued since " + str(claim, "since") + ")"
                               : state.empty() ? devices : devices + " (" + state + ")"});
  }
  const json cost = e.value("cost", json(nullptr));
  if (cost.is_object() && cost.contains("deviceSeconds")) {
    const std::string kind = cost.value("deviceKind", std::string(cost.value("gpuSeconds", 0.0) > 0 ? "GPU" : "CPU"));
    rows.push_back({"Cost", format_device_seconds(cost.value("deviceSeconds", 0.0), kind)});
  }
  if (!e.value("description", std::string()).empty()) rows.push_back({"Description", e["description"].get<std::string>()});
  if (e.contains("failureReason")) rows.push_back({"Failure", e["failureReason"].get<std::string>()});
  out(render_fields(rows));
  if (e.value("phase", std::string()) == "COMPLETED") {
    out("\n");
    print_report_text(e["report"]);
  }
  return kExitOk;
}

int wait_for_evaluation(Context& ctx, const std::string& ref) {
  double timeout_seconds = 0;
  if (auto t = ctx.inv.get("timeout")) {
    auto parsed = parse_duration(*t);
    if (!parsed) return ctx.fail("--timeout \"" + *t + "\" is not a duration; write it like 90s, 15m0s or 2h", kExitUsage);
    timeout_seconds = *parsed;
  }
  const auto start = std::chrono::steady_clock::now();
  std::string last;
  bool explained = false;
  for (;;) {
    auto e = ctx.get("/v1/evaluations/" + seg(ref));
    if (!e) return ctx.last_failure_code();
    if (!explained) {
      const std::string id = short_id(e->value("evaluationId", ref));
      explain_interrupt("evaluation " + id, "trainer evaluations wait " + id, "trainer evaluations cancel " + id);
      explained = true;
    }
    const std::string phase = e->value("phase", std::string());
    const std::string line = phase + " " + progress_text(*e) + " rows";
    if (ctx.text() && !ctx.quiet && line != last) std::fprintf(stderr, "evaluation %s: %s\n", short_id(e->value("evaluationId", ref)).c_str(), line.c_str());
    last = line;
    if (ended(phase)) {
      print_evaluation(ctx, *e);
      if (ctx.inv.has("exit-status")) {
        if (phase == "FAILED") return kExitRunFailed;
        if (phase == "CANCELLED") return kExitRunCancelled;
      }
      return kExitOk;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds > 0 && elapsed >= timeout_seconds) {
      return ctx.fail("stopped waiting after " + format_duration(timeout_seconds) + " (--timeout); evaluation " + ref +
                          " carries on",
                      kExitTimeout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int evaluations_start(Context& ctx) {
  json body = {{"model", ctx.inv.get_or("model", "")}};
  for (const char* key : {"dataset", "grader", "workload", "description"}) {
    if (auto v = ctx.inv.get(key)) body[key] = *v;
  }
  if (auto f = ctx.inv.get("grader-instructions")) {
    std::string error;
    auto text = read_input(*f, &error);
    if (!text) return ctx.fail(error, kExitUsage);
    body["graderInstructions"] = *text;
  }
  int code = kExitOk;
  auto max_new = int_flag(ctx, "max-new-tokens", &code);
  if (code != kExitOk) return code;
  if (max_new) body["maxNewTokens"] = *max_new;
  auto e = ctx.post("/v1/evaluations", body);
  if (!e) return ctx.last_failure_code();
  const std::string id = e->value("evaluationId", std::string());
  if (ctx.inv.has("wait")) return wait_for_evaluation(ctx, id);
  if (!ctx.text()) {
    ctx.print_json(*e);
    return kExitOk;
  }
  out("Started evaluation " + id + " of " + model_text(*e) + "; follow it with `trainer evaluations wait " + short_id(id) +
      "`.\n");
  return kExitOk;
}

int evaluations_list(Context& ctx) {
  ListView view;
  view.path = "/v1/evaluations";
  for (const char* key : {"phase", "workload", "model"}) {
    if (auto v = ctx.inv.get(key)) append_query(&view.path, key, *v);
  }
  view.paging = Paging::kLimit;
  view.items = "evaluations";
  view.header = {"EVALUATION", "PHASE", "MODEL", "GRADER", "DATASET", "MEAN SCORE", "ROWS"};
  const DatasetNames names = ctx.text() ? dataset_names(ctx, "/v1/datasets") : DatasetNames();
  view.row = [names](const json& e, double) -> std::vector<std::string> {
    return {short_id(e.value("evaluationId", std::string())), e.value("phase", std::string()), model_text(e),
            e.value("grader", json::object()).value("kind", std::string()), dataset_text(e, names),
            score_text(e.value("report", json::object()), "meanScore"), progress_text(e)};
  };
  view.empty = [](const json&) -> std::string {
    return "No evaluations. Start one with `trainer evaluations start --model RUN_OR_BASE_MODEL --dataset D`.\n";
  };
  return run_list(ctx, view);
}

int evaluations_get(Context& ctx) {
  // --follow: as `evaluations wait` (its progress, then the evaluation once it ended).
  if (ctx.inv.has("follow")) return wait_for_evaluation(ctx, ctx.inv.positionals[0]);
  auto e = ctx.get("/v1/evaluations/" + seg(ctx.inv.positionals[0]));
  if (!e) return ctx.last_failure_code();
  return print_evaluation(ctx, *e);
}

int evaluations_wait(Context& ctx) { return wait_for_evaluation(ctx, ctx.inv.positionals[0]); }

int evaluations_report(Context& ctx) {
  return show(ctx, "/v1/evaluations/" + seg(ctx.inv.positionals[0]) + "/report", [&](const json& r) {
    print_report_text(r);
  });
}

int evaluations_rows(Context& ctx) {
  ListView view;
  view.path = "/v1/evaluations/" + seg(ctx.inv.positionals[0]) + "/rows";
  view.paging = Paging::kLimitOffset;
  view.items = "rows";
  view.header = {"LINE", "SCORE", "EXACT", "OUTPUT"};
  view.row = [](const json& r, double) -> std::vector<std::string> {
    std::string output = r.value("output", std::string());
    if (output.size() > 60) output = output.substr(0, 57) + "...";
    for (char& c : output) {
      if (c == '\n') c = ' ';
    }
    return {std::to_string(r.value("line", int64_t{0})),
            r["score"].is_null() ? "unscored: " + r.value("unscoredCause", std::string()) : score_text(r, "score"),
            r.value("exactMatch", false) ? "yes" : "no", output};
  };
  return run_list(ctx, view);
}

int evaluations_cancel(Context& ctx) {
  auto e = ctx.get("/v1/evaluations/" + seg(ctx.inv.positionals[0]));
  if (!e) return ctx.last_failure_code();
  const std::string id = e->value("evaluationId", std::string());
  const std::string phase = e->value("phase", std::string());
  if (ended(phase)) return ctx.fail("evaluation " + id + " has already ended (" + phase + "); there is nothing to cancel", kExitError);
  switch (confirm(ctx, "Cancel evaluation " + id + " (" + phase + ")?", false)) {
    case Confirmation::kYes:
      break;
    case Confirmation::kNo:
      return ctx.fail("not cancelled", kExitError);
    case Confirmation::kNoTerminal:
      return ctx.fail(no_terminal_message("evaluations cancel"), kExitUsage);
  }
  auto after = ctx.post("/v1/evaluations/" + seg(id) + "/cancel", json::object());
  if (!after) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*after);
  else out("Cancel requested for evaluation " + id + "; `trainer evaluations wait " + short_id(id) + "` shows it end.\n");
  return kExitOk;
}

int evaluations_annotate(Context& ctx) {
  if (!ctx.inv.has("description")) return ctx.fail("--description is required", kExitUsage);
  auto e = ctx.patch("/v1/evaluations/" + seg(ctx.inv.positionals[0]), {{"description", ctx.inv.get_or("description", "")}});
  if (!e) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*e);
  else out("Evaluation " + e->value("evaluationId", std::string()) + " annotated.\n");
  return kExitOk;
}

}  // namespace

Command evaluations_command() {
  Command g;
  g.name = "evaluations";
  g.aliases = {"evaluation"};
  g.summary = "Evaluations: a model answers a dataset's prompts and a grader scores the answers";
  g.description =
      "MODEL is a registered model's id (trainer trained-models list), a completed run's id (its adapter)\n"
      "or a selected base model's name (a baseline).\n"
      "A row's prompt is the row without its final assistant message; that message is the expected\n"
      "answer. Unscored rows (an evaluator that failed) count in no average. See docs/evaluations.md.";
  g.examples = {{"evaluate a run's adapter on its workload's dataset and wait", "trainer evaluations start --model 7d496e82 --wait"},
                {"the baseline: the base model on the same dataset", "trainer evaluations start --model qwen3-tiny --workload tickets --dataset eval --wait"},
                {"the mean score only", "trainer evaluations get 3f2a9c71 --jq .report.meanScore"}};
  const Flag wait{"wait", 0, "", "follow the evaluation until it ends", ""};
  const Flag exit_status{"exit-status", 0, "", "exit 3 when it ends FAILED, 4 when CANCELLED", "wait"};
  const Flag timeout{"timeout", 0, "DURATION", "stop waiting after this long (exits 5; the evaluation carries on)", ""};
  Command start{"start", {}, "Start an evaluation of a model on a dataset", "",
                "The dataset defaults to the workload's evaluation dataset and the grader to the workload's\n"
                "grader, else json-label-match. A run's adapter carries its own workload; a base model needs\n"
                "--workload. Answers are greedy, at most --max-new-tokens tokens each.",
                {{"model", 0, "MODEL", "a registered model's id, a completed run's id (or prefix), or a base model's name", ""},
                 {"dataset", 0, "DATASET", "dataset name, hash or unique prefix", ""},
                 {"grader", 0, "GRADER", "json-label-match, rule:/ABS/PATH.py, bundle:..., http:URL or model:JUDGE", ""},
                 {"grader-instructions", 0, "FILE", "the judge's instructions (model: graders), - for stdin", ""},
                 {"workload", 0, "WORKLOAD", "the workload whose baseline this is (required for a base model)", ""},
                 {"max-new-tokens", 0, "N", "the completion-token ceiling (default 256)", ""},
                 {"description", 0, "TEXT", "a note kept with the evaluation", ""},
                 wait, exit_status, timeout},
                {}, evaluations_start, 0, 0, {}};
  start.examples = {g.examples[0], g.examples[1]};
  Command list{"list", {}, "List evaluations with their scores, newest first", "", "",
               with_paging({{"phase", 0, "PHASE", "QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED or open", ""},
                            {"workload", 0, "WORKLOAD", "only this workload's", ""},
                            {"model", 0, "MODEL", "only this model's (run id or base model name)", ""}},
                           "at most N (default 50)", ""),
               {}, evaluations_list, 0, 0, {}};
  list.examples = {{"open evaluations", "trainer evaluations list --phase open"}};
  Flag follow_exit_status = exit_status;
  follow_exit_status.requires_flag = "follow";
  Flag follow_timeout = timeout;
  follow_timeout.requires_flag = "follow";
  Command get{"get", {}, "Show an evaluation: model, dataset, grader, progress, report", "EVALUATION",
              "--follow shows its progress until it ends, then the evaluation (as `evaluations wait`).",
              {{"follow", 0, "", "follow the evaluation until it ends", ""}, follow_exit_status, follow_timeout}, {},
              evaluations_get, 1, 1, {}};
  get.examples = {{"the mean score", "trainer evaluations get 3f2a9c71 --jq .report.meanScore"},
                  {"follow it to its end, exit 3 if it failed", "trainer evaluations get 3f2a9c71 --follow --exit-status"}};
  Command wait_cmd{"wait", {}, "Follow an evaluation until it ends", "EVALUATION", "", {exit_status, timeout}, {},
                   evaluations_wait, 1, 1, {}};
  wait_cmd.flags[0].requires_flag = "";
  wait_cmd.examples = {{"wait quietly, exit 3 if it failed", "trainer evaluations wait 3f2a9c71 -q --exit-status"}};
  Command report{"report", {}, "Show mean score, exact-match rate and per-field accuracy (worst first)", "EVALUATION",
                 "", {}, {}, evaluations_report, 1, 1, {}};
  report.examples = {{"per-field accuracy as JSON", "trainer evaluations report 3f2a9c71 --jq .perFieldAccuracy"}};
  Command rows{"rows", {}, "Show each row's answer, score and exact match, in file order", "EVALUATION", "",
               with_paging({}, "at most N rows (1-500; default 100)", "skip the first N"),
               {}, evaluations_rows, 1, 1, {}};
  rows.examples = {{"the unscored rows and why", "trainer evaluations rows 3f2a9c71 --jq .rows[].unscoredCause"}};
  Command cancel{"cancel", {}, "Cancel an evaluation (asks first unless --force)", "EVALUATION", "",
                 {{"force", 0, "", "do not ask for confirmation", ""}}, {}, evaluations_cancel, 1, 1, {}};
  cancel.examples = {{"cancel without asking", "trainer evaluations cancel 3f2a9c71 --force"}};
  Command annotate{"annotate", {}, "Set an evaluation's description", "EVALUATION", "",
                   {{"description", 0, "TEXT", "the new description", ""}}, {}, evaluations_annotate, 1, 1, {}};
  annotate.examples = {{"note why it ran", "trainer evaluations annotate 3f2a9c71 --description \"baseline for v2\""}};
  g.children = {start, list, get, wait_cmd, report, rows, cancel, annotate};
  return g;
}

}  // namespace trainer::cli

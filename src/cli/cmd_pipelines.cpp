// `trainer pipelines start|list|get|wait|resume|cancel|annotate` (docs/pipelines.md).
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/list_command.h"
#include "cli/run_view.h"
#include "plan/document.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

// How often a wait looks at its pipeline.
constexpr auto kPoll = std::chrono::milliseconds(500);

bool ended(const std::string& phase) { return phase == "COMPLETED" || phase == "FAILED" || phase == "CANCELLED"; }

// "train COMPLETED, judge-eval RUNNING, sft PENDING"
std::string stages_text(const json& p) {
  std::string text;
  for (const auto& s : p.value("stages", json::array())) {
    text += (text.empty() ? "" : ", ") + str(s, "name") + " " + str(s, "state");
  }
  return text;
}

// "2/3 completed"
std::string progress_text(const json& p) {
  const json stages = p.value("stages", json::array());
  size_t done = 0;
  for (const auto& s : stages) done += str(s, "state") == "COMPLETED" ? 1 : 0;
  return std::to_string(done) + "/" + std::to_string(stages.size()) + " completed";
}

// What a stage ran and what it made.
std::string stage_work(const json& s) {
  if (!str(s, "runId").empty()) return "run " + short_id(str(s, "runId"));
  if (!str(s, "evaluationId").empty()) return "evaluation " + short_id(str(s, "evaluationId"));
  if (!str(s, "curationId").empty()) return "curation " + str(s, "curationId");
  if (!str(s, "distillationId").empty()) return "distillation " + str(s, "distillationId");
  return "-";
}

std::string stage_output(const json& s) {
  const json o = s.value("output", json(nullptr));
  if (!o.is_object()) return "-";
  if (str(o, "kind") == "score") return "mean score " + score_text(o, "meanScore");
  if (str(o, "kind") == "dataset") {
    const json d = o.value("dataset", json::object());
    return "dataset " + str(d, "name") + " " + short_id(str(o, "id"));
  }
  if (!str(o, "modelId").empty()) return "model " + short_id(str(o, "modelId"));
  return "run " + short_id(str(o, "runId")) + "'s adapter";
}

std::string gate_text(const json& s) {
  const json g = s.value("gate", json(nullptr));
  if (!g.is_object()) return "-";
  const std::string min = ">= " + score_text(g, "minMeanScore");
  if (g["passed"].is_boolean()) return min + (g["passed"].get<bool>() ? " passed" : " NOT passed");
  return min;
}

int print_pipeline(Context& ctx, const json& p) {
  if (!ctx.text()) {
    ctx.print_json(p);
    return kExitOk;
  }
  std::vector<std::pair<std::string, std::string>> rows = {{"Pipeline", str(p, "pipelineId")},
                                                           {"Phase", str(p, "phase")},
                                                           {"Stages", progress_text(p)},
                                                           {"Created", str(p, "createdAt")}};
  if (!str(p, "description").empty()) rows.push_back({"Description", str(p, "description")});
  if (!str(p, "failureReason").empty()) rows.push_back({"Failure", str(p, "failureReason")});
  out(render_fields(rows));
  std::vector<std::vector<std::string>> table;
  for (const auto& s : p.value("stages", json::array())) {
    table.push_back({str(s, "name"), str(s, "type"), str(s, "state"), stage_work(s), stage_output(s), gate_text(s)});
  }
  out("\n" + render_table({"STAGE", "TYPE", "STATE", "RAN AS", "OUTPUT", "GATE"}, table));
  return kExitOk;
}

int wait_for_pipeline(Context& ctx, const std::string& ref) {
  double timeout_seconds = 0;
  if (auto t = ctx.inv.get("timeout")) {
    auto parsed = parse_duration(*t);
    if (!parsed) return ctx.fail("--timeout \"" + *t + "\" is not a duration; write it like 90s, 15m0s or 2h", kExitUsage);
    timeout_seconds = *parsed;
  }
  const auto start = std::chrono::steady_clock::now();
  json last;
  std::string last_line;
  bool explained = false;
  for (;;) {
    auto p = ctx.get("/v1/pipelines/" + seg(ref));
    if (!p) return ctx.last_failure_code();
    const std::string id = str(*p, "pipelineId");
    if (!explained) {
      explain_interrupt("pipeline " + short_id(id), "trainer pipelines wait " + short_id(id),
                        "trainer pipelines cancel " + short_id(id));
      explained = true;
    }
    // -o json: one whole snapshot per change, one line each (as GET /v1/pipelines/ID/events sends).
    if (ctx.stream_events() && *p != last) {
      std::printf("%s\n", p->dump(-1, ' ', false, json::error_handler_t::replace).c_str());
      std::fflush(stdout);
    }
    last = *p;
    const std::string phase = str(*p, "phase");
    const std::string line = phase + ": " + stages_text(*p);
    if (ctx.text() && !ctx.quiet && line != last_line) std::fprintf(stderr, "pipeline %s: %s\n", short_id(id).c_str(), line.c_str());
    last_line = line;
    // INTERRUPTED waits for `pipelines resume`: watching ends there too.
    if (ended(phase) || phase == "INTERRUPTED") {
      if (!ctx.stream_events()) print_pipeline(ctx, *p);
      if (ctx.inv.has("exit-status")) {
        if (phase == "FAILED" || phase == "INTERRUPTED") return kExitRunFailed;
        if (phase == "CANCELLED") return kExitRunCancelled;
      }
      return kExitOk;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds > 0 && elapsed >= timeout_seconds) {
      return ctx.fail("stopped waiting after " + format_duration(timeout_seconds) + " (--timeout); pipeline " + id +
                          " carries on",
                      kExitTimeout);
    }
    std::this_thread::sleep_for(kPoll);
  }
}

int pipelines_start(Context& ctx) {
  auto file = ctx.inv.get("file");
  if (!file) return ctx.fail("pipelines start needs -f PLAN (a JSON or YAML pipeline plan; - reads stdin)", kExitUsage);
  const bool dry_run = ctx.inv.has("dry-run");
  if (dry_run && ctx.inv.has("wait")) return ctx.fail("--dry-run starts nothing to wait for; drop --wait", kExitUsage);
  std::string error;
  auto text = read_input(*file, &error);
  if (!text) return ctx.fail(error, kExitError);
  const std::string source = *file == "-" ? "stdin" : *file;
  auto body = plan::parse_document(*text, source);
  if (!body.is_ok()) return ctx.fail(body.status().describe(), kExitError);
  // The service checks every stage before anyone is asked (and that is all a dry run does).
  if (dry_run || !ctx.inv.has("force")) {
    const std::string path = std::string("/v1/pipelines?dryRun=true") + (ctx.inv.has("show-resolved") ? "&showResolved=true" : "");
    auto checked = ctx.post(path, *body);
    if (!checked) return ctx.last_failure_code();
    const json stages = checked->value("stages", json::array());
    if (dry_run) {
      if (!ctx.text()) {
        ctx.print_json(*checked);
        return kExitOk;
      }
      out("Pipeline plan is valid: " + std::to_string(stages.size()) + " stages.\n");
      for (const auto& s : stages) {
        out("  " + str(s, "name") + " (" + str(s, "type") + "): " + str(s, "resolution") + "\n");
        if (s.contains("plan")) out(to_yaml_text(s["plan"], 4));
      }
      out("Nothing was started.\n");
      return kExitOk;
    }
    switch (confirm(ctx, "Start the pipeline of " + std::to_string(stages.size()) + " stages?", *file == "-")) {
      case Confirmation::kYes:
        break;
      case Confirmation::kNo:
        return ctx.fail("not started", kExitError);
      case Confirmation::kNoTerminal:
        return ctx.fail(no_terminal_message("pipelines start"), kExitUsage);
    }
  }
  auto p = ctx.post("/v1/pipelines", *body);
  if (!p) return ctx.last_failure_code();
  const std::string id = str(*p, "pipelineId");
  if (ctx.inv.has("wait")) return wait_for_pipeline(ctx, id);
  if (!ctx.text()) {
    ctx.print_json(*p);
    return kExitOk;
  }
  out("Started pipeline " + id + "; follow it with `trainer pipelines wait " + short_id(id) + "`.\n");
  return kExitOk;
}

int pipelines_list(Context& ctx) {
  ListView view;
  view.path = "/v1/pipelines";
  if (auto v = ctx.inv.get("phase")) append_query(&view.path, "phase", *v);
  view.items = "pipelines";
  view.header = {"PIPELINE", "PHASE", "STAGES", "CURRENT", "CREATED"};
  view.row = [](const json& p, double) -> std::vector<std::string> {
    return {short_id(str(p, "pipelineId")), str(p, "phase"), progress_text(p),
            str(p, "currentStage").empty() ? "-" : str(p, "currentStage"), str(p, "createdAt")};
  };
  view.empty = [](const json&) -> std::string {
    return "No pipelines. Start one with `trainer pipelines start -f pipeline.yaml`.\n";
  };
  return run_list(ctx, view);
}

int pipelines_get(Context& ctx) {
  auto p = ctx.get("/v1/pipelines/" + seg(ctx.inv.positionals[0]));
  if (!p) return ctx.last_failure_code();
  return print_pipeline(ctx, *p);
}

int pipelines_wait(Context& ctx) { return wait_for_pipeline(ctx, ctx.inv.positionals[0]); }

int pipelines_resume(Context& ctx) {
  auto r = ctx.post("/v1/pipelines/" + seg(ctx.inv.positionals[0]) + "/resume", json::object());
  if (!r) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*r);
    return kExitOk;
  }
  const std::string id = str(r->value("pipeline", json::object()), "pipelineId");
  if (r->value("resumed", false)) {
    out("Resumed pipeline " + id + " at its unfinished stage; `trainer pipelines wait " + short_id(id) + "` follows it.\n");
  } else {
    out(str(*r, "message") + "\n");
  }
  return kExitOk;
}

int pipelines_cancel(Context& ctx) {
  auto p = ctx.get("/v1/pipelines/" + seg(ctx.inv.positionals[0]));
  if (!p) return ctx.last_failure_code();
  const std::string id = str(*p, "pipelineId");
  const std::string phase = str(*p, "phase");
  if (ended(phase)) return ctx.fail("pipeline " + id + " has already ended (" + phase + "); there is nothing to cancel", kExitError);
  switch (confirm(ctx, "Cancel pipeline " + id + " (" + phase + ") and its running stage?", false)) {
    case Confirmation::kYes:
      break;
    case Confirmation::kNo:
      return ctx.fail("not cancelled", kExitError);
    case Confirmation::kNoTerminal:
      return ctx.fail(no_terminal_message("pipelines cancel"), kExitUsage);
  }
  auto after = ctx.post("/v1/pipelines/" + seg(id) + "/cancel", json::object());
  if (!after) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*after);
  else out("Cancelled pipeline " + id + "; its running stage is being stopped.\n");
  return kExitOk;
}

int pipelines_annotate(Context& ctx) {
  if (!ctx.inv.has("description")) return ctx.fail("--description is required (an empty string clears it)", kExitUsage);
  auto p = ctx.patch("/v1/pipelines/" + seg(ctx.inv.positionals[0]), {{"description", ctx.inv.get_or("description", "")}});
  if (!p) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*p);
  else out("Pipeline " + str(*p, "pipelineId") + " annotated.\n");
  return kExitOk;
}

}  // namespace

Command pipelines_command() {
  Command g;
  g.name = "pipelines";
  g.aliases = {"pipeline"};
  g.summary = "Pipelines: curate, distill, train and evaluate stages in one submission, later stages using earlier outputs";
  g.description =
      "A pipeline plan is {kind: pipeline, stages: [...]}; each stage has a name and a type (curate,\n"
      "distill, train, evaluate). A stage refers to an earlier stage's output as @NAME (a train stage's\n"
      "config.dataset or warmStartModelId, an evaluate stage's model or dataset, the model inside a\n"
      "model: grader, a distill stage's distillation.from); a curate or distill stage's output is the\n"
      "dataset version its curation or distillation registers. An evaluate stage may gate the rest:\n"
      "gate: {minMeanScore: 0.8}. Cancelling a pipeline cancels its running stage, but a curation (never\n"
      "cancelled), a run already FINALIZING and a distillation already ASSEMBLING run to their end.\n"
      "See docs/pipelines.md.";
  g.examples = {{"start a pipeline and wait for it", "trainer pipelines start -f pipeline.yaml --force --wait"},
                {"each stage's state and score", "trainer pipelines get 7d496e82 --jq '.stages[]|{name,state,meanScore}'"}};
  const Flag exit_status{"exit-status", 0, "", "exit 3 when it ends FAILED or INTERRUPTED, 4 when CANCELLED", "wait"};
  const Flag timeout{"timeout", 0, "DURATION", "stop waiting after this long (exits 5; the pipeline carries on)", ""};
  Command start{"start", {}, "Submit a pipeline plan (asks first unless --force)", "",
                "Every stage is checked before anything starts; a stage that is refused names its field.",
                {{"file", 'f', "PLAN", "the pipeline plan, JSON or YAML (- reads stdin)", ""},
                 {"dry-run", 0, "", "check the plan and show each stage's resolution; start nothing", ""},
                 {"show-resolved", 0, "", "with --dry-run: the resolved plan of each train stage that refers to no stage",
                  "dry-run"},
                 {"force", 0, "", "do not ask for confirmation", ""},
                 {"wait", 0, "", "follow the pipeline until it ends", ""},
                 exit_status},
                {}, pipelines_start, 0, 0, {}};
  start.examples = {g.examples[0], {"check it only", "trainer pipelines start -f pipeline.yaml --dry-run --show-resolved"}};
  Command list{"list", {}, "List pipelines with their stage progress, newest first", "", "",
               {{"phase", 0, "PHASE", "RUNNING, INTERRUPTED, COMPLETED, FAILED, CANCELLED or open", ""}}, {},
               pipelines_list, 0, 0, {}};
  list.examples = {{"unfinished pipelines' ids", "trainer pipelines list --phase open --jq '.pipelines[].pipelineId'"}};
  Command get{"get", {}, "Show a pipeline: each stage's state, run or evaluation, output and gate", "PIPELINE", "", {}, {},
              pipelines_get, 1, 1, {}};
  get.examples = {g.examples[1]};
  Flag wait_exit_status = exit_status;
  wait_exit_status.requires_flag = "";
  Command wait_cmd{"wait", {}, "Follow a pipeline until it ends (or is interrupted)", "PIPELINE",
                   "-o json prints one whole snapshot per change, one line each, as GET /v1/pipelines/ID/events sends.",
                   {wait_exit_status, timeout}, {}, pipelines_wait, 1, 1, {}};
  wait_cmd.examples = {{"exit 3 unless it completed", "trainer pipelines wait 7d496e82 --exit-status"}};
  Command resume{"resume", {}, "Start an interrupted pipeline again at its unfinished stage", "PIPELINE",
                 "Finished stages are not run again. A pipeline that is not interrupted is left as it is.", {}, {},
                 pipelines_resume, 1, 1, {}};
  resume.examples = {{"resume it", "trainer pipelines resume 7d496e82"}};
  Command cancel{"cancel", {}, "Cancel a pipeline and its running stage (asks first unless --force)", "PIPELINE", "",
                 {{"force", 0, "", "do not ask for confirmation", ""}}, {}, pipelines_cancel, 1, 1, {}};
  cancel.examples = {{"cancel without asking", "trainer pipelines cancel 7d496e82 --force"}};
  Command annotate{"annotate", {}, "Set a pipeline's description", "PIPELINE", "",
                   {{"description", 0, "TEXT", "the new description (empty clears it)", ""}}, {}, pipelines_annotate, 1,
                   1, {}};
  annotate.examples = {{"note why it ran", "trainer pipelines annotate 7d496e82 --description \"judge v2\""}};
  g.children = {start, list, get, wait_cmd, resume, cancel, annotate};
  return g;
}

}  // namespace trainer::cli

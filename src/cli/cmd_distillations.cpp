// `trainer distillations create|list|get|wait|pause|resume|cancel|rejections`: a teacher answers
// every decision of a dataset, and the accepted answers become a new version of a dataset
// (docs/distillations.md).
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/list_command.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

// How often `wait` and `get --follow` look at the distillation again.
constexpr auto kDistillationPoll = std::chrono::milliseconds(500);
// `distillations wait`'s default deadline: none.
constexpr double kDefaultWaitSeconds = 0;

bool distillation_ended(const std::string& phase) {
  return phase == "COMPLETED" || phase == "FAILED" || phase == "CANCELLED";
}

std::string progress_of(const json& d) {
  const json p = d.value("progress", json::object());
  const json decisions = p.value("decisions", json::object());
  const json chunks = p.value("chunks", json::object());
  return str(decisions, "answered") + "/" + str(decisions, "total") + " decisions (" +
         str(decisions, "accepted") + " accepted, " + str(decisions, "rejected") + " rejected), chunks " +
         str(chunks, "stored") + "/" + str(chunks, "total");
}

void print_distillation(const json& d) {
  const json s = d.value("sampling", json::object());
  std::vector<std::pair<std::string, std::string>> rows = {
      {"Distillation", str(d, "distillationId")},
      {"Status", str(d, "phase")},
      {"Workload", str(d, "workload")},
      {"Teacher", str(d, "teacher")},
      {"From", str(d, "from") + " (" + short_id(str(d.value("source", json::object()), "hash")) + ")"},
      {"To", str(d, "to")},
      {"Progress", progress_of(d)},
      {"Sampling", "replicas " + str(s, "replicas") + ", max tokens " + str(s, "maxTokens") +
                       ", temperature " + str(s, "temperature") + ", top-p " + str(s, "topP") + ", seed " +
                       str(s, "seed")}};
  const json smoke = d.value("smokeResult", json(nullptr));
  if (smoke.is_object()) {
    rows.push_back({"Smoke", std::string(smoke.value("passed", false) ? "passed" : "failed") + " (" +
                                 str(smoke, "accepted") + " of " + str(smoke, "decisions") + " accepted)"});
  }
  const json result = d.value("result", json(nullptr));
  if (result.is_object()) {
    const json r = result.value("dataset", json::object());
    rows.push_back(
        {"Registered", str(r, "name") + " (" + short_id(str(r, "hash")) + ", " + str(r, "rows") + " rows)"});
  }
  if (!str(d, "failureReason").empty()) rows.push_back({"Failure", str(d, "failureReason")});
  out(render_fields(rows));
}

// Follows a distillation until it ends (a PAUSED one is waited on), a line on stderr as it moves,
// then shows it. --exit-status: 3 unless it COMPLETED. --timeout: 5 when it passed.
int follow(Context& ctx, const std::string& ref, double timeout_seconds) {
  const auto start = std::chrono::steady_clock::now();
  std::string last;
  for (;;) {
    auto d = ctx.get("/v1/distillations/" + seg(ref));
    if (!d) return ctx.last_failure_code();
    const std::string phase = str(*d, "phase");
    const std::string line = phase + ", " + progress_of(*d);
    if (ctx.text() && !ctx.quiet && line != last) {
      std::fprintf(stderr, "distillation %s: %s\n", str(*d, "distillationId").c_str(), line.c_str());
    }
    last = line;
    if (distillation_ended(phase)) {
      if (ctx.text())
        print_distillation(*d);
      else
        ctx.print_json(*d);
      return ctx.inv.has("exit-status") && phase != "COMPLETED" ? kExitRunFailed : kExitOk;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds > 0 && elapsed >= timeout_seconds) {
      return ctx.fail("stopped waiting after " + format_duration(timeout_seconds) +
                          " (--timeout); distillation " + str(*d, "distillationId") + " carries on (" + line +
                          ")",
                      kExitTimeout);
    }
    std::this_thread::sleep_for(kDistillationPoll);
  }
}

// A flag's value as a number into body[key]; false (after printing) when it is not one.
bool number_into(Context& ctx, json& body, const std::string& flag, const std::string& key, bool integer,
                 int* code) {
  auto v = ctx.inv.get(flag);
  if (!v) return true;
  try {
    size_t used = 0;
    if (integer) {
      const long long n = std::stoll(*v, &used);
      if (used == v->size()) body[key] = n;
    } else {
      const double x = std::stod(*v, &used);
      if (used == v->size()) body[key] = x;
    }
    if (used == v->size()) return true;
  } catch (const std::exception&) {
  }
  *code =
      ctx.fail("--" + flag + ": " + (integer ? "an integer" : "a number") + " is expected, got '" + *v + "'",
               kExitUsage);
  return false;
}

int distillations_create(Context& ctx) {
  json body = json::object();
  for (const char* f : {"workload", "teacher", "from", "to"}) {
    auto v = ctx.inv.get(f);
    if (!v || v->empty()) return ctx.fail(std::string("distillations create needs --") + f, kExitUsage);
    body[f] = *v;
  }
  int code = kExitOk;
  if (!number_into(ctx, body, "replicas", "replicas", true, &code) ||
      !number_into(ctx, body, "max-tokens", "maxTokens", true, &code) ||
      !number_into(ctx, body, "temperature", "temperature", false, &code) ||
      !number_into(ctx, body, "top-p", "topP", false, &code) ||
      !number_into(ctx, body, "seed", "seed", true, &code)) {
    return code;
  }
  if (auto v = ctx.inv.get("instructions")) body["instructions"] = *v;
  if (auto v = ctx.inv.get("smoke")) {  // ROW:MSG,ROW:MSG; the server checks each
    json smoke = json::array();
    size_t start = 0;
    for (;;) {
      const size_t comma = v->find(',', start);
      smoke.push_back(v->substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    body["smoke"] = smoke;
  }
  switch (confirm(ctx,
                  "Start a distillation of " + body["from"].get<std::string>() + " by teacher " +
                      body["teacher"].get<std::string>() + " into " + body["to"].get<std::string>() + "?",
                  false)) {
    case Confirmation::kYes:
      break;
    case Confirmation::kNo:
      return ctx.fail("not started", kExitError);
    case Confirmation::kNoTerminal:
      return ctx.fail(no_terminal_message("distillations create"), kExitUsage);
  }
  auto doc = ctx.post("/v1/distillations", body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  print_distillation(*doc);
  out("It runs in the background: `trainer distillations wait " + str(*doc, "distillationId") +
      "` follows it.\n");
  return kExitOk;
}

int distillations_wait(Context& ctx) {
  int code = kExitOk;
  const std::optional<double> timeout = timeout_flag(ctx, kDefaultWaitSeconds, &code);
  if (!timeout) return code;
  return follow(ctx, ctx.inv.positionals[0], *timeout);
}

int distillations_get(Context& ctx) {
  if (ctx.inv.has("follow")) return follow(ctx, ctx.inv.positionals[0], 0);
  return show_document(ctx, "/v1/distillations/" + seg(ctx.inv.positionals[0]));
}

int distillations_list(Context& ctx) {
  ListView view;
  view.path = "/v1/distillations";
  view.items = "distillations";
  view.header = {"DISTILLATION", "STATUS", "TEACHER", "FROM", "TO", "DECISIONS", "ACCEPTED", "CREATED"};
  view.row = [](const json& d, double now) -> std::vector<std::string> {
    const json p = d.value("progress", json::object()).value("decisions", json::object());
    return {str(d, "distillationId"),
            str(d, "phase"),
            str(d, "teacher"),
            str(d, "from"),
            str(d, "to"),
            str(p, "answered") + "/" + str(p, "total"),
            str(p, "accepted"),
            age_text(str(d, "createdAt"), now)};
  };
  view.empty = [](const json&) -> std::string {
    return "No distillations; start one with `trainer distillations create`.\n";
  };
  return run_list(ctx, view);
}

// pause, resume, cancel: one POST, then the distillation as it is now.
int change(Context& ctx, const std::string& what, const std::string& said) {
  auto d = ctx.post("/v1/distillations/" + seg(ctx.inv.positionals[0]) + "/" + what, json::object());
  if (!d) return ctx.last_failure_code();
  if (!ctx.text())
    ctx.print_json(*d);
  else
    out("Distillation " + str(*d, "distillationId") + " " + said + " (" + str(*d, "phase") + ").\n");
  return kExitOk;
}

int distillations_pause(Context& ctx) {
  return change(ctx, "pause", "pauses after the chunk in flight");
}
int distillations_resume(Context& ctx) {
  return change(ctx, "resume", "resumes at its next unanswered chunk");
}

int distillations_cancel(Context& ctx) {
  auto d = ctx.get("/v1/distillations/" + seg(ctx.inv.positionals[0]));
  if (!d) return ctx.last_failure_code();
  const std::string id = str(*d, "distillationId");
  const std::string phase = str(*d, "phase");
  if (distillation_ended(phase)) {
    return ctx.fail("distillation " + id + " has already ended (" + phase + "); there is nothing to cancel",
                    kExitError);
  }
  switch (confirm(ctx, "Cancel distillation " + id + " (" + phase + ")?", false)) {
    case Confirmation::kYes:
      break;
    case Confirmation::kNo:
      return ctx.fail("not cancelled", kExitError);
    case Confirmation::kNoTerminal:
      return ctx.fail(no_terminal_message("distillations cancel"), kExitUsage);
  }
  return change(ctx, "cancel", "is cancelled; nothing will be registered");
}

int distillations_rejections(Context& ctx) {
  int code = kExitOk;
  std::string path = "/v1/distillations/" + seg(ctx.inv.positionals[0]) + "/rejections";
  if (ctx.inv.has("limit")) {
    auto limit = int_flag(ctx, "limit", &code);
    if (!limit) return code;
    append_query(&path, "limit", std::to_string(*limit));
  }
  auto r = ctx.get(path);
  if (!r) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*r);
    return kExitOk;
  }
  const json list = r->value("rejections", json::array());
  if (list.empty()) {
    out("No rejected decisions.\n");
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const json& x : list) rows.push_back({str(x, "row") + ":" + str(x, "message"), str(x, "reason")});
  out(render_table({"DECISION", "WHY"}, rows));
  if (r->value("total", int64_t{0}) > static_cast<int64_t>(list.size())) {
    out("(" + std::to_string(list.size()) + " of " + str(*r, "total") + " shown)\n");
  }
  return kExitOk;
}

}  // namespace

Command distillations_command() {
  Command g;
  g.name = "distillations";
  g.aliases = {"distillation"};
  g.summary = "A teacher answers every decision of a dataset; the accepted answers become a new version";
  g.examples = {{"distil a dataset with a declared judge as teacher",
                 "trainer distillations create --workload support --teacher judge-4b --from calls --to "
                 "calls-distilled --force"}};
  const Flag force{"force", 0, "", "do not ask for confirmation", ""};
  Command create{
      "create",
      {},
      "Start a distillation",
      "",
      "The teacher (a judge of trainerd's configuration, or a model served at one of its endpoints)\n"
      "answers every decision of --from: each assistant message (ROW:MESSAGE, zero-based), from the\n"
      "messages before it and the row's tools. A smoke pass comes first (the first 16 decisions, all\n"
      "but one must be accepted; or the --smoke list, all accepted), then the rest, stored 32 answers\n"
      "at a time. The accepted answers, in place of the source's turns, are registered as a new\n"
      "version of --to. Asks for confirmation unless --force.",
      {{"workload", 0, "WORKLOAD", "the workload it belongs to (required)", ""},
       {"teacher", 0, "MODEL", "a declared judge or a model served at an endpoint (required)", ""},
       {"from", 0, "DATASET", "the source dataset: name, hash or unique prefix (required)", ""},
       {"to", 0, "NAME", "the dataset name the rows become a new version of (required)", ""},
       {"replicas", 0, "N", "teacher calls at once (default 1)", ""},
       {"max-tokens", 0, "N", "an answer at most (default 4096)", ""},
       {"temperature", 0, "T", "sampling temperature, 0 to 2 (default 1.0)", ""},
       {"top-p", 0, "P", "nucleus sampling mass, above 0 to 1 (default 1.0)", ""},
       {"seed", 0, "N", "the requests' seed (default 0)", ""},
       {"instructions", 0, "TEXT", "a system message put before each decision's history", ""},
       {"smoke", 0, "ROW:MSG,...", "the smoke pass's decisions (all must be accepted)", ""},
       force},
      {},
      distillations_create,
      0,
      0,
      {}};
  create.examples = {{"start one",
                      "trainer distillations create --workload support --teacher judge-4b --from calls --to "
                      "calls-v2 --force"},
                     {"with an explicit smoke pass and four calls at once",
                      "trainer distillations create --workload support --teacher judge-4b --from calls --to "
                      "calls-v2 --smoke 0:1,3:1 "
                      "--replicas 4 --force"}};
  Command list{"list", {}, "List distillations, newest first", "", "", {}, {}, distillations_list, 0, 0, {}};
  list.examples = {{"every distillation", "trainer distillations list"}};
  Command get{"get",
              {},
              "Show one distillation: progress, smoke result, the registered dataset",
              "DISTILLATION",
              "",
              {{"follow", 0, "", "follow it until it ends", ""},
               {"exit-status", 0, "", "with --follow: exit 3 unless it COMPLETED", "follow"}},
              {},
              distillations_get,
              1,
              1,
              {}};
  get.examples = {{"accepted decisions so far",
                   "trainer distillations get 3f2a9c71bd04 --jq .progress.decisions.accepted"}};
  Command wait{
      "wait",
      {},
      "Follow a distillation until it ends (waiting through a pause) and show it",
      "DISTILLATION",
      "",
      {{"exit-status", 0, "", "exit 3 unless it COMPLETED", ""},
       {"timeout", 0, "DURATION", "stop waiting after this long (default 0 = no deadline; exits 5)", ""}},
      {},
      distillations_wait,
      1,
      1,
      {}};
  wait.examples = {{"wait at most an hour", "trainer distillations wait 3f2a --timeout 1h --exit-status"}};
  Command pause{"pause",
                {},
                "Pause a distillation after the chunk in flight (stored chunks are kept)",
                "DISTILLATION",
                "",
                {},
                {},
                distillations_pause,
                1,
                1,
                {}};
  pause.examples = {{"pause one", "trainer distillations pause 3f2a"}};
  Command resume{"resume",
                 {},
                 "Resume a paused distillation at its next unanswered chunk",
                 "DISTILLATION",
                 "",
                 {},
                 {},
                 distillations_resume,
                 1,
                 1,
                 {}};
  resume.examples = {{"resume one", "trainer distillations resume 3f2a"}};
  Command cancel{"cancel",
                 {},
                 "Cancel a distillation; nothing is registered",
                 "DISTILLATION",
                 "",
                 {force},
                 {},
                 distillations_cancel,
                 1,
                 1,
                 {}};
  cancel.examples = {{"cancel without asking", "trainer distillations cancel 3f2a --force"}};
  Command rejections{"rejections",
                     {},
                     "List the rejected decisions and why",
                     "DISTILLATION",
                     "",
                     {{"limit", 0, "N", "at most N (default all)", ""}},
                     {},
                     distillations_rejections,
                     1,
                     1,
                     {}};
  rejections.examples = {{"the first ten", "trainer distillations rejections 3f2a --limit 10"}};
  g.children = {create, list, get, wait, pause, resume, cancel, rejections};
  return g;
}

}  // namespace trainer::cli

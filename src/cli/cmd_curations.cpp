// `trainer curations apply|wait|get|list`: a judge scores sessions' candidate conversations and
// the kept ones become a new version of a dataset (docs/curations.md).
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/list_command.h"
#include "cli/run_view.h"
#include "plan/document.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

// How often `--wait` looks at the curation again.
constexpr auto kCurationPoll = std::chrono::milliseconds(500);
// `curations wait`'s default deadline: none.
constexpr double kDefaultWaitSeconds = 0;

bool curation_ended(const std::string& phase) { return phase == "COMPLETED" || phase == "FAILED"; }

std::string progress_of(const json& c) {
  const json p = c.value("progress", json::object());
  return str(p, "judged") + "/" + str(p, "total");
}

void print_curation(const json& c) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"Curation", str(c, "curationId")},
      {"Status", str(c, "phase")},
      {"Judged", progress_of(c)},
      {"Accepted", str(c, "accepted") + " (threshold " + str(c, "threshold") + ")"},
      {"Rejected", str(c, "rejected")},
      {"Judge", str(c, "judge")},
      {"Dataset", str(c, "dataset")}};
  const json result = c.value("result", json(nullptr));
  if (result.is_object()) {
    const json d = result.value("dataset", json::object());
    rows.push_back({"Registered", str(d, "name") + " (" + short_id(str(d, "hash")) + ", " + str(d, "rows") + " rows)"});
  }
  if (!str(c, "failureReason").empty()) rows.push_back({"Failure", str(c, "failureReason")});
  out(render_fields(rows));
}

// Follows a curation until it ends, a line on stderr as its progress changes, then shows it.
// --exit-status: 3 when it ended FAILED. --timeout: 5 when it passed (the curation carries on).
int wait_for_curation(Context& ctx, const std::string& id, double timeout_seconds) {
  const auto start = std::chrono::steady_clock::now();
  std::string last;
  for (;;) {
    auto c = ctx.get("/v1/curations/" + seg(id));
    if (!c) return ctx.last_failure_code();
    const std::string phase = str(*c, "phase");
    const std::string line = phase + ", judged " + progress_of(*c);
    if (ctx.text() && !ctx.quiet && line != last) std::fprintf(stderr, "curation %s: %s\n", id.c_str(), line.c_str());
    last = line;
    if (curation_ended(phase)) {
      if (ctx.text()) print_curation(*c);
      else ctx.print_json(*c);
      return ctx.inv.has("exit-status") && phase != "COMPLETED" ? kExitRunFailed : kExitOk;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds > 0 && elapsed >= timeout_seconds) {
      return ctx.fail("stopped waiting after " + format_duration(timeout_seconds) + " (--timeout); curation " + id +
                          " carries on (" + line + ")",
                      kExitTimeout);
    }
    std::this_thread::sleep_for(kCurationPoll);
  }
}

int curations_apply(Context& ctx) {
  auto file = ctx.inv.get("file");
  if (!file || file->empty()) return ctx.fail("curations apply needs -f REQUEST (a JSON or YAML file, or - for stdin)", kExitUsage);
  std::string error;
  auto text = read_input(*file, &error);
  if (!text) return ctx.fail(error, kExitError);
  auto body = plan::parse_document(*text, *file == "-" ? "stdin" : *file);
  if (!body.is_ok()) return ctx.fail(body.status().message(), kExitUsage);
  auto doc = ctx.post("/v1/curations", *body);
  if (!doc) return ctx.last_failure_code();
  if (ctx.inv.has("wait")) return wait_for_curation(ctx, str(*doc, "curationId"), 0);
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  print_curation(*doc);
  out("It runs in the background: `trainer curations wait " + str(*doc, "curationId") + "` follows it.\n");
  return kExitOk;
}

int curations_wait(Context& ctx) {
  int code = kExitOk;
  const std::optional<double> timeout = timeout_flag(ctx, kDefaultWaitSeconds, &code);
  if (!timeout) return code;
  return wait_for_curation(ctx, ctx.inv.positionals[0], *timeout);
}

int curations_get(Context& ctx) { return show_document(ctx, "/v1/curations/" + seg(ctx.inv.positionals[0])); }

int curations_list(Context& ctx) {
  ListView view;
  view.path = "/v1/curations";
  view.items = "curations";
  view.header = {"CURATION", "STATUS", "JUDGED", "ACCEPTED", "REJECTED", "DATASET", "CREATED"};
  view.row = [](const json& c, double now) -> std::vector<std::string> {
    return {str(c, "curationId"), str(c, "phase"), progress_of(c), str(c, "accepted"), str(c, "rejected"),
            str(c, "dataset"), age_text(str(c, "createdAt"), now)};
  };
  view.empty = [](const json&) -> std::string {
    return "No curations; start one with `trainer curations apply -f REQUEST`.\n";
  };
  return run_list(ctx, view);
}

}  // namespace

Command curations_command() {
  Command g;
  g.name = "curations";
  g.aliases = {"curation"};
  g.summary = "A judge scores sessions' conversations into a new version of a dataset";
  g.examples = {{"start one from a request file and wait for it", "trainer curations apply -f curation.yaml --wait"}};
  Command apply{"apply", {}, "Start a curation from a request file", "",
                "REQUEST (JSON or YAML) has curationId, sessionHashes, source, threshold (0 to 1), dataset\n"
                "(the name whose new version the kept candidates become), judge (a judge of trainerd's\n"
                "configuration, or a model served at one of its endpoints), and optionally systemPrompt\n"
                "(replaces the candidates' own) and graderInstructions. The judge scores each candidate once;\n"
                "those at or above the threshold are registered. The same curationId again is the same\n"
                "curation; with another request it is refused. A curation cannot be cancelled: it runs to\n"
                "its end, and a restarted trainerd resumes it at the next unjudged candidate.",
                {{"file", 'f', "REQUEST", "the request file; - reads stdin (required)", ""},
                 {"wait", 0, "", "follow it until it ends, showing judged/total", ""},
                 {"exit-status", 0, "", "with --wait: exit 3 unless it COMPLETED", "wait"}},
                {}, curations_apply, 0, 0, {}};
  apply.examples = {{"start one", "trainer curations apply -f curation.yaml"},
                    {"from stdin, waiting for it", "cat curation.json | trainer curations apply -f - --wait --exit-status"}};
  Command wait{"wait", {}, "Follow a curation until it ends and show it", "CURATION", "",
               {{"exit-status", 0, "", "exit 3 unless it COMPLETED", ""},
                {"timeout", 0, "DURATION", "stop waiting after this long (default 0 = no deadline; exits 5)", ""}},
               {}, curations_wait, 1, 1, {}};
  wait.examples = {{"wait at most ten minutes", "trainer curations wait support-v2 --timeout 10m --exit-status"}};
  Command get{"get", {}, "Show one curation: progress, counts, rejections' scores, the dataset", "CURATION", "", {}, {},
              curations_get, 1, 1, {}};
  get.examples = {{"the rejected candidates' scores", "trainer curations get support-v2 --jq .rejections"}};
  Command list{"list", {}, "List curations, newest first", "", "", {}, {}, curations_list, 0, 0, {}};
  list.examples = {{"every curation", "trainer curations list"}};
  g.children = {apply, wait, get, list};
  return g;
}

}  // namespace trainer::cli

// `trainer datasets create|list|get|name|measure|analyze|analyses`: chat-format JSONL datasets, identified by the
// hash of their rows, and their token lengths under a base model (measured now, or analysed in the background).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
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


int datasets_create(Context& ctx) {
  auto file = ctx.inv.get("file");
  if (!file) return ctx.fail("datasets create needs -f FILE (a chat-format JSONL file, or - for stdin)", kExitUsage);
  std::string error;
  auto rows = read_input(*file, &error);
  if (!rows) return ctx.fail(error, kExitError);
  json body = {{"rows", *rows}};
  if (auto name = ctx.inv.get("name")) body["name"] = *name;
  if (auto workload = ctx.inv.get("workload")) body["workload"] = *workload;
  Response r;
  CallError e;
  if (!ctx.client.post("/v1/datasets", body, &r, &e)) {
    return ctx.fail(describe_failure(e), e.transport ? kExitUnreachable : kExitError);
  }
  if (!ctx.text()) {
    ctx.print_json(r.body);
    return kExitOk;
  }
  const std::string hash = str(r.body, "hash");
  const std::string name = str(r.body, "name");
  out(std::string(r.http_status == 200 ? "Already registered: dataset " : "Registered dataset ") +
      (name.empty() ? "" : name + " ") + "(" + hash + ", " + str(r.body, "rows") +
      " rows)\n");
  // A name is a movable alias: say when this registration moved it off other rows.
  const std::string moved_from = str(r.body, "movedFrom");
  if (!name.empty() && !moved_from.empty() && moved_from != hash) {
    out("The name " + name + " moved from dataset " + short_id(moved_from) + " to " + short_id(hash) +
        "; plans naming " + name + " now train on the new rows (the old ones stay registered under their hash).\n");
  }
  return kExitOk;
}

int datasets_list(Context& ctx) {
  ListView view;
  view.path = "/v1/datasets";
  view.items = "datasets";
  view.header = {"NAME", "HASH", "ROWS", "BYTES", "CREATED"};
  view.row = [](const json& d, double now) -> std::vector<std::string> {
    return {str(d, "name"), short_id(str(d, "hash")), str(d, "rows"), str(d, "bytes"), age_text(str(d, "createdAt"), now)};
  };
  view.empty = [](const json&) -> std::string {
    return "No datasets registered; add one with `trainer datasets create -f FILE --name NAME`.\n";
  };
  return run_list(ctx, view);
}

int datasets_get(Context& ctx) { return show_document(ctx, "/v1/datasets/" + seg(ctx.inv.positionals[0])); }

int datasets_name(Context& ctx) {
  const std::string name = ctx.inv.positionals[0];
  auto doc = ctx.put("/v1/dataset-names/" + seg(name), json{{"dataset", ctx.inv.positionals[1]}});
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const std::string hash = str(*doc, "hash");
  const std::string moved_from = str(*doc, "movedFrom");
  if (moved_from == hash) {
    out("The name " + name + " already points at dataset " + short_id(hash) + "; nothing changed.\n");
  } else if (!moved_from.empty()) {
    out("The name " + name + " moved from dataset " + short_id(moved_from) + " to " + short_id(hash) + " (" +
        str(*doc, "rows") + " rows); plans naming " + name +
        " now train on these rows (the old ones stay registered under their hash).\n");
  } else {
    out("Named dataset " + short_id(hash) + " (" + str(*doc, "rows") + " rows) " + name + ".\n");
  }
  return kExitOk;
}

// The body of a measurement or an analysis: {baseModel, maxSeqLength?} from --base-model and
// --max-seq-length; nullopt after a usage error (printed; `*code` is its exit code).
std::optional<json> measure_body(Context& ctx, const std::string& command, int* code) {
  auto model = ctx.inv.get("base-model");
  if (!model || model->empty()) {
    *code = ctx.fail("datasets " + command + " needs --base-model NAME (its tokenizer and chat template measure the rows)",
                     kExitUsage);
    return std::nullopt;
  }
  json body = {{"baseModel", *model}};
  if (auto seq = ctx.inv.get("max-seq-length")) {
    char* end = nullptr;
    long long v = std::strtoll(seq->c_str(), &end, 10);
    if (seq->empty() || *end || v <= 0) {
      *code = ctx.fail("--max-seq-length must be a positive integer, got \"" + *seq + "\"", kExitUsage);
      return std::nullopt;
    }
    body["maxSeqLength"] = v;
  }
  return body;
}

// The text view of a measurement (a `measure` answer, or a completed analysis' result).
void print_measurement(const json& m) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"Rows", str(m, "rows")},
      {"Tokens per row", "min " + str(m, "minTokens") + ", mean " + str(m, "meanTokens") + ", max " +
                             str(m, "maxTokens")},
      {"Percentiles", "p50 " + str(m, "p50") + ", p90 " + str(m, "p90") + ", p99 " + str(m, "p99")},
      {"maxSeqLength", str(m, "maxSeqLength")},
      {"Rows cut", str(m, "rowsOverMaxSeqLength") + " over maxSeqLength (truncated), " +
                       str(m, "rowsAtMaxSeqLength") + " exactly at it"},
      {"Nothing to train", str(m, "rowsWithNothingToTrain") + " rows (no assistant tokens left)"},
  };
  out(render_fields(rows));
  // Rows with nothing left to train make a run fail in PREPARING: say so, and what fixes it.
  const double nothing = m.value("rowsWithNothingToTrain", 0.0);
  if (!str(m, "hint").empty()) {
    out("Hint: " + str(m, "hint") + "\n");
  } else if (nothing > 0) {
    out("Hint: " + format_number(nothing) + " of " + str(m, "rows") + " rows have no assistant token left at maxSeqLength " +
        str(m, "maxSeqLength") + "; a run with it trains on the others only, or fails when none is left. Rows need up to " +
        str(m, "maxTokens") + " tokens: raise config.maxSeqLength (`--max-seq-length N` checks a length).\n");
  }
}

int datasets_measure(Context& ctx) {
  int code = kExitOk;
  auto body = measure_body(ctx, "measure", &code);
  if (!body) return code;
  auto doc = ctx.post("/v1/datasets/" + seg(ctx.inv.positionals[0]) + "/measure", *body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  print_measurement(*doc);
  return kExitOk;
}

// ---- analyses: the measurement in the background

// How often `datasets analyze --wait` looks at the analysis again.
constexpr auto kAnalysisPoll = std::chrono::milliseconds(500);

bool analysis_ended(const std::string& phase) { return phase == "COMPLETED" || phase == "FAILED"; }

// The text view of one analysis: its state, then its measurement once it has one.
void print_analysis(const json& a) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"Analysis", str(a, "analysisId")},
      {"Dataset", str(a.value("dataset", json::object()), "ref") + " (" +
                      short_id(str(a.value("dataset", json::object()), "hash")) + ")"},
      {"Base model", str(a, "baseModel")},
      {"Status", str(a, "phase")},
      {"Attempt", str(a, "attempt")},
      {"Started", str(a, "startedAt").empty() ? "-" : str(a, "startedAt")}};
  if (!str(a, "endedAt").empty()) rows.push_back({"Ended", str(a, "endedAt")});
  if (!str(a, "failureReason").empty()) rows.push_back({"Failure", str(a, "failureReason")});
  out(render_fields(rows));
  if (a.value("result", json(nullptr)).is_object()) {
    out("\n");
    print_measurement(a["result"]);
  } else if (!analysis_ended(str(a, "phase"))) {
    const std::string ref = str(a.value("dataset", json::object()), "ref");
    out("It runs in the background: `trainer datasets analyses " + ref + "` shows it, `trainer datasets analyze " + ref +
        " --base-model " + str(a, "baseModel") + " --wait` waits for it.\n");
  }
}

// Follows an analysis until it ends, a line on stderr as its status changes, then shows it.
// --exit-status: 3 when it ended FAILED.
int wait_for_analysis(Context& ctx, const std::string& dataset, const std::string& id) {
  const std::string path = "/v1/datasets/" + seg(dataset) + "/analyses/" + seg(id);
  std::string last;
  for (;;) {
    auto a = ctx.get(path);
    if (!a) return ctx.last_failure_code();
    const std::string phase = str(*a, "phase");
    const std::string line = phase + " (attempt " + str(*a, "attempt") + ")";
    if (ctx.text() && !ctx.quiet && line != last) {
      std::fprintf(stderr, "analysis %s: %s\n", short_id(id).c_str(), line.c_str());
    }
    last = line;
    if (analysis_ended(phase)) {
      if (ctx.text()) print_analysis(*a);
      else ctx.print_json(*a);
      return ctx.inv.has("exit-status") && phase == "FAILED" ? kExitRunFailed : kExitOk;
    }
    std::this_thread::sleep_for(kAnalysisPoll);
  }
}

int datasets_analyze(Context& ctx) {
  int code = kExitOk;
  auto body = measure_body(ctx, "analyze", &code);
  if (!body) return code;
  const std::string dataset = ctx.inv.positionals[0];
  auto doc = ctx.post("/v1/datasets/" + seg(dataset) + "/analyses", *body);
  if (!doc) return ctx.last_failure_code();
  if (ctx.inv.has("wait")) return wait_for_analysis(ctx, dataset, str(*doc, "analysisId"));
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  print_analysis(*doc);
  return kExitOk;
}

int datasets_analyses(Context& ctx) {
  ListView view;
  view.path = "/v1/datasets/" + seg(ctx.inv.positionals[0]) + "/analyses";
  view.items = "analyses";
  view.header = {"ANALYSIS", "BASE MODEL", "STATUS", "ROWS", "MAX TOKENS", "ATTEMPT", "STARTED"};
  view.row = [](const json& a, double now) -> std::vector<std::string> {
    const json result = a.value("result", json(nullptr));
    const bool measured = result.is_object();
    return {short_id(str(a, "analysisId")), str(a, "baseModel"), str(a, "phase"),
            measured ? str(result, "rows") : "-", measured ? str(result, "maxTokens") : "-", str(a, "attempt"),
            str(a, "startedAt").empty() ? "-" : age_text(str(a, "startedAt"), now)};
  };
  const std::string dataset = ctx.inv.positionals[0];
  view.empty = [dataset](const json&) -> std::string {
    return "No analyses of " + dataset + "; start one with `trainer datasets analyze " + dataset +
           " --base-model MODEL`.\n";
  };
  return run_list(ctx, view);
}

}  // namespace

Command datasets_command() {
  Command g;
  g.name = "datasets";
  g.aliases = {"dataset"};
  g.summary = "Chat-format JSONL datasets, identified by the hash of their rows";
  g.examples = {{"register the bundled dataset under a name", "trainer datasets create -f examples/sentiment/train.jsonl --name sentiment-train"},
                {"how long its rows are under a base model", "trainer datasets measure sentiment-train --base-model tiny-qwen3"}};
  Command create{"create", {}, "Register a dataset (registering the same rows again returns it)", "",
                 "A name is a movable alias: registering other rows under a name moves it to them (and says\n"
                 "from which dataset); the old rows stay registered under their hash. New rows count against\n"
                 "the storage quota of --workload (without it: the shared catalog's); a token limited to some\n"
                 "workloads must name one of them.",
                 {{"file", 'f', "FILE", "chat-format JSONL file; - reads stdin", ""},
                  {"name", 0, "NAME", "a name for it (a movable alias)", ""},
                  {"workload", 0, "WORKLOAD", "the workload whose storage quota it counts against", ""}},
                 {}, datasets_create, 0, 0, {}};
  create.examples = {{"register a file under a name", "trainer datasets create -f examples/sentiment/train.jsonl --name sentiment-train"},
                     {"register rows piped on stdin, by hash only", "cat examples/sentiment/train.jsonl | trainer datasets create -f -"}};
  Command list{"list", {}, "List datasets, newest first", "", "", {}, {}, datasets_list, 0, 0, {}};
  list.examples = {{"names, hashes and sizes", "trainer datasets list"}, {"as JSON", "trainer datasets list -o json"}};
  Command get{"get", {}, "Show one dataset", "DATASET", "DATASET is a name, a hash or a hash prefix.", {}, {},
              datasets_get, 1, 1, {}};
  get.examples = {{"a dataset by name", "trainer datasets get sentiment-train"},
                  {"its hash alone", "trainer datasets get sentiment-train -o json"}};
  Command measure{"measure", {}, "Token lengths of a dataset's rows under a base model", "DATASET",
                  "Counts tokens after the base model's chat template and reports how many rows\n"
                  "a maxSeqLength would cut. Needs no GPU. It answers when the measurement is done (at most\n"
                  "2 minutes); `datasets analyze` measures a large dataset in the background.",
                  {{"base-model", 0, "NAME", "base model whose tokenizer and template to use (required)", ""},
                   {"max-seq-length", 0, "N", "count rows cut at this length (default: the plan default)", ""}},
                  {}, datasets_measure, 1, 1, {}};
  measure.examples = {{"lengths under a model's template", "trainer datasets measure sentiment-train --base-model tiny-qwen3"},
                      {"how many rows a plan's maxSeqLength: 128 would cut",
                       "trainer datasets measure sentiment-train --base-model tiny-qwen3 --max-seq-length 128"}};
  Command name{"name", {}, "Give a registered dataset a name, or move a name to it, without an upload", "NAME DATASET",
               "NAME (a movable alias) points at DATASET (a name, a hash or a hash prefix) from now on; the\n"
               "rows it pointed at before stay registered under their hash. Runs already submitted keep the\n"
               "rows they were given.",
               {}, {}, datasets_name, 2, 2, {}};
  name.examples = {{"point a name back at earlier rows", "trainer datasets name sentiment-train 3f2a9c71"},
                   {"a second name for the same rows", "trainer datasets name sentiment-v1 sentiment-train"}};
  Command analyze{"analyze", {}, "Measure a dataset's token lengths under a base model in the background", "DATASET",
                  "Starts an analysis (what `datasets measure` answers, without waiting for it) and prints its\n"
                  "status; --wait follows it until it ends and shows the measurement. The same dataset, base\n"
                  "model and --max-seq-length asked again answer the analysis already started or completed\n"
                  "(a failed one is started anew). An analysis a restarted trainerd interrupted runs again as\n"
                  "its next attempt (at most 3). Needs no GPU.",
                  {{"base-model", 0, "NAME", "base model whose tokenizer and template to use (required)", ""},
                   {"max-seq-length", 0, "N", "count rows cut at this length (default: the plan default)", ""},
                   {"wait", 0, "", "follow it until it ends, then show the measurement", ""},
                   {"exit-status", 0, "", "with --wait: exit 3 when the analysis FAILED", "wait"}},
                  {}, datasets_analyze, 1, 1, {}};
  analyze.examples = {{"start one and come back later", "trainer datasets analyze sentiment-train --base-model tiny-qwen3"},
                      {"wait for its measurement", "trainer datasets analyze sentiment-train --base-model tiny-qwen3 --wait"}};
  Command analyses{"analyses", {}, "List a dataset's analyses, newest first", "DATASET",
                   "Columns: ANALYSIS, BASE MODEL, STATUS (PENDING, RUNNING, COMPLETED, FAILED), ROWS and MAX\n"
                   "TOKENS (once measured), ATTEMPT, STARTED.",
                   {}, {}, datasets_analyses, 1, 1, {}};
  analyses.examples = {{"a dataset's analyses", "trainer datasets analyses sentiment-train"},
                       {"the newest one's longest row", "trainer datasets analyses sentiment-train --jq .analyses[0].result.maxTokens"}};
  g.children = {create, list, get, name, measure, analyze, analyses};
  return g;
}

}  // namespace trainer::cli

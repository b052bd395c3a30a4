// `trainer runs ...`: start, list, get, wait, cancel, annotate, metrics, hparams.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <random>
#include <thread>

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/run_view.h"
#include "plan/plan.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

// A dropped stream is retried this many times in a row, waiting these seconds before each
// (about two minutes in all), before `runs wait` gives up.
constexpr int kRetryDelaysSeconds[] = {1, 2, 4, 8, 15, 30, 30, 30};
constexpr int kLongPollSeconds = 15;
// Without a terminal, a progress line is printed at most this often (phase changes always).
constexpr double kPlainLineSeconds = 2.0;
constexpr int kSubmissionIdBytes = 8;

void out(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}

std::string seg(const std::string& s) { return Client::escape(s); }

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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

std::string plan_summary(const json& plan) {
  const json config = plan.value("config", json::object());
  std::string method = config.value("method", "sft");
  for (auto& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string text = method + " run of workload " + plan.value("workload", std::string("?"));
  if (plan.contains("baseModel") && plan["baseModel"].is_string()) {
    text += " on " + plan["baseModel"].get<std::string>();
  }
  if (config.contains("dataset") && config["dataset"].is_string()) {
    text += ", dataset " + config["dataset"].get<std::string>();
  }
  const json execution = plan.value("execution", json::object());
  if (execution.contains("gpus") && execution["gpus"].is_number()) {
    const int gpus = execution["gpus"].get<int>();
    text += gpus == 0 ? ", on the CPU" : ", " + std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs");
  }
  return text;
}

int runs_start(Context& ctx) {
  auto file = ctx.inv.get("file");
  if (!file) return ctx.fail("runs start needs -f PLAN (a JSON or YAML run plan; - reads stdin)", kExitUsage);
  const bool dry_run = ctx.inv.has("dry-run");
  if (ctx.inv.has("show-resolved") && !dry_run) {
    return ctx.fail("--show-resolved works with --dry-run only", kExitUsage);
  }
  if (ctx.inv.has("exit-status") && !ctx.inv.has("wait")) {
    return ctx.fail("--exit-status needs --wait on runs start", kExitUsage);
  }
  if (ctx.inv.has("timeout") && !ctx.inv.has("wait")) {
    return ctx.fail("--timeout needs --wait on runs start", kExitUsage);
  }
  if (dry_run && ctx.inv.has("wait")) return ctx.fail("--dry-run starts nothing to wait for; drop --wait", kExitUsage);
  std::string error;
  auto text = read_input(*file, &error);
  if (!text) return ctx.fail(error, kExitError);
  const std::string source = *file == "-" ? "stdin" : *file;
  auto parsed = plan::parse_plan(*text, source);
  if (!parsed.is_ok()) return ctx.fail(parsed.status().message(), kExitError);
  plan::Plan plan = std::move(parsed.value());
  const bool generated_id = !plan.submissionId.has_value();
  if (generated_id && !dry_run) plan.submissionId = generate_submission_id();
  const json body = plan::to_json(plan);

  // The service checks the plan before anyone is asked (and that is all a dry run does).
  if (dry_run || !ctx.inv.has("force")) {
    auto checked = ctx.post("/v1/runs?dryRun=true", body);
    if (!checked) return ctx.last_failure_code();
    const json resolved = checked->contains("plan") ? (*checked)["plan"] : *checked;
    if (dry_run) {
      if (!ctx.text()) {
        ctx.print_json(*checked);
      } else {
        out("Plan is valid: " + plan_summary(resolved) + ".\n");
        if (ctx.inv.has("show-resolved")) {
          out("\nResolved plan (every default filled in):\n" + to_yaml_text(resolved, 2));
        } else {
          out("Nothing was started. Add --show-resolved to see every default, or drop --dry-run to start it.\n");
        }
      }
      return kExitOk;
    }
    switch (confirm(ctx, "Start the " + plan_summary(resolved) + "?", *file == "-")) {
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
    std::string message = e.status.message();
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
    out("Started run " + run_id + " (submission " + plan.submissionId.value_or("") + ").\n");
    if (!ctx.inv.has("wait")) {
      out("Follow it with `trainer runs wait " + short_id(run_id) + "`.\n");
    }
  }
  std::fflush(stdout);
  if (ctx.inv.has("wait")) return wait_for_run(ctx, run_id);
  return kExitOk;
}

// ---- list / get -----------------------------------------------------------------------------

int runs_list(Context& ctx) {
  std::string path = "/v1/runs";
  if (auto phase = ctx.inv.get("phase")) {
    std::string p = *phase;
    if (p != "open") {
      for (auto& c : p) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    append_query(&path, "phase", p);
  }
  if (auto w = ctx.inv.get("workload")) append_query(&path, "workload", *w);
  int code = kExitOk;
  auto limit = int_flag(ctx, "limit", &code);
  if (code != kExitOk) return code;
  auto offset = int_flag(ctx, "offset", &code);
  if (code != kExitOk) return code;
  if (limit) append_query(&path, "limit", std::to_string(*limit));
  if (offset) append_query(&path, "offset", std::to_string(*offset));
  auto doc = ctx.get(path);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const json runs = doc->value("runs", json::array());
  if (runs.empty()) {
    out(ctx.inv.has("phase") || offset ? "No runs match.\n"
                                       : "No runs yet; start one with `trainer runs start -f plan.yaml`.\n");
  } else {
    std::vector<std::vector<std::string>> rows;
    const double now = now_seconds();
    for (const auto& run : runs) rows.push_back(run_list_row(run, now));
    out(render_table(run_list_header(), rows));
  }
  if (doc->contains("nextOffset") && (*doc)["nextOffset"].is_number()) {
    const long long next = (*doc)["nextOffset"].get<long long>();
    std::string more = "More runs: --offset " + std::to_string(next);
    if (doc->contains("total") && (*doc)["total"].is_number()) {
      more += " (" + std::to_string((*doc)["total"].get<long long>()) + " in all)";
    }
    out(more + "\n");
  }
  return kExitOk;
}

int runs_get(Context& ctx) {
  if (ctx.inv.has("exit-status") && !ctx.inv.has("follow")) {
    return ctx.fail("--exit-status needs --follow on runs get", kExitUsage);
  }
  if (ctx.inv.has("follow")) return wait_for_run(ctx, ctx.inv.positionals[0]);
  auto run = ctx.get("/v1/runs/" + seg(ctx.inv.positionals[0]));
  if (!run) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*run);
    return kExitOk;
  }
  out(run_detail(*run, view_style(ctx)));
  return kExitOk;
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
           "` shows it reach CANCELLED.\n");
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

// ---- metrics / hparams ----------------------------------------------------------------------

struct MetricColumn {
  const char* key;
  const char* header;
};

constexpr MetricColumn kDefaultMetricColumns[] = {
    {"step", "STEP"},
    {"loss", "LOSS"},
    {"learningRate", "LR"},
    {"gradNorm", "GRAD NORM"},
    {"tokenAccuracy", "TOKEN ACC"},
    {"tokensPerSecond", "TOK/S"},
    {"validationLoss", "VAL LOSS"},
};

std::string cell(const json& row, const std::string& key) {
  const json* v = nullptr;
  if (row.contains(key)) {
    v = &row[key];
  } else if (row.contains("measured") && row["measured"].is_object() && row["measured"].contains(key)) {
    v = &row["measured"][key];
  }
  if (!v || v->is_null()) return "";
  if (v->is_number()) {
    if (key == "tokensPerSecond") return format_thousands(static_cast<int64_t>(v->get<double>() + 0.5));
    return format_number(v->get<double>());
  }
  if (v->is_string()) return v->get<std::string>();
  return v->dump();
}

int runs_metrics(Context& ctx) {
  std::string path = "/v1/runs/" + seg(ctx.inv.positionals[0]) + "/metrics";
  int code = kExitOk;
  auto limit = int_flag(ctx, "limit", &code);
  if (code != kExitOk) return code;
  if (limit) append_query(&path, "limit", std::to_string(*limit));
  auto doc = ctx.get(path);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const json steps = doc->value("steps", json::array());
  if (steps.empty()) {
    out("No steps recorded yet.\n");
    return kExitOk;
  }
  std::vector<std::string> keys, header;
  for (const auto& c : kDefaultMetricColumns) {
    // Validation loss only when some step has it.
    if (std::string(c.key) == "validationLoss" &&
        std::none_of(steps.begin(), steps.end(), [](const json& s) { return s.contains("validationLoss"); })) {
      continue;
    }
    keys.push_back(c.key);
    header.push_back(c.header);
  }
  if (auto fields = ctx.inv.get("fields")) {
    size_t start = 0;
    while (start <= fields->size()) {
      size_t comma = fields->find(',', start);
      std::string f = fields->substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!f.empty() && std::find(keys.begin(), keys.end(), f) == keys.end()) {
        keys.push_back(f);
        std::string h = f;
        for (auto& ch : h) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        header.push_back(h);
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : steps) {
    std::vector<std::string> row;
    for (const auto& k : keys) row.push_back(cell(s, k));
    rows.push_back(row);
  }
  out(render_table(header, rows));
  return kExitOk;
}

int runs_hparams(Context& ctx) {
  auto doc = ctx.get("/v1/runs/" + seg(ctx.inv.positionals[0]) + "/hparams");
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  std::vector<std::pair<std::string, std::string>> rows;
  rows.push_back({"sha", doc->value("sha", std::string())});
  if (doc->contains("hparams") && (*doc)["hparams"].is_object()) {
    for (auto it = (*doc)["hparams"].begin(); it != (*doc)["hparams"].end(); ++it) {
      rows.push_back({it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump()});
    }
  }
  out(render_fields(rows));
  return kExitOk;
}

// ---- wait -----------------------------------------------------------------------------------

constexpr int kMinBarWidth = 8;
constexpr size_t kDefaultColumns = 80;

size_t terminal_columns() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return kDefaultColumns;
}

// Draws the live view: a redrawn line on a terminal, plain lines otherwise.
class LiveView {
 public:
  explicit LiveView(const Context& ctx) : redraw_(ctx.redraw), style_(view_style(ctx)) {}

  void update(const json& run) {
    const std::string phase = run.value("phase", std::string());
    std::string line = run_progress_line(run, style_);
    if (redraw_) {
      // A redrawn line must not wrap: narrow the bar, then cut what still does not fit.
      const size_t columns = terminal_columns();
      const size_t width = display_width(line);
      if (width >= columns) {
        ViewStyle narrow = style_;
        const int excess = static_cast<int>(width - columns) + 1;
        narrow.bar_width = std::max(kMinBarWidth, style_.bar_width - excess);
        narrow.max_width = columns - 1;
        line = run_progress_line(run, narrow);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    const bool new_phase = phase != last_phase_;
    if (redraw_) {
      if (new_phase && open_line_) out("\n");
      out("\r\033[K" + line);
      open_line_ = true;
      std::fflush(stdout);
    } else {
      const double since = std::chrono::duration<double>(now - last_print_).count();
      const int64_t step = run.contains("progress") ? run["progress"].value("step", int64_t{0}) : 0;
      if (new_phase || (line != last_line_ && since >= kPlainLineSeconds) ||
          (is_terminal_phase(phase) && line != last_line_) || (step != last_step_ && since >= kPlainLineSeconds)) {
        out(line + "\n");
        std::fflush(stdout);
        last_print_ = now;
        last_line_ = line;
        last_step_ = step;
      }
    }
    last_phase_ = phase;
  }

  void finish() {
    if (redraw_ && open_line_) out("\n");
    open_line_ = false;
    std::fflush(stdout);
  }

  void note(const std::string& text) {
    finish();
    out(text + "\n");
    std::fflush(stdout);
  }

 private:
  bool redraw_;
  ViewStyle style_;
  bool open_line_ = false;
  std::string last_phase_;
  std::string last_line_;
  int64_t last_step_ = -1;
  std::chrono::steady_clock::time_point last_print_{};
};

json terminal_event(const json& run) {
  json ev = {{"type", "terminal"}, {"runId", run.value("runId", std::string())},
             {"phase", run.value("phase", std::string())}};
  for (const char* k : {"outcome", "failureReason", "adapterPath"}) {
    if (run.contains(k)) ev[k] = run[k];
  }
  return ev;
}

int exit_code_for(const Context& ctx, const std::string& phase) {
  if (!ctx.inv.has("exit-status")) return kExitOk;
  if (phase == "FAILED") return kExitRunFailed;
  if (phase == "CANCELLED") return kExitRunCancelled;
  return kExitOk;
}

// Ctrl-C while watching: end the redrawn line, say the run carries on, exit 130.
void on_interrupt(int) {
  static const char kMessage[] = "\ntrainer: stopped watching; the run carries on (Ctrl-C stops only the watching)\n";
  ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  (void)ignored;
  ::_exit(130);
}

int runs_wait(Context& ctx) { return wait_for_run(ctx, ctx.inv.positionals[0]); }

}  // namespace

int wait_for_run(Context& ctx, const std::string& ref) {
  double timeout_seconds = 0;  // 0 = no deadline
  if (auto t = ctx.inv.get("timeout")) {
    auto parsed = parse_duration(*t);
    if (!parsed) {
      return ctx.fail("--timeout \"" + *t + "\" is not a duration; write it like 90s, 15m0s or 2h", kExitUsage);
    }
    timeout_seconds = *parsed;
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  ::signal(SIGINT, on_interrupt);
  auto first = ctx.get("/v1/runs/" + seg(ref));
  if (!first) return ctx.last_failure_code();
  json run = *first;
  const std::string run_id = run.value("runId", ref);
  LiveView view(ctx);
  const bool text = ctx.text();
  const bool compact = ctx.format == OutputFormat::kJsonCompact;
  if (text) view.update(run);

  int64_t after = -1;
  int failures = 0;
  if (!text && is_terminal_phase(run.value("phase", std::string()))) {
    // Already over: the stream still carries the run's events before the terminal one.
    Response r;
    CallError e;
    if (ctx.client.get("/v1/runs/" + seg(run_id) + "/events?waitSeconds=0", &r, &e)) {
      for (const auto& ev : r.body.value("events", json::array())) out(ev.dump() + "\n");
    }
  }
  while (!is_terminal_phase(run.value("phase", std::string()))) {
    double poll = kLongPollSeconds;
    if (timeout_seconds > 0) {
      const double left = timeout_seconds - elapsed();
      if (left <= 0) {
        if (text) view.finish();
        return ctx.fail("stopped waiting after " + format_duration(elapsed()) + "; run " + run_id + " is still " +
                            run.value("phase", std::string()) + " (follow it again with `trainer runs wait " +
                            short_id(run_id) + "`)",
                        kExitTimeout);
      }
      poll = std::min(poll, std::max(1.0, std::ceil(left)));
    }
    std::string path = "/v1/runs/" + seg(run_id) + "/events?waitSeconds=" + std::to_string(static_cast<int>(poll));
    if (after >= 0) path += "&after=" + std::to_string(after);
    Response r;
    CallError e;
    if (!ctx.client.get(path, &r, &e, static_cast<int>(poll) + 30)) {
      if (!e.transport) {
        if (text) view.finish();
        return ctx.fail(e.status.message(), kExitError);
      }
      if (failures >= static_cast<int>(std::size(kRetryDelaysSeconds))) {
        if (text) view.finish();
        return ctx.fail(e.status.message() + "; gave up following run " + run_id + " after " +
                            std::to_string(failures) + " retries (the run itself carries on)",
                        kExitUnreachable);
      }
      const int delay = kRetryDelaysSeconds[failures++];
      if (text) {
        view.note("connection to " + ctx.client.base_url() + " lost; retry " + std::to_string(failures) + " of " +
                  std::to_string(std::size(kRetryDelaysSeconds)) + " in " + std::to_string(delay) + "s");
      }
      std::this_thread::sleep_for(std::chrono::seconds(delay));
      continue;
    }
    failures = 0;
    const json events = r.body.value("events", json::array());
    for (const auto& ev : events) {
      if (ev.contains("seq") && ev["seq"].is_number()) after = std::max(after, ev["seq"].get<int64_t>());
      if (!text) {
        std::string line = ev.dump();
        out(line + "\n");
      }
    }
    if (!text) std::fflush(stdout);
    if (r.body.contains("run") && r.body["run"].is_object()) run = r.body["run"];
    if (text) view.update(run);
  }

  const std::string phase = run.value("phase", std::string());
  if (text) {
    view.finish();
    out(run_summary(run));
  } else {
    out(terminal_event(run).dump() + "\n");
    out((compact ? run.dump() : run.dump(2)) + "\n");
  }
  std::fflush(stdout);
  return exit_code_for(ctx, phase);
}

Command runs_command() {
  Command g;
  g.name = "runs";
  g.aliases = {"run"};
  g.summary = "Training runs: start them from a plan, follow, cancel and inspect them";
  const Flag wait_flag{"wait", 0, "", "follow the run to a terminal phase (as `runs wait` does)"};
  const Flag exit_status{"exit-status", 0, "", "exit non-zero when the run ends FAILED (3) or CANCELLED (4)"};
  const Flag timeout{"timeout", 0, "DURATION", "stop watching after this long (90s, 15m0s, 2h); exits 5, the run carries on"};
  const Flag force{"force", 0, "", "do not ask for confirmation"};
  g.children.push_back(
      {"start", {}, "Start a run from a JSON or YAML plan", "",
       "The plan is checked by the service first; then you are asked to confirm, unless --force.\n"
       "A plan without submissionId gets a generated one; resubmitting a plan with the same\n"
       "submissionId reaches the same run instead of starting another.",
       {{"file", 'f', "PLAN", "the run plan (JSON or YAML); - reads stdin"},
        {"dry-run", 0, "", "check the plan with the service, start nothing"},
        {"show-resolved", 0, "", "with --dry-run: print the plan with every default filled in"},
        wait_flag, exit_status, timeout, force},
       {}, runs_start, 0, 0});
  g.children.push_back({"list", {}, "List runs, newest first", "", "",
                        {{"phase", 0, "PHASE", "open (every unfinished run) or a phase: QUEUED, TRAINING, COMPLETED, ..."},
                         {"workload", 0, "WORKLOAD", "only this workload's runs"},
                         {"limit", 0, "N", "at most N runs (service default 50, max 100)"},
                         {"offset", 0, "N", "skip the first N runs"}},
                        {}, runs_list, 0, 0});
  g.children.push_back({"get", {}, "Show a run: state, progress, results, cost", "RUN",
                        "RUN is a run id or any unambiguous prefix of one.",
                        {{"follow", 0, "", "keep the progress line live until the run ends (as `runs wait`)"},
                         exit_status},
                        {}, runs_get, 1, 1});
  g.children.push_back(
      {"wait", {"watch"}, "Follow a run live until it reaches COMPLETED, FAILED or CANCELLED", "RUN",
       "Exits 0 on any terminal phase unless --exit-status. Ctrl-C or --timeout stop the\n"
       "watching only; the run carries on. A dropped connection is retried 8 times over about\n"
       "two minutes. With -o json: one event per line, a terminal event, then the full record.",
       {exit_status, timeout}, {}, runs_wait, 1, 1});
  g.children.push_back({"cancel", {}, "Cancel a run and free its devices (asks first unless --force)", "RUN",
                        "Returns once the service accepted the request; `runs wait` shows CANCELLED.", {force}, {},
                        runs_cancel, 1, 1});
  g.children.push_back({"annotate", {}, "Set a run's description and/or config name", "RUN", "",
                        {{"description", 0, "TEXT", "free text (\"\" clears it)"},
                         {"config-name", 0, "NAME", "label of this configuration in score tables (\"\" clears it)"}},
                        {}, runs_annotate, 1, 1});
  g.children.push_back({"metrics", {}, "Show a run's per-step metrics", "RUN", "",
                        {{"limit", 0, "N", "only the last N steps"},
                         {"fields", 0, "A,B", "extra columns by metric name (e.g. batchTokens,stepSeconds)"}},
                        {}, runs_metrics, 1, 1});
  g.children.push_back({"hparams", {}, "Show a run's recorded hyperparameters, flattened, and their sha", "RUN", "",
                        {}, {}, runs_hparams, 1, 1});
  return g;
}

}  // namespace trainer::cli

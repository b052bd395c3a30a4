// `trainer runs wait` (and `runs start --wait`, `runs get --follow`): the live view of one run
// until it ends, over long polls of its events.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <thread>

#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/command_support.h"
#include "cli/format.h"
#include "cli/interrupt.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

// A dropped stream is retried this many times in a row, waiting these seconds before each
// (about two minutes in all), before `runs wait` gives up.
constexpr int kRetryDelaysSeconds[] = {1, 2, 4, 8, 15, 30, 30, 30};
constexpr int kLongPollSeconds = 15;
// Without a terminal, a progress line is printed at most this often (phase changes always).
constexpr double kPlainLineSeconds = 2.0;



ViewStyle view_style(const Context& ctx) {
  ViewStyle style;
  style.unicode = ctx.redraw;
  style.color = ctx.color;
  return style;
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
//
// A line drawn to fit the terminal wraps when the terminal is narrowed under it: it now takes
// several rows, and the cursor sits on the last. Before redrawing, the rows above are cleared
// too (see erase_drawn_line in run_view.h), so no stale piece of the old line is left.
class LiveView {
 public:
  explicit LiveView(const Context& ctx) : redraw_(ctx.redraw), style_(view_style(ctx)) {}

  void update(const json& run) {
    const std::string phase = run.value("phase", std::string());
    // A warning the job reported since the last update (no learning signal, one device of
    // several) goes above the live line, once.
    if (const json warnings = run.value("warnings", json::array()); warnings.is_array()) {
      for (size_t i = warnings_shown_; i < warnings.size(); ++i) {
        const json& w = warnings[i];
        const std::string f = w.is_object() ? w.value("field", std::string()) : "";
        const std::string message = w.is_object() ? w.value("message", std::string()) : "";
        note("warning: " + (f.empty() || message.rfind(f, 0) == 0 ? message : f + ": " + message));
      }
      warnings_shown_ = std::max(warnings_shown_, warnings.size());
    }
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
      if (new_phase && open_line_) {
        out("\n");
      } else if (open_line_) {
        out(erase_drawn_line(drawn_width_, terminal_columns()));
      }
      out("\r\033[K" + line);
      drawn_width_ = display_width(line);
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
  size_t drawn_width_ = 0;  // display cells of the line on screen
  std::string last_phase_;
  std::string last_line_;
  int64_t last_step_ = -1;
  size_t warnings_shown_ = 0;
  std::chrono::steady_clock::time_point last_print_{};
};

json terminal_event(const json& run) {
  json ev = {{"type", "terminal"}, {"runId", run.value("runId", std::string())},
             {"phase", run.value("phase", std::string())}};
  for (const char* k : {"outcome", "failureReason", "smoke", "adapterPath", "modelId"}) {
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

  auto first = ctx.get("/v1/runs/" + seg(ref));
  if (!first) return ctx.last_failure_code();
  json run = *first;
  const std::string run_id = run.value("runId", ref);
  explain_interrupt("run " + short_id(run_id), "trainer runs wait " + short_id(run_id),
                    "trainer runs cancel " + short_id(run_id));
  LiveView view(ctx);
  const bool text = ctx.text();
  const bool live = text && !ctx.quiet;        // the progress view (-q: none)
  const bool stream = ctx.stream_events();     // JSON lines of events before the record
  if (live) view.update(run);

  int64_t after = -1;
  int failures = 0;
  if (stream && is_terminal_phase(run.value("phase", std::string()))) {
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
        // The deadline asked for, not the time measured past it (a long poll ends a moment late).
        return ctx.fail("stopped waiting after " + format_duration(timeout_seconds) + " (--timeout); run " +
                            short_id(run_id) + " is still " + run.value("phase", std::string()) +
                            " and carries on: `trainer runs wait " + short_id(run_id) +
                            "` follows it again, `trainer runs cancel " + short_id(run_id) + "` stops it",
                        kExitTimeout);
      }
      // Long polls take whole seconds: never ask for more than is left. Under a second left,
      // sleep it off and look once more without waiting.
      poll = std::min(poll, std::floor(left));
      if (poll < 1) {
        std::this_thread::sleep_for(std::chrono::duration<double>(left));
        poll = 0;
      }
    }
    std::string path = "/v1/runs/" + seg(run_id) + "/events?waitSeconds=" + std::to_string(static_cast<int>(poll));
    if (after >= 0) path += "&after=" + std::to_string(after);
    Response r;
    CallError e;
    if (!ctx.client.get(path, &r, &e, static_cast<int>(poll) + 30)) {
      if (!e.transport && e.retry_after_seconds > 0) {
        // Over a request limit (429): follow again once the service says it takes the poll.
        if (live) view.note(describe_failure(e) + "; following again in " + std::to_string(e.retry_after_seconds) + "s");
        std::this_thread::sleep_for(std::chrono::seconds(e.retry_after_seconds));
        continue;
      }
      if (!e.transport) {
        if (text) view.finish();
        return ctx.fail(describe_failure(e) + next_step(ctx, e, path, nullptr), kExitError);
      }
      if (failures >= static_cast<int>(std::size(kRetryDelaysSeconds))) {
        if (text) view.finish();
        return ctx.fail(e.status.message() + "; gave up following run " + run_id + " after " +
                            std::to_string(failures) + " retries (the run itself carries on)",
                        kExitUnreachable);
      }
      const int delay = kRetryDelaysSeconds[failures++];
      if (live) {
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
      if (stream) out(ev.dump() + "\n");
    }
    if (stream) std::fflush(stdout);
    if (r.body.contains("run") && r.body["run"].is_object()) run = r.body["run"];
    if (live) view.update(run);
  }

  const std::string phase = run.value("phase", std::string());
  if (text) {
    view.finish();
    out(run_summary(run));
  } else {
    if (stream) out(terminal_event(run).dump() + "\n");
    ctx.print_json(run);  // through --json and --jq
  }
  std::fflush(stdout);
  return exit_code_for(ctx, phase);
}

}  // namespace trainer::cli

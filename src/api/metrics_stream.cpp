// run_metrics_stream() of metrics_stream.h.
#include "api/metrics_stream.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <utility>

#include "api/route_support.h"
#include "service/phases.h"

namespace trainer::api {
namespace {

using Clock = std::chrono::steady_clock;

// How soon a stream notices that its client has gone while its run does not change.
constexpr auto kAliveCheck = std::chrono::seconds(1);
// A comment this often keeps an idle stream open through proxies that close silent connections.
constexpr auto kKeepAlive = std::chrono::seconds(15);
// How long a browser waits before it connects again after a stream broke off (ms).
constexpr int kRetryMs = 5000;
// run_events() answers at most this many events at once (Store::run_events' page).
constexpr size_t kEventPage = 1000;
// The most steps run_metrics() answers.
constexpr int64_t kMaxSteps = 100000;

// `object[key]` when it is an integer, else 0.
int64_t integer_at(const json& object, const char* key) {
  if (!object.is_object()) return 0;
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// Whether the run's phase (by its name) is one it never leaves: the service's own table decides.
bool terminal(const std::string& phase) {
  const auto parsed = service::parse_phase(phase);
  return parsed && service::is_terminal(*parsed);
}

// What the dashboard shows of a run as it changes (the whole view carries its plan: too much to
// send after every step).
json run_summary(const json& run) {
  json out = json::object();
  for (const char* key : {"runId", "phase", "progress", "latest", "cost", "outcome", "failureReason",
                          "updatedAt", "endedAt", "attempt"}) {
    if (run.contains(key)) out[key] = run[key];
  }
  return out;
}

json problem(const Status& status) {
  return {{"code", status_code_name(status.code())}, {"message", status.describe()}};
}

// The steps a batch of run events touched: a step's or a validation's (both carry `step`).
struct TouchedSteps {
  int64_t lowest = std::numeric_limits<int64_t>::max();
  int64_t highest = 0;
  bool any() const { return lowest <= highest; }
};

// One stream's view of its run: the event cursor, and what is still to send. Lives on the
// stream's thread only.
class MetricsFollower {
 public:
  MetricsFollower(service::Service& svc, std::string run_id) : svc_(svc), run_id_(std::move(run_id)) {}

  // Sends what changed since the last look (every step, the first time). False when the stream
  // is over: the run ended (after the `end` event), a problem was sent, or the client has gone.
  bool look(http::StreamWriter& writer) {
    const bool first = !looked_;
    looked_ = true;
    TouchedSteps touched;
    json run;
    auto changed = read_events(touched, run);
    if (!changed.is_ok()) return write_problem(writer, changed.status());
    if (!*changed && !first) return true;
    if (first) {
      if (!send_points(writer, 0, kMaxSteps, true)) return false;
    } else if (touched.any()) {
      // Steps are numbered from 1, so the steps from `lowest` on are at most this many.
      const int64_t total = integer_at(run.value("progress", json::object()), "totalSteps");
      const int64_t span = std::max(touched.highest, total) - touched.lowest + 1;
      const int64_t limit = std::clamp<int64_t>(span, 1, kMaxSteps);
      if (!send_points(writer, touched.lowest, limit, false)) return false;
    }
    if (!writer.write(sse_event("run", run_summary(run)))) return false;
    const std::string phase = run.value("phase", std::string());
    if (!terminal(phase)) return true;
    writer.write(sse_event("end", {{"phase", phase},
                                   {"outcome", run.value("outcome", json(nullptr))},
                                   {"failureReason", run.value("failureReason", json(nullptr))}}));
    return false;
  }

 private:
  // Reads the run's events past the cursor, every page of them, noting the steps they touched, and
  // the run as it is now into `run`. Whether there were any.
  Result<bool> read_events(TouchedSteps& touched, json& run) {
    bool any = false;
    while (true) {
      auto page = svc_.run_events(run_id_, cursor_, std::chrono::milliseconds(0));
      if (!page.is_ok()) return page.status();
      const json& events = (*page)["events"];
      for (const json& e : events) {
        cursor_ = std::max(cursor_, integer_at(e, "seq"));
        if (const int64_t step = integer_at(e, "step"); step > 0) {
          touched.lowest = std::min(touched.lowest, step);
          touched.highest = std::max(touched.highest, step);
        }
      }
      any = any || !events.empty();
      run = std::move((*page)["run"]);
      if (events.size() < kEventPage) return any;
    }
  }

  // The stored steps from `lowest` on, out of the last `limit` (a validation loss, or a new
  // attempt after a restore, may change a step sent before); `reset`: they replace what was sent.
  bool send_points(http::StreamWriter& writer, int64_t lowest, int64_t limit, bool reset) {
    auto metrics = svc_.run_metrics(run_id_, limit);
    if (!metrics.is_ok()) return write_problem(writer, metrics.status());
    json steps = json::array();
    for (json& s : (*metrics)["steps"]) {
      if (integer_at(s, "step") >= lowest) steps.push_back(std::move(s));
    }
    if (steps.empty() && !reset) return true;
    return writer.write(sse_event("points", {{"reset", reset}, {"steps", std::move(steps)}}));
  }

  // A read failed: says so, and ends the stream (false).
  static bool write_problem(http::StreamWriter& writer, const Status& status) {
    writer.write(sse_event("problem", problem(status)));
    return false;
  }

  service::Service& svc_;
  const std::string run_id_;
  bool looked_ = false;
  int64_t cursor_ = 0;  // the last event seq read
};

// The stream's producer: looks after every change of any run (the service's change count; a look
// at a run that did not change sends nothing), and otherwise waits.
void follow(service::Service& svc, const std::string& run_id, http::StreamWriter& writer) {
  if (!writer.write("retry: " + std::to_string(kRetryMs) + "\n\n")) return;
  MetricsFollower follower(svc, run_id);
  bool looked = false;
  uint64_t looked_at = 0;
  auto keep_alive_due = Clock::now() + kKeepAlive;
  while (writer.alive()) {
    const uint64_t version = svc.run_change_version();  // before the look: a change during it wakes the wait
    if (!looked || version != looked_at) {
      if (!follower.look(writer)) return;
      looked = true;
      looked_at = version;
    }
    svc.wait_for_run_change(version, std::min(Clock::now() + kAliveCheck, keep_alive_due));
    if (Clock::now() >= keep_alive_due) {
      if (!writer.write(": keep-alive\n\n")) return;
      keep_alive_due = Clock::now() + kKeepAlive;
    }
  }
}

}  // namespace

std::string sse_event(std::string_view name, const json& data) {
  // json::dump() escapes every newline inside strings, so the data is one line.
  const std::string line = data.dump(-1, ' ', false, json::error_handler_t::replace);
  return "event: " + std::string(name) + "\ndata: " + line + "\n\n";
}

http::Outcome run_metrics_stream(service::Service& svc, const http::Request& req) {
  auto run = svc.get_run(req.params[0]);
  if (!run.is_ok()) return error_response(run.status());
  http::Stream stream;
  stream.head.content_type = "text/event-stream";
  stream.head.headers = {{"Cache-Control", "no-cache"}};
  stream.produce = [&svc, run_id = (*run)["runId"].get<std::string>()](http::StreamWriter& writer) {
    follow(svc, run_id, writer);
  };
  return stream;
}

}  // namespace trainer::api

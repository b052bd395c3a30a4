// `trainer status`: the services the CLI talks to, where each address came from, the addresses
// tried, and whether each answers (version, readiness, latency). Always exits 0: a service that
// is down is reported, not treated as a failure (`trainer info` is the readiness probe).
#include <chrono>
#include <cmath>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

// How long status waits for an answer unless --timeout says otherwise.
constexpr int kStatusTimeoutSeconds = 5;

// One service's entry: {name, url, urlFrom, addresses, answers, version?, ready?, latencyMs?, error?}.
json probe_trainer(Context& ctx) {
  json entry = {{"name", "trainer"}, {"url", ctx.client.base_url()}, {"urlFrom", ctx.address.source}};
  std::string resolve_error;
  entry["addresses"] = resolve_addresses(ctx.client.base_url(), &resolve_error);
  Response r;
  CallError e;
  const auto started = std::chrono::steady_clock::now();
  const bool ok = ctx.client.get("/v1/info", &r, &e, ctx.client.call_timeout() ? -1 : kStatusTimeoutSeconds);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  const bool answered = ok || !e.transport;  // an HTTP answer, even an error one
  entry["answers"] = answered;
  if (answered) {
    entry["latencyMs"] = std::round(ms * 10) / 10;
    const json& info = r.body;
    const bool is_trainerd = info.is_object() && info.contains("build") && info["build"].is_object();
    if (is_trainerd) entry["version"] = info["build"].value("version", std::string());
    const json startup = info.is_object() ? info.value("startup", json::object()) : json::object();
    entry["ready"] = ok && is_trainerd && startup.value("ready", true);
    if (!ok) entry["error"] = e.status.message();
  } else {
    entry["error"] = resolve_error.empty() ? e.status.message() : resolve_error;
  }
  return entry;
}

std::string answer_line(const json& s) {
  if (!s.value("answers", false)) return "no: " + s.value("error", std::string("no answer"));
  std::string line = "yes";
  if (s.contains("version")) line += ", trainerd " + s["version"].get<std::string>();
  line += s.value("ready", false) ? ", ready" : ", not ready";
  line += ", in " + format_number(s.value("latencyMs", 0.0)) + " ms";
  if (s.contains("error")) line += " (" + s["error"].get<std::string>() + ")";
  return line;
}

int run_status(Context& ctx) {
  const json doc = {{"services", json::array({probe_trainer(ctx)})}};
  if (!ctx.text()) {
    ctx.print_json(doc);
    return kExitOk;
  }
  for (const auto& s : doc["services"]) {
    std::string tried;
    for (const auto& a : s["addresses"]) tried += (tried.empty() ? "" : ", ") + a.get<std::string>();
    const bool up = s.value("answers", false);
    out(ctx.paint(s.value("name", std::string()), "1") + "\n");
    FieldRows rows = {{"URL", s.value("url", std::string()) + " (from " + s.value("urlFrom", std::string()) + ")"},
                      {"Tried", tried.empty() ? "(no address: the host does not resolve)" : tried},
                      {"Answers", up ? ctx.paint(answer_line(s), "32") : ctx.paint(answer_line(s), "31")}};
    for (const auto& [k, v] : rows) out("  " + k + ":" + std::string(9 - k.size(), ' ') + v + "\n");
  }
  return kExitOk;  // always: a service being down is reported, not a failure
}

}  // namespace

Command status_command() {
  Command c;
  c.name = "status";
  c.summary = "Show the services the CLI talks to and whether they answer (always exits 0)";
  c.description =
      "Names each service's URL and where it came from (--trainer-url, TRAINER_URL or the default),\n"
      "the addresses tried, and whether the service answers: its version, readiness and latency,\n"
      "or why nothing answered. Exits 0 even when a service is down; `trainer info` is the\n"
      "readiness probe that exits non-zero.";
  c.run = run_status;
  c.examples = {{"which service am I talking to, and is it up?", "trainer status"},
                {"the same for a scripted check", "trainer status --jq '.services[0].answers'"},
                {"another address, bounded to 2s", "trainer status --trainer-url http://localhost:9002 --timeout 2s"}};
  return c;
}

}  // namespace trainer::cli

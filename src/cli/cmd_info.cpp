// `trainer info` (the readiness probe) and `trainer capacity` (pools, claims and quotas).
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/list_command.h"
#include "cli/format.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

int run_info(Context& ctx) {
  Response r;
  CallError e;
  const bool ok = ctx.client.get("/v1/info", &r, &e);
  if (!ok && (e.transport || !r.body.is_object() || !r.body.contains("startup"))) {
    return ctx.fail(describe_failure(e), e.transport ? kExitUnreachable : kExitError);
  }
  const json& info = r.body;
  const json& startup = info.contains("startup") ? info["startup"] : json::object();
  const bool ready = ok && startup.value("ready", ok);
  if (!ctx.text()) {
    ctx.print_json(info);
  } else {
    std::vector<std::pair<std::string, std::string>> rows;
    std::string version = info.contains("build") ? str(info["build"], "version") : "";
    rows.push_back({"Service", ctx.client.base_url() + (version.empty() ? "" : " (trainerd " + version + ")")});
    rows.push_back({"Backend", str(info, "backend")});
    if (!str(info, "replica").empty()) rows.push_back({"Replica", str(info, "replica") + " (answered)"});
    rows.push_back({"Ready", ready ? ctx.paint("yes", "32") : ctx.paint("no", "31")});
    out(render_fields(rows));
    if (info.contains("replicas") && info["replicas"].is_array() && !info["replicas"].empty()) {
      out("Live replicas:\n");
      std::vector<std::vector<std::string>> replicas;
      const double now = now_seconds();
      for (const auto& r : info["replicas"]) {
        replicas.push_back({str(r, "name"), str(r, "instance"), str(r, "url"), age_text(str(r, "startedAt"), now),
                            age_text(str(r, "heartbeatAt"), now)});
      }
      out(render_table({"NAME", "INSTANCE", "URL", "STARTED", "HEARTBEAT"}, replicas));
    }
    if (startup.contains("steps") && startup["steps"].is_array()) {
      out("Startup:\n");
      for (const auto& step : startup["steps"]) {
        const bool step_ok = step.value("ok", false);
        std::string line = std::string("  ") + (step_ok ? ctx.paint("ok    ", "32") : ctx.paint("FAILED", "31")) +
                           "  " + str(step, "name");
        std::string message = str(step, "message");
        if (!message.empty()) line += ": " + message;
        out(line + "\n");
      }
    }
    if (info.contains("configuration") && info["configuration"].is_object() &&
        !info["configuration"].empty()) {
      out("Configuration:\n" + to_yaml_text(info["configuration"], 2));
    }
  }
  if (!ready) {
    std::string failed;
    if (startup.contains("steps") && startup["steps"].is_array()) {
      for (const auto& step : startup["steps"]) {
        if (!step.value("ok", false)) {
          failed = str(step, "name") + (str(step, "message").empty() ? "" : ": " + str(step, "message"));
          break;
        }
      }
    }
    return ctx.fail("the trainer service at " + ctx.client.base_url() + " is not ready" +
                        (failed.empty() ? " yet" : " (startup step " + failed + ")"),
                    kExitError);
  }
  return kExitOk;
}

// "0,1" for a claim's granted device indices; "-" while it has none.
std::string device_ids_text(const json& claim) {
  std::string out;
  if (claim.contains("deviceIds") && claim["deviceIds"].is_array()) {
    for (const auto& id : claim["deviceIds"]) {
      if (id.is_number_integer()) out += (out.empty() ? "" : ",") + std::to_string(id.get<long long>());
    }
  }
  return out.empty() ? "-" : out;
}

int run_capacity(Context& ctx) {
  return show(ctx, "/v1/capacity", [&](const json& doc) {
    const json pools = doc.value("pools", json::array());
    const json claims = doc.value("claims", json::array());
    const json quotas = doc.value("quotas", json::array());
    const double now = now_seconds();
    out(ctx.paint("Pools", "1") + "\n");
    if (pools.empty()) out("  (none declared)\n");
    else {
      std::vector<std::vector<std::string>> rows;
      for (const auto& p : pools) {
        std::string free = str(p, "free");
        if (free.empty() && p.contains("declared") && p["declared"].is_number() && p.contains("granted") && p["granted"].is_number()) {
          free = std::to_string(p["declared"].get<long long>() - p["granted"].get<long long>());
        }
        rows.push_back({str(p, "name"), str(p, "accelerator"), str(p, "declared"), str(p, "observed"),
                        str(p, "granted"), free, str(p, "queued"), str(p, "maxClaim"),
                        p.value("serving", false) ? "yes" : "no"});
      }
      out(render_table({"POOL", "ACCELERATOR", "DECLARED", "OBSERVED", "GRANTED", "FREE", "QUEUED", "MAX CLAIM", "SERVING"},
                       rows));
    }
    out("\n" + ctx.paint("Claims", "1") + "\n");
    if (claims.empty()) out("  (none)\n");
    else {
      std::vector<std::vector<std::string>> rows;
      for (const auto& c : claims) {
        rows.push_back({str(c, "kind"), short_id(str(c, "owner")), str(c, "workload"), str(c, "devices"),
                        device_ids_text(c), str(c, "pool"), str(c, "state"), age_text(str(c, "since"), now)});
      }
      out(render_table({"KIND", "OWNER", "WORKLOAD", "DEVICES", "DEVICE IDS", "POOL", "STATE", "SINCE"}, rows));
    }
    out("\n" + ctx.paint("Quotas", "1") + "\n");
    if (quotas.empty()) out("  (none set)\n");
    else {
      std::vector<std::vector<std::string>> rows;
      for (const auto& q : quotas) {
        rows.push_back({str(q, "workload"), str(q, "quota"), str(q, "held"), str(q, "queued")});
      }
      out(render_table({"WORKLOAD", "QUOTA", "HELD", "QUEUED"}, rows));
    }
  });
}

}  // namespace

Command info_command() {
  Command c;
  c.name = "info";
  c.summary = "Show the service's configuration, build and startup; non-zero exit unless ready";
  c.description =
      "Use it as a readiness probe: it exits 0 only when the service answers and its startup\n"
      "completed; otherwise it names the step that failed.";
  c.run = run_info;
  c.examples = {{"is the service up, and how is it configured?", "trainer info"},
                {"a readiness probe against another address", "trainer info --trainer-url http://trainer.internal:9001"},
                {"the answer as JSON", "trainer info -o json"}};
  return c;
}

Command capacity_command() {
  Command c;
  c.name = "capacity";
  c.summary = "Show GPU pools, claims and quotas";
  c.description = "Pools: FREE + GRANTED = DECLARED. A claim holds devices (GRANTED) or waits for them (QUEUED).";
  c.run = run_capacity;
  c.examples = {{"pools, claims and quotas", "trainer capacity"}, {"as JSON", "trainer capacity -o json"}};
  return c;
}

}  // namespace trainer::cli

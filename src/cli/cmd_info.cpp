// `trainer info` (the readiness probe) and `trainer capacity` (pools, windows, claims, quotas and
// warnings; device-hours).
#include <cstdio>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/list_command.h"
#include "cli/format.h"
#include "cli/run_view.h"
#include "common/utc_time.h"

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

// "3" for a number field; "-" when absent or null.
std::string count_text(const json& doc, const char* key) {
  std::string v = str(doc, key);
  return v.empty() ? "-" : v;
}

int run_capacity(Context& ctx) {
  std::string path = "/v1/capacity";
  const std::string workload = ctx.inv.get_or("workload", "");
  if (ctx.inv.has("workload")) {
    if (workload.empty()) return ctx.fail("--workload needs a workload's name", kExitUsage);
    path += "?workload=" + Client::escape(workload);
  }
  return show(ctx, path, [&](const json& doc) {
    const json pools = doc.value("pools", json::array());
    const json claims = doc.value("claims", json::array());
    const json quotas = doc.value("quotas", json::array());
    const json warnings = doc.value("warnings", json::array());
    const double now = now_seconds();
    out(ctx.paint("Pools", "1") + " (FREE + GRANTED + OUTSIDE = DECLARED)\n");
    if (pools.empty()) out("  (none declared)\n");
    else {
      std::vector<std::vector<std::string>> rows;
      for (const auto& p : pools) {
        std::string free = str(p, "free");
        if (free.empty() && p.contains("declared") && p["declared"].is_number() && p.contains("granted") && p["granted"].is_number()) {
          free = std::to_string(p["declared"].get<long long>() - p["granted"].get<long long>());
        }
        rows.push_back({str(p, "name"), str(p, "accelerator"), free, str(p, "granted"), count_text(p, "outside"),
                        str(p, "declared"), str(p, "queued"), count_text(p, "observed"), str(p, "maxClaim"),
                        p.contains("hostRamGiB") && p["hostRamGiB"].is_number() ? str(p, "hostRamGiB") + " GiB" : "-",
                        p.value("serving", false) ? "yes" : "no"});
      }
      out(render_table({"POOL", "ACCELERATOR", "FREE", "GRANTED", "OUTSIDE", "DECLARED", "QUEUED", "OBSERVED",
                        "MAX CLAIM", "HOST RAM", "SERVING"},
                       rows));
    }
    std::vector<std::vector<std::string>> window_rows;
    for (const auto& p : pools) {
      if (!p.contains("windows") || !p["windows"].is_array()) continue;
      for (const auto& w : p["windows"]) {
        const std::string state = w.value("open", false) ? "open" : w.value("ended", false) ? "ended" : "to come";
        window_rows.push_back({str(p, "name"), "+" + str(w, "devices"), str(w, "opens"), str(w, "closes"), state});
      }
    }
    if (!window_rows.empty()) {
      out("\n" + ctx.paint("Windows", "1") + " (UTC; DECLARED includes a window while it is open)\n");
      out(render_table({"POOL", "DEVICES", "OPENS", "CLOSES", "STATE"}, window_rows));
    }
    if (doc.contains("cluster") && doc["cluster"].is_object()) {
      const json& c = doc["cluster"];
      out("\n" + ctx.paint("Cluster", "1") + " (" + str(c, "backend") + ": " + str(c, "source") + ")\n");
      std::string devices;
      if (c.contains("devices") && c["devices"].is_object()) {
        for (const auto& [profile, count] : c["devices"].items()) {
          devices += (devices.empty() ? "" : ", ") + count.dump() + " " + profile;
        }
      }
      out(render_table({"NODES", "DEVICES", "HELD", "OUTSIDE", "READ"},
                       {{count_text(c, "nodes"), devices.empty() ? "-" : devices, count_text(c, "held"),
                         count_text(c, "outside"),
                         str(c, "readAt").empty() ? "not yet" : age_text(str(c, "readAt"), now)}}));
    }
    if (!warnings.empty()) {
      out("\n" + ctx.paint("Warnings", "1;33") + "\n");
      for (const auto& w : warnings) out("  " + str(w, "message") + "\n");
    }
    out("\n" + ctx.paint("Claims", "1") + "\n");
    if (claims.empty()) out("  (none)\n");
    else {
      std::vector<std::vector<std::string>> rows;
      for (const auto& c : claims) {
        rows.push_back({str(c, "kind"), short_id(str(c, "owner")), str(c, "workload"), str(c, "devices"),
                        str(c, "pool"), str(c, "state"), age_text(str(c, "since"), now), device_ids_text(c)});
      }
      out(render_table({"KIND", "FOR", "WORKLOAD", "DEVICES", "POOL", "STATE", "SINCE", "DEVICE IDS"}, rows));
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

// "12.5" hours to the second's precision: hours with four decimals (0.0003 h is one second).
std::string hours_text(double device_seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", device_seconds / 3600.0);
  return buf;
}

constexpr double kSecondsPerDay = 86400;
constexpr double kMaxDeviceHoursDays = 366;  // the service refuses a longer range too

int run_device_hours(Context& ctx) {
  std::string query;
  for (const char* flag : {"from", "to"}) {
    auto v = ctx.inv.get(flag);
    if (!v) continue;
    if (!parse_utc_time(*v)) {
      return ctx.fail(std::string("--") + flag + " \"" + *v +
                          "\" is not an ISO 8601 UTC time; write it like 2026-01-31T18:00:00Z (or with an offset, +02:00)",
                      kExitUsage);
    }
    query += std::string(query.empty() ? "?" : "&") + flag + "=" + Client::escape(*v);
  }
  if (auto from = ctx.inv.get("from"), to = ctx.inv.get("to"); from && to) {
    const double seconds = *parse_utc_time(*to) - *parse_utc_time(*from);
    if (seconds <= 0) return ctx.fail("--from " + *from + " is not before --to " + *to, kExitUsage);
    if (seconds > kMaxDeviceHoursDays * kSecondsPerDay) {
      return ctx.fail("--from " + *from + " to --to " + *to + " is " +
                          std::to_string(static_cast<long long>(seconds / kSecondsPerDay)) +
                          " days long; device-hours reads at most 366 days",
                      kExitUsage);
    }
  }
  if (auto by = ctx.inv.get("by")) {
    if (*by != "pool" && *by != "endpoint" && *by != "workload") {
      return ctx.fail("--by \"" + *by + "\" is not a grouping; use pool, endpoint or workload", kExitUsage);
    }
    query += std::string(query.empty() ? "?" : "&") + "by=" + Client::escape(*by);
  }
  return show(ctx, "/v1/capacity/device-hours" + query, [&](const json& doc) {
    const json rows = doc.value("rows", json::array());
    out("From " + str(doc, "from") + " to " + str(doc, "to") + ", by " + str(doc, "by") + "\n");
    if (rows.empty()) {
      out("  (no claim held devices in this period)\n");
      return;
    }
    std::vector<std::vector<std::string>> table;
    for (const auto& r : rows) {
      table.push_back({str(r, "key"), str(r, "pool"), hours_text(r.value("deviceSeconds", 0.0)),
                       r.value("held", false) ? "yes" : "no"});
    }
    out(render_table({"KEY", "POOL", "DEVICE HOURS", "HELD"}, table));
  });
}

// "12.3 GiB" for a byte count.
std::string gib_text(const json& bytes) {
  if (!bytes.is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes.get<double>() / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

int run_scan(Context& ctx) {
  auto doc = ctx.post("/v1/capacity/scan", json::object());
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  for (const auto& node : doc->value("nodes", json::array())) {
    if (node.contains("error")) {
      out(ctx.paint("Node " + str(node, "node"), "1") + ": no answer: " + str(node, "error") + "\n");
      continue;
    }
    out(ctx.paint("Node " + str(node, "node"), "1") + " (trainer-job " + str(node, "version") + ")\n");
    const json devices = node.value("devices", json::object());
    std::string gpus;
    for (const auto& g : devices.value("gpus", json::array())) gpus += (gpus.empty() ? "" : ", ") + str(g, "name");
    out("  Devices:  " + (gpus.empty() ? std::string("no GPU") : gpus) +
        (devices.contains("error") ? " (" + str(devices, "error") + ")" : "") + "\n");
    std::vector<std::vector<std::string>> rows;
    for (const auto& d : node.value("disks", json::array())) {
      rows.push_back({str(d, "role"), str(d, "path"),
                      d.contains("error") ? "unreadable: " + str(d, "error") : gib_text(d.value("freeBytes", json()))});
    }
    out(render_table({"FOLDER", "PATH", "FREE"}, rows));
    std::vector<std::vector<std::string>> left;
    for (const auto& f : node.value("jobFolders", json::array())) {
      if (f.value("leftover", false)) left.push_back({str(f, "runId"), str(f, "attempt"), str(f, "path")});
    }
    if (left.empty()) out("  Leftover job folders: none\n");
    else {
      out("  Leftover job folders (no open run's current attempt):\n");
      out(render_table({"RUN", "ATTEMPT", "PATH"}, left));
    }
  }
  return kExitOk;
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
  Command hours;
  hours.name = "device-hours";
  hours.summary = "Device-hours the claims held in a period, by pool, endpoint or workload";
  hours.description =
      "From the claims' history: each claim counts its devices from its grant to its release,\n"
      "clipped to the period; a claim still held counts up to now (HELD yes). The period is\n"
      "--from to --to (default: the last 24 hours up to now), at most 366 days.";
  hours.flags = {{"from", 0, "ISO", "start of the period, e.g. 2026-01-31T00:00:00Z (default: --to minus 24 hours)", ""},
                 {"to", 0, "ISO", "end of the period (default: now)", ""},
                 {"by", 0, "KEY", "group the rows by pool (default), endpoint or workload", ""}};
  hours.run = run_device_hours;
  hours.examples = {{"the last 24 hours, by pool", "trainer capacity device-hours"},
                    {"one day, by workload", "trainer capacity device-hours --from 2026-01-31T00:00:00Z --to 2026-02-01T00:00:00Z --by workload"},
                    {"the keys still holding devices", "trainer capacity device-hours --jq '.rows[]|select(.held)|.key'"}};

  Command scan;
  scan.name = "scan";
  scan.summary = "A short read-only look at the backend's nodes: devices, free disk, leftover job folders";
  scan.description =
      "Runs `trainer-job scan` on every live node of the backend (local: trainerd's host; Slurm:\n"
      "one srun per node sinfo lists up; Ray: one job pinned to each alive node): the GPUs NVML\n"
      "sees, the free space of the data, temporary and shared-memory folders, job folders no open\n"
      "run's current attempt owns, and the installed trainer-job's version. A node whose scan job\n"
      "failed or timed out, and a device or disk that cannot be read, are named in the answer;\n"
      "they do not change the exit status.";
  scan.run = run_scan;
  scan.examples = {{"look at the nodes", "trainer capacity scan"},
                   {"the free bytes of each folder", "trainer capacity scan --jq '.nodes[].disks[]|[.role,.freeBytes]'"},
                   {"the nodes that gave no answer", "trainer capacity scan --jq '.nodes[]|select(.error)|[.node,.error]'"}};

  Command c;
  c.name = "capacity";
  c.summary = "Show GPU pools, capacity windows, claims, quotas and warnings";
  c.description =
      "Pools: FREE + GRANTED + OUTSIDE = DECLARED, and QUEUED. DECLARED includes a capacity window's\n"
      "devices only while it is open; OUTSIDE is what claims holding devices outside DECLARED (an\n"
      "ended window's) take of it, since admission counts every granted device against DECLARED.\n"
      "A claim holds devices (GRANTED) or waits for them (QUEUED). WARNINGS lists claims still\n"
      "holding devices of a window that has ended, and runs whose host memory figure is over their\n"
      "pool's HOST RAM (neither is stopped). With a Slurm or Ray backend, Cluster shows what it last\n"
      "read: NODES, DEVICES, HELD (by this service's claims), OUTSIDE (of DEVICES, what the cluster\n"
      "gives to other work), READ (a report reads it again when that is over 5 s old). --workload keeps only\n"
      "that workload's claims, quota and warnings; the pools' totals stay whole.";
  c.flags = {{"workload", 0, "NAME", "show only this workload's claims, quota and warnings", ""}};
  c.run = run_capacity;
  c.children = {hours, scan};
  c.examples = {{"pools, claims and quotas", "trainer capacity"},
                {"one workload's claims and quota", "trainer capacity --workload sentiment"},
                {"as JSON", "trainer capacity -o json"}};
  return c;
}

}  // namespace trainer::cli

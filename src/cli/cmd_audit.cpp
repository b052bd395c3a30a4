// `trainer audit` (admin): the audit log of every write request (docs/security.md, "Audit log"),
// as a table or, with -o json, as the JSON lines the service answers.
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "common/utc_time.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

// "alice (3f2a9c71)" for a token, "job 7c1e..." for a job's own call, else "anonymous".
std::string who(const json& e) {
  const std::string id = str(e, "tokenId"), name = str(e, "tokenName");
  if (!id.empty()) return name.empty() || name == id ? id : name + " (" + id + ")";
  if (!str(e, "jobId").empty()) return "job " + str(e, "jobId");
  return "anonymous";
}

// "12 (triage)": the object the request touched and its workload, when known.
std::string target(const json& e) {
  std::string out = str(e, "target");
  const std::string workload = !str(e, "workloadName").empty() ? str(e, "workloadName") : str(e, "workload");
  if (!workload.empty() && workload != out) out += (out.empty() ? "workload " : " in ") + workload;
  return out.empty() ? "-" : out;
}

std::string status_text(const json& e) {
  std::string out =
      e.contains("status") && e["status"].is_number_integer() ? std::to_string(e["status"].get<int>()) : "?";
  if (!str(e, "error").empty()) out += " " + str(e, "error");
  return out;
}

int audit(Context& ctx) {
  std::string path = "/v1/audit";
  if (auto since = ctx.inv.get("since")) {
    std::string when = *since;
    if (auto d = parse_duration(*since)) {
      when = utc_time_text(now_seconds() - *d);
    } else if (!parse_utc_time(*since)) {
      return ctx.fail("--since: '" + *since +
                          "' is neither a duration (30m, 2h, 7d) nor an RFC 3339 time "
                          "(2026-12-05T14:00:00Z)",
                      kExitUsage);
    }
    append_query(&path, "since", when);
  }
  if (auto token = ctx.inv.get("token")) append_query(&path, "token", *token);
  if (auto workload = ctx.inv.get("workload")) append_query(&path, "workload", *workload);
  if (auto limit = ctx.inv.get("limit")) append_query(&path, "limit", *limit);
  auto lines = ctx.get_bytes(path);
  if (!lines) return ctx.last_failure_code();
  std::vector<json> entries;
  size_t at = 0;
  while (at < lines->size()) {
    size_t end = lines->find('\n', at);
    if (end == std::string::npos) end = lines->size();
    if (end > at) {
      json e = json::parse(lines->substr(at, end - at), nullptr, /*allow_exceptions=*/false);
      if (e.is_discarded())
        return ctx.fail("the service answered " + path + " with a line that is not JSON", kExitError);
      entries.push_back(std::move(e));
    }
    at = end + 1;
  }
  if (!ctx.text()) {
    // JSON lines, one entry each, as the service answered them; --jq and --json take each entry.
    const bool filtered = ctx.inv.has("jq") || ctx.inv.has("json");
    for (const json& e : entries) {
      if (filtered) {
        ctx.print_json(e);
      } else {
        out(e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
      }
    }
    return kExitOk;
  }
  if (entries.empty()) {
    out("No audit entries.\n");
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const json& e : entries) {
    rows.push_back({str(e, "at"), who(e), str(e, "from").empty() ? "-" : str(e, "from"),
                    str(e, "method") + " " + str(e, "route"), target(e), status_text(e)});
  }
  out(render_table({"TIME", "WHO", "FROM", "ACTION", "TARGET", "STATUS"}, rows));
  return kExitOk;
}

}  // namespace

Command audit_command() {
  Command c{
      "audit",
      {},
      "The audit log: who changed what, when, from where (admin)",
      "",
      "Every request that writes (anything but a GET) is recorded with the token that sent it\n"
      "(its id and name, never its secret), the client's address, the route and the object it\n"
      "touched, and the answer's status; refused ones too. Bodies are not recorded. Oldest first;\n"
      "the newest --limit (default 100) entries. -o json prints the entries as JSON lines.",
      {{"since", 0, "DURATION|TIME", "entries from this long ago (30m, 2h, 7d) or this RFC 3339 time on", ""},
       {"token", 0, "TOKEN", "only the requests of this token (its name or id)", ""},
       {"workload", 0, "WORKLOAD", "only the requests that touched this workload", ""},
       {"limit", 0, "N", "the newest N entries (1 to 10000; default 100)", ""}},
      {},
      audit,
      0,
      0,
      {}};
  c.examples = {{"what changed in the last hour", "trainer audit --since 1h"},
                {"what one token did", "trainer audit --token ci --limit 20"},
                {"as JSON lines", "trainer audit -o json"}};
  return c;
}

}  // namespace trainer::cli

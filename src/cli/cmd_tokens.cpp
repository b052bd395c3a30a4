// `trainer tokens create|list|revoke` (admin), `trainer login` and `trainer logout`: API tokens
// (docs/security.md).
// A token's secret is printed once, by `tokens create`; `login` keeps one in the token file for
// the service's address, where every later command finds it (TRAINER_TOKEN overrides the file).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/list_command.h"
#include "common/token_file.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

// "admin, control" of a token's roles; "all" or the names of its workloads.
std::string joined(const json& items, const char* key) {
  std::string out;
  for (const json& item : items) {
    const std::string text = key ? str(item, key) : (item.is_string() ? item.get<std::string>() : item.dump());
    out += (out.empty() ? "" : ",") + text;
  }
  return out;
}

std::string scope_text(const json& token) {
  return token.value("allWorkloads", false) ? "all" : joined(token.value("workloads", json::array()), "name");
}

int tokens_create(Context& ctx) {
  json body = {{"name", ctx.inv.positionals[0]}};
  auto roles = ctx.inv.repeated.find("role");
  if (roles == ctx.inv.repeated.end() || roles->second.empty()) {
    return ctx.fail("tokens create needs --role ROLE (read, submit, admin or control; repeat it for several)",
                    kExitUsage);
  }
  body["roles"] = roles->second;
  if (auto w = ctx.inv.repeated.find("workload"); w != ctx.inv.repeated.end() && !w->second.empty()) {
    body["workloads"] = w->second;
  }
  if (auto expires = ctx.inv.get("expires-at")) body["expiresAt"] = *expires;
  auto doc = ctx.post("/v1/tokens", body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  out("Created token " + str(*doc, "tokenId") + " (" + str(*doc, "name") + "): roles " +
      joined(doc->value("roles", json::array()), nullptr) + ", workloads " + scope_text(*doc) +
      (doc->contains("expiresAt") ? ", expires " + str(*doc, "expiresAt") : "") + ".\n");
  out("Its secret, shown only this once:\n\n  " + str(*doc, "token") + "\n\n");
  out("Use it with `trainer login --token-stdin` on the user's machine, or TRAINER_TOKEN.\n");
  return kExitOk;
}

int tokens_list(Context& ctx) {
  ListView view;
  view.path = "/v1/tokens";
  view.items = "tokens";
  view.header = {"ID", "NAME", "ROLES", "WORKLOADS", "CREATED", "EXPIRES", "STATE"};
  view.row = [](const json& t, double) -> std::vector<std::string> {
    return {str(t, "tokenId"), str(t, "name"), joined(t.value("roles", json::array()), nullptr), scope_text(t),
            str(t, "createdAt"), t.contains("expiresAt") ? str(t, "expiresAt") : "never",
            t.contains("revokedAt") ? "revoked " + str(t, "revokedAt") : "live"};
  };
  view.empty = [](const json&) -> std::string { return "No tokens.\n"; };
  return run_list(ctx, view);
}

int tokens_revoke(Context& ctx) {
  auto doc = ctx.post("/v1/tokens/" + seg(ctx.inv.positionals[0]) + "/revoke", json::object());
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  out("Revoked token " + str(*doc, "tokenId") + " (" + str(*doc, "name") + ") at " + str(*doc, "revokedAt") +
      "; requests with it now get 401.\n");
  return kExitOk;
}

// Reads the token (from --token-stdin's first line), checks it against the service and keeps it
// in the token file for the service's address.
int login(Context& ctx) {
  if (!ctx.inv.has("token-stdin")) {
    return ctx.fail("login needs --token-stdin (the token on standard input, so that it stays out of the shell's "
                    "history and the process list)",
                    kExitUsage);
  }
  std::string token;
  std::getline(std::cin, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) return ctx.fail("login: no token on standard input", kExitUsage);
  ctx.client.set_token(token);
  // A read any live token is answered (200, or 403 for a token limited to some workloads); 401
  // means the service does not know it, and nothing is kept.
  Response r;
  CallError e;
  if (!ctx.client.get("/v1/workloads", &r, &e)) {
    if (e.transport) return ctx.fail(describe_failure(e), kExitUnreachable);
    if (e.status.code() == StatusCode::kUnauthenticated) return ctx.fail("login: " + describe_failure(e), kExitError);
  }
  Status st = write_token_file(ctx.client.base_url(), token);
  if (!st.is_ok()) return ctx.fail("login: " + st.message(), kExitError);
  // The CA the service was verified with, when this command was given one, is kept beside the
  // token (by its absolute path): later commands to the address use it when they name none.
  std::string kept_ca;
  const std::string& source = ctx.client.ca_file_source();
  if (!ctx.client.ca_file().empty() && (source == "--ca-file" || source == "TRAINER_CA_FILE")) {
    std::error_code ec;
    kept_ca = std::filesystem::absolute(ctx.client.ca_file(), ec).lexically_normal().string();
    if (ec) return ctx.fail("login: " + source + " " + ctx.client.ca_file() + ": " + ec.message(), kExitError);
    st = write_ca_file_entry(ctx.client.base_url(), kept_ca);
    if (!st.is_ok()) return ctx.fail("login: " + st.message(), kExitError);
  }
  out("Logged in to " + ctx.client.base_url() + "; the token" + (kept_ca.empty() ? "" : " and the CA file " + kept_ca) +
      (kept_ca.empty() ? " is" : " are") + " kept in " + token_file_path() + ".\n");
  return kExitOk;
}

// Forgets the service address's token and CA file in the token file; the service is not asked.
int logout(Context& ctx) {
  const bool had = read_token_file(ctx.client.base_url()).has_value() || read_ca_file_entry(ctx.client.base_url());
  Status st = forget_server(ctx.client.base_url());
  if (!st.is_ok()) return ctx.fail("logout: " + st.message(), kExitError);
  out(had ? "Logged out of " + ctx.client.base_url() + ": its token and CA file are no longer kept in " +
                token_file_path() + ".\n"
          : "Nothing was kept for " + ctx.client.base_url() + " in " + token_file_path() + ".\n");
  return kExitOk;
}

}  // namespace

Command tokens_command() {
  Command g;
  g.name = "tokens";
  g.aliases = {"token"};
  g.summary = "API tokens: who may call the service, with which roles, on which workloads (admin)";
  g.examples = {{"a token that may submit in workload triage", "trainer tokens create alice --role submit --workload triage"},
                {"every token", "trainer tokens list"},
                {"revoke one", "trainer tokens revoke 3f2a9c71"}};
  Command create{"create", {}, "Make a token; its secret is printed this once", "NAME",
                 "NAME says whose token it is. Roles: read (reads), submit (runs, evaluations, endpoints:\n"
                 "start, pause, resume, cancel, branch), admin (workloads, quotas, refs, bundles, base models,\n"
                 "tokens), control (operator commands: capacity scan, pins and releases). read < submit < admin;\n"
                 "control includes read. Without --workload the token may touch every workload.",
                 {{"role", 0, "ROLE", "read, submit, admin or control (repeatable; required)", ""},
                  {"workload", 0, "WORKLOAD", "a workload the token may touch (repeatable; default all)", ""},
                  {"expires-at", 0, "TIME", "when the token stops working (RFC 3339, e.g. 2027-01-31T00:00:00Z)", ""}},
                 {}, tokens_create, 1, 1, {}};
  create.examples = {{"a read-only token for a dashboard", "trainer tokens create grafana --role read"},
                     {"a submit token on one workload until January",
                      "trainer tokens create ci --role submit --workload triage --expires-at 2027-01-31T00:00:00Z"}};
  Command list{"list", {}, "List tokens (never their secrets)", "", "", {}, {}, tokens_list, 0, 0, {}};
  list.examples = {{"ids, roles, workloads and state", "trainer tokens list"}, {"as JSON", "trainer tokens list -o json"}};
  Command revoke{"revoke", {}, "Revoke a token: its requests get 401 from now on", "TOKEN",
                 "TOKEN is the token's id (or a unique prefix), as `tokens list` shows it.", {}, {},
                 tokens_revoke, 1, 1, {}};
  revoke.examples = {{"revoke a token", "trainer tokens revoke 3f2a9c71"}};
  g.children = {create, list, revoke};
  return g;
}

Command login_command() {
  Command c{"login", {}, "Keep an API token for the service's address (read from stdin)", "",
            "Checks the token against the service, then keeps it in the token file\n"
            "($XDG_CONFIG_HOME/trainer/tokens.json, else ~/.config/trainer/tokens.json; mode 0600), one entry\n"
            "per service address. Every later command to that address sends it; TRAINER_TOKEN overrides it.\n"
            "The CA file given with --ca-file (or TRAINER_CA_FILE) for an https:// address is kept beside it\n"
            "and verifies later commands to that address that name none. `trainer logout` forgets both.",
            {{"token-stdin", 0, "", "read the token from standard input (required)", ""}},
            {}, login, 0, 0, {}};
  c.examples = {{"log in with a token someone gave you (typed or piped on standard input)", "trainer login --token-stdin"},
                {"log in to another service", "trainer --trainer-url http://gpu-box:9001 login --token-stdin"},
                {"log in to an https:// service signed by your own CA (kept for later commands)",
                 "trainer --trainer-url https://gpu-box:9001 --ca-file ca.pem login --token-stdin"}};
  return c;
}

Command logout_command() {
  Command c{"logout", {}, "Forget the API token and CA file kept for the service's address", "",
            "Removes the address's entries from the token file (`trainer login`); the token itself stays\n"
            "valid on the service (`trainer tokens revoke` ends it).",
            {}, {}, logout, 0, 0, {}};
  c.examples = {{"forget the token kept for the default address", "trainer logout"}};
  return c;
}

}  // namespace trainer::cli

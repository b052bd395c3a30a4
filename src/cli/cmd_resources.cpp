// `trainer info`, `base-models`, `datasets`, `workloads` and `capacity`.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/command_support.h"
#include "cli/format.h"
#include "cli/run_view.h"
#include <algorithm>

namespace trainer::cli {
namespace {

using nlohmann::json;

constexpr double kDefaultSelectTimeoutSeconds = 30 * 60;
constexpr int kPollMillis = 1000;





// Reads --timeout as a Go duration; `fallback` when absent. nullopt (after printing) when bad.
std::optional<double> timeout_flag(Context& ctx, double fallback, int* exit_code) {
  auto text = ctx.inv.get("timeout");
  if (!text) return fallback;
  auto seconds = parse_duration(*text);
  if (!seconds) {
    *exit_code = ctx.fail("--timeout \"" + *text + "\" is not a duration; write it like 90s, 15m0s or 2h",
                          kExitUsage);
    return std::nullopt;
  }
  return *seconds;
}

// ---- info -----------------------------------------------------------------------------------

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
    rows.push_back({"Ready", ready ? ctx.paint("yes", "32") : ctx.paint("no", "31")});
    out(render_fields(rows));
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

// ---- base-models ----------------------------------------------------------------------------

std::string model_status(const json& m) { return str(m, "status"); }

int base_models_list(Context& ctx) {
  auto doc = ctx.get(ctx.inv.has("all") ? "/v1/base-models?all=true" : "/v1/base-models");
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const json models = doc->value("baseModels", json::array());
  if (models.empty()) {
    out(ctx.inv.has("all") ? "No base models are allowed by this deployment.\n"
                           : "No base models selected; see `trainer base-models list --all`, then "
                             "`trainer base-models select NAME`.\n");
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : models) {
    std::string size;
    if (m.contains("sizeBytes") && m["sizeBytes"].is_number()) {
      size = format_number(m["sizeBytes"].get<double>() / (1024.0 * 1024.0)) + " MiB";
    }
    rows.push_back({str(m, "name"), model_status(m),
                    short_id(str(m, "id")), size, str(m, "path")});
  }
  out(render_table({"NAME", "STATUS", "ID", "SIZE", "SOURCE"}, rows));
  return kExitOk;
}

int base_models_get(Context& ctx) {
  const std::string ref = ctx.inv.positionals[0];
  auto doc = ctx.get("/v1/base-models/" + seg(ref));
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const json& m = *doc;
  const std::string name = str(m, "name");
  const std::string status = model_status(m);
  FieldRows state = {{"Name", name}, {"Status", status}};
  if (!str(m, "id").empty()) state.push_back({"Id", str(m, "id")});
  if (!str(m, "failure").empty()) state.push_back({"Failure", str(m, "failure")});
  if (!str(m, "selectedAt").empty()) state.push_back({"Selected", str(m, "selectedAt")});
  FieldRows weights;
  if (!str(m, "path").empty()) weights.push_back({"Source", str(m, "path")});
  if (m.contains("sizeBytes") && m["sizeBytes"].is_number()) {
    weights.push_back({"Size", format_number(m["sizeBytes"].get<double>() / (1024.0 * 1024.0)) + " MiB"});
  }
  if (!str(m, "contentHash").empty()) weights.push_back({"Content hash", str(m, "contentHash")});
  // Whatever else the service says about it, so nothing is hidden in text mode.
  FieldRows other;
  for (auto it = m.begin(); it != m.end(); ++it) {
    static const char* kShown[] = {"name", "status", "id", "failure", "selectedAt", "path", "sizeBytes", "contentHash"};
    if (std::find(std::begin(kShown), std::end(kShown), it.key()) != std::end(kShown)) continue;
    other.push_back({it.key(), it->is_string() ? it->get<std::string>() : it->dump()});
  }
  // What the deployment admits: whether the model is on its list, and what runs can do with it.
  FieldRows deployment;
  Response all;
  CallError e;
  if (ctx.client.get("/v1/base-models?all=true", &all, &e)) {
    bool allowed = false;
    for (const auto& a : all.body.value("baseModels", json::array())) {
      if (str(a, "name") == name) allowed = true;
    }
    deployment.push_back({"Allowed", allowed ? "yes, on this deployment's list (`trainerd --config`, baseModels)"
                                             : "no; an operator adds it under baseModels in `trainerd --config`"});
  }
  std::string lower = status;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "ready") {
    deployment.push_back({"Runs", "can name it now (baseModel: " + name + ")"});
  } else if (lower == "not-selected") {
    deployment.push_back({"Runs", "cannot name it until it is selected: `trainer base-models select " + name + "`"});
  } else if (lower == "failed") {
    deployment.push_back({"Runs", "cannot name it; select it again once the cause is fixed: `trainer base-models select " +
                                      name + "`"});
  } else {
    deployment.push_back({"Runs", "can name it; they start once it is ready (`trainer base-models wait " + name + "`)"});
  }
  out(render_sections({{"State", state}, {"Weights", weights}, {"Deployment", deployment}, {"Other", other}},
                      ctx.color));
  return kExitOk;
}

// Polls the base model until its selection settles. Ready: 0; refused or unselected: 1.
int wait_for_base_model(Context& ctx, const std::string& name, double timeout_seconds) {
  const auto start = std::chrono::steady_clock::now();
  std::string last_status;
  while (true) {
    auto doc = ctx.get("/v1/base-models/" + seg(name));
    if (!doc) return ctx.last_failure_code();
    std::string status = model_status(*doc);
    std::string lower = status;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "ready") {
      if (!ctx.text()) ctx.print_json(*doc);
      else out("Base model " + str(*doc, "name") + " is ready.\n");
      return kExitOk;
    }
    if (lower == "not-selected" || lower == "failed" || lower == "refused" || lower == "unsupported" ||
        lower == "unavailable" || lower == "withdrawn") {
      if (!ctx.text()) ctx.print_json(*doc);
      std::string reason = str(*doc, "failure");
      return ctx.fail("base model " + name + " is " + status + (reason.empty() ? "" : ": " + reason) +
                          (lower == "not-selected" ? "; select it with `trainer base-models select " + name + "`" : ""),
                      kExitError);
    }
    if (ctx.text() && !ctx.quiet && status != last_status) {
      out("Base model " + name + ": " + status + "\n");
      std::fflush(stdout);
    }
    last_status = status;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds > 0 && waited >= timeout_seconds) {
      return ctx.fail("stopped waiting after " + format_duration(waited) + "; base model " + name +
                          " is still " + status,
                      kExitTimeout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMillis));
  }
}

int base_models_select(Context& ctx) {
  const std::string name = ctx.inv.positionals[0];
  int code = kExitOk;
  auto timeout = timeout_flag(ctx, kDefaultSelectTimeoutSeconds, &code);
  if (!timeout) return code;
  auto doc = ctx.post("/v1/base-models/select", json{{"name", name}});
  if (!doc) return ctx.last_failure_code();
  if (!ctx.inv.has("wait")) {
    if (!ctx.text()) ctx.print_json(*doc);
    else out("Selected base model " + str(*doc, "name") + " (" + model_status(*doc) +
             "); runs can name it now. Follow it with `trainer base-models wait " + name + "`.\n");
    return kExitOk;
  }
  return wait_for_base_model(ctx, name, *timeout);
}

int base_models_wait(Context& ctx) {
  int code = kExitOk;
  auto timeout = timeout_flag(ctx, 0, &code);
  if (!timeout) return code;
  return wait_for_base_model(ctx, ctx.inv.positionals[0], *timeout);
}

// ---- datasets -------------------------------------------------------------------------------

std::vector<std::string> dataset_row(const json& d, double now) {
  return {str(d, "name"), short_id(str(d, "hash")),
          str(d, "rows"), str(d, "bytes"),
          age_text(str(d, "createdAt"), now)};
}

int datasets_create(Context& ctx) {
  auto file = ctx.inv.get("file");
  if (!file) return ctx.fail("datasets create needs -f FILE (a chat-format JSONL file, or - for stdin)", kExitUsage);
  std::string error;
  auto rows = read_input(*file, &error);
  if (!rows) return ctx.fail(error, kExitError);
  json body = {{"rows", *rows}};
  if (auto name = ctx.inv.get("name")) body["name"] = *name;
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
  auto doc = ctx.get("/v1/datasets");
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const json list = doc->value("datasets", json::array());
  if (list.empty()) {
    out("No datasets registered; add one with `trainer datasets create -f FILE --name NAME`.\n");
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  const double now = now_seconds();
  for (const auto& d : list) rows.push_back(dataset_row(d, now));
  out(render_table({"NAME", "HASH", "ROWS", "BYTES", "CREATED"}, rows));
  return kExitOk;
}

int datasets_get(Context& ctx) {
  auto doc = ctx.get("/v1/datasets/" + seg(ctx.inv.positionals[0]));
  if (!doc) return ctx.last_failure_code();
  ctx.print_document(*doc);
  return kExitOk;
}

int datasets_measure(Context& ctx) {
  auto model = ctx.inv.get("base-model");
  if (!model) return ctx.fail("datasets measure needs --base-model NAME (its tokenizer and chat template measure the rows)", kExitUsage);
  json body = {{"baseModel", *model}};
  if (auto seq = ctx.inv.get("max-seq-length")) {
    char* end = nullptr;
    long long v = std::strtoll(seq->c_str(), &end, 10);
    if (seq->empty() || *end || v <= 0) {
      return ctx.fail("--max-seq-length must be a positive integer, got \"" + *seq + "\"", kExitUsage);
    }
    body["maxSeqLength"] = v;
  }
  auto doc = ctx.post("/v1/datasets/" + seg(ctx.inv.positionals[0]) + "/measure", body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const json& m = *doc;
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
  return kExitOk;
}

// ---- capacity -------------------------------------------------------------------------------

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
  auto doc = ctx.get("/v1/capacity");
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const json pools = doc->value("pools", json::array());
  const json claims = doc->value("claims", json::array());
  const json quotas = doc->value("quotas", json::array());
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
  return kExitOk;
}

}  // namespace

std::optional<std::string> read_input(const std::string& path, std::string* error) {
  if (path == "-") {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return text;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

Confirmation confirm(Context& ctx, const std::string& question, bool stdin_consumed) {
  if (ctx.inv.has("force")) return Confirmation::kYes;
  if (!ctx.stdin_tty || stdin_consumed) return Confirmation::kNoTerminal;
  std::fprintf(stderr, "%s [y/N] ", question.c_str());
  std::fflush(stderr);
  std::string answer;
  if (!std::getline(std::cin, answer)) return Confirmation::kNo;
  return (answer == "y" || answer == "Y" || answer == "yes" || answer == "YES") ? Confirmation::kYes
                                                                                : Confirmation::kNo;
}

std::string no_terminal_message(const std::string& command_line) {
  return command_line + " asks for confirmation, but stdin is not a terminal; pass --force to go ahead without asking";
}

void append_query(std::string* path, const std::string& key, const std::string& value) {
  *path += path->find('?') == std::string::npos ? "?" : "&";
  *path += key + "=" + Client::escape(value);
}

std::optional<long long> int_flag(Context& ctx, const std::string& flag, int* exit_code) {
  auto text = ctx.inv.get(flag);
  if (!text) return std::nullopt;
  char* end = nullptr;
  long long v = std::strtoll(text->c_str(), &end, 10);
  if (text->empty() || *end || v < 0) {
    *exit_code = ctx.fail("--" + flag + " must be a non-negative integer, got \"" + *text + "\"", kExitUsage);
    return std::nullopt;
  }
  return v;
}

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

Command base_models_command() {
  Command g;
  g.name = "base-models";
  g.aliases = {"base-model"};
  g.summary = "The base models this deployment allows, and which are selected";
  g.examples = {{"the models an operator allows here", "trainer base-models list --all"},
                {"select one so runs can name it, and wait until it is ready",
                 "trainer base-models select tiny-qwen3 --wait"}};
  Command list{"list", {}, "List selected base models (every allowed one with --all)", "", "",
               {{"all", 0, "", "list every allowed model, selected or not", ""}}, {}, base_models_list, 0, 0, {}};
  list.examples = {{"the selected models", "trainer base-models list"},
                   {"every model the deployment allows", "trainer base-models list --all"}};
  Command get{"get", {}, "Show a base model's selection state and what it admits", "BASE_MODEL",
              "Sections: State, Weights (where they come from, size, content hash) and Deployment\n"
              "(whether this deployment allows it, and whether runs can name it now).",
              {}, {}, base_models_get, 1, 1, {}};
  get.examples = {{"one model", "trainer base-models get tiny-qwen3"},
                  {"as JSON", "trainer base-models get tiny-qwen3 -o json"}};
  Command select{"select", {}, "Select a base model (registers it and caches its weights)", "BASE_MODEL",
                 "Returns once accepted; runs can name the model at once. Only models on the deployment's\n"
                 "list can be selected (`trainer base-models list --all`); an operator adds others under\n"
                 "baseModels in `trainerd --config`.",
                 {{"wait", 0, "", "wait until the selection is ready", ""},
                  {"timeout", 0, "DURATION", "how long to wait (default 30m0s)", "wait"}},
                 {}, base_models_select, 1, 1, {}};
  select.examples = {{"select a model and return at once", "trainer base-models select tiny-qwen3"},
                     {"select it and wait at most 10 minutes until it is ready",
                      "trainer base-models select tiny-qwen3 --wait --timeout 10m"}};
  Command wait{"wait", {}, "Wait until a base model's selection is ready", "BASE_MODEL",
               "Exits non-zero when the model is not selected or its selection was refused.",
               {{"timeout", 0, "DURATION", "give up after this long (default: no deadline)", ""}}, {},
               base_models_wait, 1, 1, {}};
  wait.examples = {{"wait until runs can use it", "trainer base-models wait tiny-qwen3"},
                   {"give up after 5 minutes (exit 5)", "trainer base-models wait tiny-qwen3 --timeout 5m"}};
  g.children = {list, get, select, wait};
  return g;
}

Command datasets_command() {
  Command g;
  g.name = "datasets";
  g.aliases = {"dataset"};
  g.summary = "Chat-format JSONL datasets, identified by the hash of their rows";
  g.examples = {{"register the bundled dataset under a name", "trainer datasets create -f examples/sentiment/train.jsonl --name sentiment-train"},
                {"how long its rows are under a base model", "trainer datasets measure sentiment-train --base-model tiny-qwen3"}};
  Command create{"create", {}, "Register a dataset (registering the same rows again returns it)", "",
                 "A name is a movable alias: registering other rows under a name moves it to them (and says\n"
                 "from which dataset); the old rows stay registered under their hash.",
                 {{"file", 'f', "FILE", "chat-format JSONL file; - reads stdin", ""},
                  {"name", 0, "NAME", "a name for it (a movable alias)", ""}},
                 {}, datasets_create, 0, 0, {}};
  create.examples = {{"register a file under a name", "trainer datasets create -f examples/sentiment/train.jsonl --name sentiment-train"},
                     {"register rows piped on stdin, by hash only", "cat examples/sentiment/train.jsonl | trainer datasets create -f -"}};
  Command list{"list", {}, "List datasets, newest first", "", "", {}, {}, datasets_list, 0, 0, {}};
  list.examples = {{"names, hashes and sizes", "trainer datasets list"}, {"as JSON", "trainer datasets list -o json"}};
  Command get{"get", {}, "Show one dataset", "DATASET", "DATASET is a name, a hash or a hash prefix.", {}, {},
              datasets_get, 1, 1, {}};
  get.examples = {{"a dataset by name", "trainer datasets get sentiment-train"},
                  {"its hash alone", "trainer datasets get sentiment-train -o json"}};
  Command measure{"measure", {"analyze"}, "Token lengths of a dataset's rows under a base model", "DATASET",
                  "Counts tokens after the base model's chat template and reports how many rows\n"
                  "a maxSeqLength would cut. Needs no GPU.",
                  {{"base-model", 0, "NAME", "base model whose tokenizer and template to use (required)", ""},
                   {"max-seq-length", 0, "N", "count rows cut at this length (default: the plan default)", ""}},
                  {}, datasets_measure, 1, 1, {}};
  measure.examples = {{"lengths under a model's template", "trainer datasets measure sentiment-train --base-model tiny-qwen3"},
                      {"how many rows a plan's maxSeqLength: 128 would cut",
                       "trainer datasets measure sentiment-train --base-model tiny-qwen3 --max-seq-length 128"}};
  g.children = {create, list, get, measure};
  return g;
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

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
#include "cli/format.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

constexpr double kDefaultSelectTimeoutSeconds = 30 * 60;
constexpr int kPollMillis = 1000;

void out(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

std::string str(const json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key)) return "";
  const json& v = doc[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  if (v.is_array()) {
    std::string joined;
    for (const auto& item : v) {
      if (!joined.empty()) joined += ",";
      joined += item.is_string() ? item.get<std::string>() : item.dump();
    }
    return joined;
  }
  if (v.is_number()) return format_number(v.get<double>());
  return v.dump();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string seg(const std::string& s) { return Client::escape(s); }

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
    return ctx.fail(e.status.message(), e.transport ? kExitUnreachable : kExitError);
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
  auto doc = ctx.get("/v1/base-models/" + seg(ctx.inv.positionals[0]));
  if (!doc) return ctx.last_failure_code();
  ctx.print_document(*doc);
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
    if (ctx.text() && status != last_status) {
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
  if (ctx.inv.has("timeout") && !ctx.inv.has("wait")) {
    return ctx.fail("--timeout needs --wait", kExitUsage);
  }
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
    return ctx.fail(e.status.message(), e.transport ? kExitUnreachable : kExitError);
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
  return kExitOk;
}

// ---- workloads ------------------------------------------------------------------------------

// A field of the workload's evaluation settings ({evaluation: {dataset, grader}}).
std::string evaluation_text(const json& w, const char* key) {
  if (w.contains("evaluation") && w["evaluation"].is_object()) {
    std::string v = str(w["evaluation"], key);
    return std::string(key) == "dataset" ? short_id(v) : v;
  }
  return "";
}

// What a ref points at, in words: "base model tiny-qwen3 (53ffe62f226a)", "run 7d49... adapter".
std::string ref_target_text(const json& target) {
  if (target.is_null()) return "";
  if (target.is_string()) return target.get<std::string>();
  const std::string kind = str(target, "kind");
  if (kind == "baseModel") return "base model " + str(target, "name") + " (" + short_id(str(target, "id")) + ")";
  if (kind == "runAdapter") return "adapter of run " + str(target, "runId") + " at " + str(target, "adapterPath");
  return target.dump();
}

int workloads_create(Context& ctx) {
  json body = {{"name", ctx.inv.positionals[0]}};
  if (auto v = ctx.inv.get("description")) body["description"] = *v;
  if (auto v = ctx.inv.get("dataset")) body["evaluationDataset"] = *v;
  if (auto v = ctx.inv.get("grader")) body["grader"] = *v;
  if (auto v = ctx.inv.get("gpu-quota")) {
    char* end = nullptr;
    long long q = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end || q < 0) {
      return ctx.fail("--gpu-quota must be a non-negative integer, got \"" + *v + "\"", kExitUsage);
    }
    body["gpuQuota"] = q;
  }
  auto doc = ctx.post("/v1/workloads", body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*doc);
  else out("Created workload " + str(*doc, "name") + " (" + str(*doc, "id") + ")\n");
  return kExitOk;
}

int workloads_list(Context& ctx) {
  auto doc = ctx.get("/v1/workloads");
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const json list = doc->value("workloads", json::array());
  if (list.empty()) {
    out("No workloads yet; create one with `trainer workloads create NAME`.\n");
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  const double now = now_seconds();
  for (const auto& w : list) {
    rows.push_back({str(w, "name"), short_id(str(w, "id")),
                    evaluation_text(w, "dataset"), evaluation_text(w, "grader"),
                    str(w, "gpuQuota"), str(w, "description"),
                    age_text(str(w, "createdAt"), now)});
  }
  out(render_table({"NAME", "ID", "EVAL DATASET", "GRADER", "GPU QUOTA", "DESCRIPTION", "CREATED"}, rows));
  return kExitOk;
}

int workloads_get(Context& ctx) {
  auto doc = ctx.get("/v1/workloads/" + seg(ctx.inv.positionals[0]));
  if (!doc) return ctx.last_failure_code();
  ctx.print_document(*doc);
  return kExitOk;
}

int workloads_rename(Context& ctx) {
  auto doc = ctx.patch("/v1/workloads/" + seg(ctx.inv.positionals[0]), json{{"name", ctx.inv.positionals[1]}});
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*doc);
  else out("Renamed workload " + ctx.inv.positionals[0] + " to " + str(*doc, "name") + "\n");
  return kExitOk;
}

int workloads_annotate(Context& ctx) {
  auto description = ctx.inv.get("description");
  if (!description) return ctx.fail("workloads annotate needs --description TEXT (\"\" clears it)", kExitUsage);
  auto doc = ctx.patch("/v1/workloads/" + seg(ctx.inv.positionals[0]), json{{"description", *description}});
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*doc);
  else out(description->empty() ? "Cleared the description of workload " + str(*doc, "name") + "\n"
                                 : "Annotated workload " + str(*doc, "name") + "\n");
  return kExitOk;
}

int workloads_set_evaluation(Context& ctx) {
  auto dataset = ctx.inv.get("dataset");
  if (!dataset) return ctx.fail("workloads set-evaluation needs --dataset NAME_OR_HASH", kExitUsage);
  json body = {{"dataset", *dataset}};
  if (auto g = ctx.inv.get("grader")) body["grader"] = *g;
  auto doc = ctx.put("/v1/workloads/" + seg(ctx.inv.positionals[0]) + "/evaluation", body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*doc);
  else out("Workload " + ctx.inv.positionals[0] + " now evaluates on " + *dataset + "\n");
  return kExitOk;
}

bool valid_ref_name(const std::string& ref) {
  return ref == "base" || ref == "candidate" || ref == "champion";
}

int workloads_refs_get(Context& ctx) {
  const std::string& ref = ctx.inv.positionals[1];
  if (!valid_ref_name(ref)) return ctx.fail("REF must be base, candidate or champion, got \"" + ref + "\"", kExitUsage);
  auto doc = ctx.get("/v1/workloads/" + seg(ctx.inv.positionals[0]) + "/refs/" + ref);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*doc);
  else {
    std::string target = ref_target_text(doc->value("target", json()));
    out(target.empty() ? ref + " is not set\n" : ref + ": " + target + "\n");
  }
  return kExitOk;
}

int workloads_refs_set(Context& ctx) {
  const std::string& ref = ctx.inv.positionals[1];
  if (!valid_ref_name(ref)) return ctx.fail("REF must be base, candidate or champion, got \"" + ref + "\"", kExitUsage);
  auto doc = ctx.put("/v1/workloads/" + seg(ctx.inv.positionals[0]) + "/refs/" + ref,
                     json{{"target", ctx.inv.positionals[2]}});
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*doc);
  else out("Moved " + ref + " of workload " + ctx.inv.positionals[0] + " to " +
           ref_target_text(doc->value("target", json())) + "\n");
  return kExitOk;
}

// ---- capacity -------------------------------------------------------------------------------

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
                      str(c, "pool"), str(c, "state"), age_text(str(c, "since"), now)});
    }
    out(render_table({"KIND", "OWNER", "WORKLOAD", "DEVICES", "POOL", "STATE", "SINCE"}, rows));
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
  return c;
}

Command base_models_command() {
  Command g;
  g.name = "base-models";
  g.aliases = {"base-model"};
  g.summary = "The base models this deployment allows, and which are selected";
  g.children.push_back({"list", {}, "List selected base models (every allowed one with --all)", "", "",
                        {{"all", 0, "", "list every allowed model, selected or not"}}, {}, base_models_list, 0, 0});
  g.children.push_back({"get", {}, "Show a base model's selection state and what it admits", "BASE_MODEL", "", {}, {},
                        base_models_get, 1, 1});
  g.children.push_back({"select", {}, "Select a base model (registers it and caches its weights)", "BASE_MODEL",
                        "Returns once accepted; runs can name the model at once.",
                        {{"wait", 0, "", "wait until the selection is ready"},
                         {"timeout", 0, "DURATION", "with --wait: how long to wait (default 30m0s)"}},
                        {}, base_models_select, 1, 1});
  g.children.push_back({"wait", {}, "Wait until a base model's selection is ready", "BASE_MODEL",
                        "Exits non-zero when the model is not selected or its selection was refused.",
                        {{"timeout", 0, "DURATION", "give up after this long (default: no deadline)"}}, {},
                        base_models_wait, 1, 1});
  return g;
}

Command datasets_command() {
  Command g;
  g.name = "datasets";
  g.aliases = {"dataset"};
  g.summary = "Chat-format JSONL datasets, identified by the hash of their rows";
  g.children.push_back({"create", {}, "Register a dataset (registering the same rows again returns it)", "",
                        "", {{"file", 'f', "FILE", "chat-format JSONL file; - reads stdin"},
                             {"name", 0, "NAME", "a name for it (a movable alias)"}},
                        {}, datasets_create, 0, 0});
  g.children.push_back({"list", {}, "List datasets, newest first", "", "", {}, {}, datasets_list, 0, 0});
  g.children.push_back({"get", {}, "Show one dataset", "DATASET", "", {}, {}, datasets_get, 1, 1});
  g.children.push_back({"measure", {"analyze"}, "Token lengths of a dataset's rows under a base model", "DATASET",
                        "Counts tokens after the base model's chat template and reports how many rows\n"
                        "a maxSeqLength would cut. Needs no GPU.",
                        {{"base-model", 0, "NAME", "base model whose tokenizer and template to use (required)"},
                         {"max-seq-length", 0, "N", "count rows cut at this length (default: the plan default)"}},
                        {}, datasets_measure, 1, 1});
  return g;
}

Command workloads_command() {
  Command g;
  g.name = "workloads";
  g.aliases = {"workload"};
  g.summary = "Workloads: one task each, with its evaluation dataset, grader and refs";
  g.children.push_back({"create", {}, "Create a workload", "NAME", "",
                        {{"description", 0, "TEXT", "free text"},
                         {"dataset", 0, "DATASET", "evaluation dataset (name or hash)"},
                         {"grader", 0, "GRADER", "json-label-match (default), model:MODEL or http:URL"},
                         {"gpu-quota", 0, "N", "devices its runs may hold at once"}},
                        {}, workloads_create, 1, 1});
  g.children.push_back({"list", {}, "List workloads, newest first", "", "", {}, {}, workloads_list, 0, 0});
  g.children.push_back({"get", {}, "Show a workload: evaluation settings and refs", "WORKLOAD", "", {}, {},
                        workloads_get, 1, 1});
  g.children.push_back({"rename", {}, "Rename a workload (its id never changes)", "WORKLOAD NAME", "", {}, {},
                        workloads_rename, 2, 2});
  g.children.push_back({"annotate", {}, "Set a workload's description", "WORKLOAD", "",
                        {{"description", 0, "TEXT", "the new description (\"\" clears it)"}}, {},
                        workloads_annotate, 1, 1});
  g.children.push_back({"set-evaluation", {}, "Change a workload's evaluation dataset and grader", "WORKLOAD", "",
                        {{"dataset", 0, "DATASET", "evaluation dataset (name or hash, required)"},
                         {"grader", 0, "GRADER", "json-label-match, model:MODEL or http:URL"}},
                        {}, workloads_set_evaluation, 1, 1});
  Command refs;
  refs.name = "refs";
  refs.summary = "Read or move a workload's base, candidate and champion refs";
  refs.children.push_back({"get", {}, "Show what a ref points at", "WORKLOAD REF", "REF is base, candidate or champion.",
                           {}, {}, workloads_refs_get, 2, 2});
  refs.children.push_back({"set", {}, "Move a ref (roll back by setting an earlier id)", "WORKLOAD REF TARGET",
                           "REF is base, candidate or champion; base must point at a base model.", {}, {},
                           workloads_refs_set, 3, 3});
  g.children.push_back(refs);
  return g;
}

Command capacity_command() {
  Command c;
  c.name = "capacity";
  c.summary = "Show GPU pools, claims and quotas";
  c.description = "Pools: FREE + GRANTED = DECLARED. A claim holds devices (GRANTED) or waits for them (QUEUED).";
  c.run = run_capacity;
  return c;
}

}  // namespace trainer::cli

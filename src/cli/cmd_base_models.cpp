// `trainer base-models list|get|select|wait|envelopes`: the base models a deployment allows, and their selection.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <thread>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/list_command.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

constexpr double kDefaultSelectTimeoutSeconds = 30 * 60;
constexpr int kPollMillis = 1000;

std::string model_status(const json& m) { return str(m, "status"); }

int base_models_list(Context& ctx) {
  const bool all = ctx.inv.has("all");
  ListView view;
  view.path = all ? "/v1/base-models?all=true" : "/v1/base-models";
  view.items = "baseModels";
  view.header = {"NAME", "STATUS", "ID", "SIZE", "SOURCE"};
  view.row = [](const json& m, double) -> std::vector<std::string> {
    std::string size;
    if (m.contains("sizeBytes") && m["sizeBytes"].is_number()) {
      size = format_number(m["sizeBytes"].get<double>() / (1024.0 * 1024.0)) + " MiB";
    }
    return {str(m, "name"), model_status(m), short_id(str(m, "id")), size, str(m, "path")};
  };
  view.empty = [all](const json&) -> std::string {
    return all ? "No base models are allowed by this deployment.\n"
               : "No base models selected; see `trainer base-models list --all`, then `trainer base-models select NAME`.\n";
  };
  return run_list(ctx, view);
}

int base_models_get(Context& ctx) {
  const std::string ref = ctx.inv.positionals[0];
  return show(ctx, "/v1/base-models/" + seg(ref), [&](const json& doc) {
    const json& m = doc;
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
    // The run shapes the deployment admits for it.
    const json shapes = m.value("admittedShapes", json::array());
    if (m.value("anyShape", false)) {
      out("\nAdmitted shapes: any method, precision and GPU count\n");
    } else if (!shapes.empty()) {
      std::vector<std::vector<std::string>> rows;
      for (const auto& row : shapes) {
        rows.push_back({str(row, "method"), str(row, "precision"), std::to_string(row.value("gpus", 0))});
      }
      out("\nAdmitted shapes (" + str(m, "shapeCatalog") + "):\n" +
          render_table({"METHOD", "PRECISION", "GPUS"}, rows));
    }
  });
}

// The measured envelopes: one row per base model and shape, admitted or measured.
int base_models_envelopes(Context& ctx) {
  return show(ctx, "/v1/base-model-envelopes", [&](const json& doc) {
    const std::string catalog = str(doc, "catalog");
    out("Catalog: " + catalog +
        (catalog == "strict" ? " (a run outside every admitted shape is refused)\n"
                             : " (a run outside every admitted shape is admitted with a warning)\n"));
    const json rows_in = doc.value("measurements", json::array());
    if (rows_in.empty()) {
      out("No envelopes: no base model lists admitted shapes and no run has completed.\n");
      return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& r : rows_in) {
      auto num = [&](const json& v, int digits) -> std::string {
        if (!v.is_number()) return "-";
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.*f", digits, v.get<double>());
        return buf;
      };
      const json tps = r.value("tokensPerSecond", json());
      rows.push_back({str(r, "baseModel"), str(r, "method"), str(r, "precision"), std::to_string(r.value("gpus", 0)),
                      r.value("admitted", false) ? "yes" : "no", std::to_string(r.value("runs", 0)),
                      num(r.value("peakDeviceMemoryGb", json()), 3),
                      tps.is_object() ? num(tps.value("median", json()), 1) : "-"});
    }
    out(render_table({"BASE MODEL", "METHOD", "PRECISION", "GPUS", "ADMITTED", "RUNS", "PEAK MEMORY GB", "TOKENS/S"},
                     rows));
  });
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

}  // namespace

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
  Command envelopes{"envelopes", {}, "List measured training envelopes and whether the catalog is advisory or strict",
                    "",
                    "One row per base model and run shape (method, precision, GPU count): the rows the deployment\n"
                    "admits (baseModels[].shapes in `trainerd --config`) and the shapes completed runs trained in,\n"
                    "with how many runs, the largest device memory one held (GiB) and the median tokens per second.\n"
                    "Strict: a run outside every admitted shape is refused; advisory: admitted with a warning.",
                    {}, {}, base_models_envelopes, 0, 0, {}};
  envelopes.examples = {{"every envelope", "trainer base-models envelopes"},
                        {"the one-GPU rows", "trainer base-models envelopes --jq '.measurements[]|select(.gpus==1)'"}};
  g.children = {list, get, select, wait, envelopes};
  return g;
}

}  // namespace trainer::cli

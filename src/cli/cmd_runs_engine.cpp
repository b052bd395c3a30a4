// `trainer runs engine-config RUN` (the plan's config as submitted beside the engine's resolved
// configuration) and `trainer runs engine-runtime RUN` (what the engine decided and measured at
// setup, for the latest attempt). Both are "not found" until the job writes them.
#include <string>
#include <utility>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/list_command.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

std::string text_of(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Rows "PREFIX.key  value" of an object, nested objects flattened with dots.
void flatten_rows(const json& v, const std::string& prefix, std::vector<std::pair<std::string, std::string>>* rows) {
  if (v.is_object() && !v.empty()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      flatten_rows(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), rows);
    }
    return;
  }
  rows->push_back({prefix, text_of(v)});
}

int runs_engine_config(Context& ctx) {
  return show(ctx, "/v1/runs/" + seg(ctx.inv.positionals[0]) + "/engine-config", [&](const json& doc) {
    const json resolved = doc.value("resolved", json::object());
    std::vector<std::pair<std::string, std::string>> rows = {{"engine", resolved.value("engine", std::string())}};
    flatten_rows(resolved.value("config", json::object()), "resolved", &rows);
    flatten_rows(doc.value("requested", json::object()), "requested", &rows);
    out(render_fields(rows));
  });
}

int runs_engine_runtime(Context& ctx) {
  return show(ctx, "/v1/runs/" + seg(ctx.inv.positionals[0]) + "/engine-runtime", [&](const json& doc) {
    std::vector<std::pair<std::string, std::string>> rows = {{"engine", doc.value("engine", std::string())},
                                                             {"attempt", text_of(doc.value("attempt", json()))}};
    const json rollout = doc.value("rolloutEngine", json());
    if (rollout.is_null()) rows.push_back({"rolloutEngine", "none (supervised)"});
    else flatten_rows(rollout, "rolloutEngine", &rows);
    const json changes = doc.value("trainer", json::object()).value("changedBySetup", json::array());
    if (changes.empty()) rows.push_back({"trainer.changedBySetup", "nothing"});
    for (const json& c : changes) {
      rows.push_back({"trainer.changedBySetup", c.value("field", std::string()) + ": " + text_of(c.value("from", json())) +
                                                    " -> " + text_of(c.value("to", json())) + " (" +
                                                    c.value("why", std::string()) + ")"});
    }
    flatten_rows(doc.value("model", json::object()), "model", &rows);
    flatten_rows(doc.value("memory", json::object()), "memory", &rows);
    out(render_fields(rows));
  });
}

}  // namespace

Command runs_engine_config_command() {
  Command c{"engine-config", {}, "Show the plan's config as submitted beside the engine's resolved configuration", "RUN",
            "requested is the plan's config as it was submitted (the CLI sends it with its defaults\n"
            "filled in); resolved is the engine (native, trl, verl) and every knob it trains with, under\n"
            "engine names (adam_beta1, lr_scheduler_type, per_device_train_batch_size, lora_r, ...).\n"
            "Not found until the job writes it, before its first training step.",
            {}, {}, runs_engine_config, 1, 1, {}};
  c.examples = {{"what the engine made of a plan", "trainer runs engine-config 7d496e82"},
                {"one knob, as JSON", "trainer runs engine-config 7d496e82 --jq .resolved.config.adam_beta1"}};
  return c;
}

Command runs_engine_runtime_command() {
  Command c{"engine-runtime", {}, "Show the engine's runtime decisions and measurements for the latest attempt", "RUN",
            "Sections: rolloutEngine (reinforcement runs: what generates the rollouts and how; none for\n"
            "supervised runs), trainer.changedBySetup (what the engine changed from the request at setup,\n"
            "each {field, from, to, why}), model (total and trainable parameter counts) and memory\n"
            "(bytes afterLoad, afterFirstRollout for reinforcement runs, afterFirstStep). Not found until\n"
            "the job writes it, once the model is loaded.",
            {}, {}, runs_engine_runtime, 1, 1, {}};
  c.examples = {{"the latest attempt's setup and memory", "trainer runs engine-runtime 7d496e82"},
                {"parameter counts, as JSON", "trainer runs engine-runtime 7d496e82 --jq .model"}};
  return c;
}

}  // namespace trainer::cli

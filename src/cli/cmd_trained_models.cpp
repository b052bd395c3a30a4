// `trainer trained-models register|list|get`: the model registry; and `trainer snapshots
// register|candidate`: registering a snapshot's weights as a candidate model.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/list_command.h"
#include "cli/run_view.h"
#include "plan/document.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

std::string base_model_name(const json& m) {
  return m.contains("baseModel") && m["baseModel"].is_object() ? str(m["baseModel"], "name") : "";
}

std::string workload_name(const json& m) {
  return m.contains("workload") && m["workload"].is_object() ? str(m["workload"], "name") : "-";
}

// "6.0 CPU-min": the training time of the run that made the model, on its kind of device; a
// model of an older trainerd (gpuSeconds only) is shown as device time.
std::string cost_of(const json& m) {
  const json cost = m.value("cost", json(nullptr));
  if (!cost.is_object()) return "-";
  if (!cost.contains("deviceSeconds")) return format_device_seconds(cost.value("gpuSeconds", 0.0), "device");
  const json kind = cost.value("deviceKind", json(nullptr));
  if (!kind.is_string()) return "none (not trained here)";
  return format_device_seconds(cost.value("deviceSeconds", 0.0), kind.get<std::string>());
}

std::string source_text(const json& m) {
  const json s = m.value("source", json::object());
  const std::string kind = str(s, "kind");
  if (kind == "snapshot") {
    return "run " + short_id(str(s, "runId")) + ", snapshot " + short_id(str(s, "snapshotId")) + " (step " +
           str(s, "savedStep") + ")";
  }
  if (kind == "import") return "import of " + str(s, "path");
  if (kind == "baseModel") return "base model revision " + short_id(str(s, "revision"));
  return kind;
}

int trained_models_register(Context& ctx) {
  const std::string file = ctx.inv.get_or("file", "");
  if (file.empty()) return ctx.fail("trained-models register needs -f FILE (YAML or JSON; - reads stdin)", kExitUsage);
  std::string error;
  auto text = read_input(file, &error);
  if (!text) return ctx.fail(error, kExitError);
  auto doc = plan::parse_document(*text, file == "-" ? "stdin" : file);
  if (!doc.is_ok()) return ctx.fail(doc.status().message(), kExitUsage);
  auto model = ctx.post("/v1/trained-models", *doc);
  if (!model) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*model);
    return kExitOk;
  }
  out("Registered " + str(*model, "variant") + " model " + str(*model, "modelId") + " on " + base_model_name(*model) +
      " (" + str(*model, "status") + ")\n");
  return kExitOk;
}

int trained_models_list(Context& ctx) {
  ListView view;
  view.path = "/v1/trained-models";
  if (auto w = ctx.inv.get("workload")) append_query(&view.path, "workload", *w);
  if (auto b = ctx.inv.get("base-model")) append_query(&view.path, "baseModel", *b);
  if (auto b = ctx.inv.get("base-model-id")) append_query(&view.path, "baseModel", *b);
  view.items = "models";
  view.header = {"MODEL", "VARIANT", "METHOD", "BASE MODEL", "WORKLOAD", "STATUS", "SOURCE", "CREATED"};
  view.row = [](const json& m, double now) -> std::vector<std::string> {
    return {str(m, "modelId"), str(m, "variant"), str(m, "method"), base_model_name(m), workload_name(m),
            str(m, "status"), source_text(m), age_text(str(m, "createdAt"), now)};
  };
  view.empty = [](const json&) -> std::string {
    return "No registered models (a completed run registers its adapter; see trainer trained-models register -h).\n";
  };
  return run_list(ctx, view);
}

// `trained-models export MODEL --to DIR`: the adapter's PEFT folder as the registry holds it,
// written into DIR (created; files already there with these names are replaced).
int trained_models_export(Context& ctx) {
  const std::string ref = ctx.inv.positionals[0];
  const std::string to = ctx.inv.get_or("to", "");
  if (to.empty()) return ctx.fail("trained-models export needs --to DIR (the folder the adapter is written into)", kExitUsage);
  auto model = ctx.get("/v1/trained-models/" + seg(ref));
  if (!model) return ctx.last_failure_code();
  const std::string id = str(*model, "modelId");
  std::error_code ec;
  std::filesystem::create_directories(to, ec);
  if (ec) return ctx.fail("--to " + to + ": cannot create the folder: " + ec.message(), kExitError);
  json written = json::array();
  for (const char* name : {"adapter_config.json", "adapter_model.safetensors"}) {
    auto bytes = ctx.get_bytes("/v1/trained-models/" + seg(id) + "/files/" + name);
    if (!bytes) return ctx.last_failure_code();
    const std::filesystem::path path = std::filesystem::path(to) / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
    out.close();
    if (!out) return ctx.fail(path.string() + ": cannot write the exported file", kExitError);
    written.push_back({{"name", name}, {"bytes", bytes->size()}, {"path", path.string()}});
  }
  json doc = {{"modelId", id}, {"to", to}, {"format", "peft"}, {"files", written},
              {"baseModel", model->value("baseModel", json(nullptr))}};
  if (!ctx.text()) {
    ctx.print_json(doc);
    return kExitOk;
  }
  out("Exported model " + id + " (a PEFT LoRA adapter on base model " + base_model_name(*model) + ") to " + to + ".\n");
  out("Load it with PEFT: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), \"" + to + "\")\n");
  return kExitOk;
}

int trained_models_get(Context& ctx) {
  return show(ctx, "/v1/trained-models/" + seg(ctx.inv.positionals[0]), [&](const json& doc) {
    const json& m = doc;
    const json config = m.value("config", json(nullptr));
    const json lineage = m.value("lineage", json::object());
    const json artifact = m.value("artifact", json(nullptr));
    std::vector<std::pair<std::string, std::string>> rows = {
        {"Model", str(m, "modelId")},
        {"Variant", str(m, "variant")},
        {"Status", str(m, "status")},
        {"Base model", base_model_name(m)},
        {"Workload", workload_name(m)},
        {"Method", str(m, "method")},
        {"Source", source_text(m)},
        {"Config", config.is_object() ? "name " + (str(config, "configName").empty() ? "-" : str(config, "configName")) +
                                            ", settings sha " + short_id(str(config, "settingsSha"))
                                      : "-"},
        {"Lineage", (lineage.contains("parentRunId") && !lineage["parentRunId"].is_null()
                         ? "parent run " + short_id(str(lineage, "parentRunId")) + ", "
                         : std::string()) +
                        (lineage.contains("runId") ? "run " + short_id(str(lineage, "runId")) : std::string("-"))},
        {"Adapter rank", str(m, "adapterRank").empty() ? "-" : str(m, "adapterRank")},
        {"Cost", cost_of(m)},
        {"Artifact", artifact.is_object() ? str(artifact, "uri") : "- (not copied yet)"},
        {"Evaluations", std::to_string(m.value("evaluations", json::array()).size())},
        {"Created", str(m, "createdAt")}};
    if (!str(m, "failureReason").empty()) rows.push_back({"Failure", str(m, "failureReason")});
    out(render_fields(rows));
  });
}

int snapshots_register(Context& ctx) {
  auto doc = ctx.post("/v1/snapshots/" + seg(ctx.inv.positionals[0]) + "/register", json::object());
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  out("Registering snapshot " + short_id(ctx.inv.positionals[0]) + " as model " + str(*doc, "modelId") + " (" +
      str(*doc, "status") + "); follow it with: trainer snapshots candidate " + ctx.inv.positionals[0] + "\n");
  return kExitOk;
}

int snapshots_candidate(Context& ctx) {
  return show(ctx, "/v1/snapshots/" + seg(ctx.inv.positionals[0]) + "/candidate", [&](const json& doc) {
    const json artifact = doc.value("artifact", json(nullptr));
    std::vector<std::pair<std::string, std::string>> rows = {
        {"Snapshot", str(doc, "snapshotId")},
        {"Model", str(doc, "modelId")},
        {"Status", str(doc, "status")},
        {"Artifact", artifact.is_object() ? str(artifact, "uri") : "-"}};
    if (!str(doc, "failureReason").empty()) {
      rows.push_back({"Failure", str(doc, "failureReason") + " (the snapshot stays held; trainer snapshots release)"});
    }
    out(render_fields(rows));
  });
}

}  // namespace

Command trained_models_command() {
  Command g;
  g.name = "trained-models";
  g.aliases = {"models"};
  g.summary = "The model registry: trained adapters, imported adapters and base models for baselines";
  g.examples = {{"every registered model", "trainer trained-models list"},
                {"one model's lineage", "trainer trained-models get 5be1c0de --jq .lineage"}};
  Command reg{"register", {}, "Register a base model (BASE) or import a PEFT LoRA adapter folder (ADAPTER)", "",
              "FILE (YAML or JSON) is a descriptor:\n"
              "  servingModel: {variant: BASE, baseModel: NAME, revision: HASH}        # a baseline\n"
              "  servingModel: {variant: ADAPTER, baseModel: NAME, ref: DIR, adapterRank: R}\n"
              "  workload: NAME                                                        # ADAPTER only\n"
              "An import is checked before anything is stored: adapter_config.json and\n"
              "adapter_model.safetensors present, peft_type LORA, no modules_to_save, the base model it was\n"
              "trained on, a rank within the deployment's limit, target modules the base model has, and\n"
              "tensors that load onto it. The id derives from the content: registering again returns it.",
              {{"file", 'f', "FILE", "the descriptor (- reads stdin)", ""}}, {}, trained_models_register, 0, 0, {}};
  reg.examples = {{"a baseline", "trainer trained-models register -f base.yaml"},
                  {"import an adapter, print its id", "trainer trained-models register -f adapter.yaml --jq .modelId"}};
  Command list{"list", {}, "List registered models, newest first", "", "",
               {{"workload", 0, "WORKLOAD", "only this workload's models", ""},
                {"base-model", 0, "NAME", "only models on this base model", ""},
                {"base-model-id", 0, "ID", "only models on the base model with this id (or unique prefix)", ""}},
               {}, trained_models_list, 0, 0, {}};
  list.examples = {{"a workload's models", "trainer trained-models list --workload sentiment-demo"},
                   {"their ids", "trainer trained-models list --jq '.models[].modelId'"}};
  Command get{"get", {}, "Show a model: config, lineage, training cost (device kind and time), evaluations, where its artifact lives", "MODEL",
              "MODEL is an id or any unambiguous prefix of one.", {}, {}, trained_models_get, 1, 1, {}};
  get.examples = {{"one model", "trainer trained-models get 5be1c0de"},
                  {"where its adapter lives", "trainer trained-models get 5be1c0de --jq .servingModel.ref"}};
  Command exp{"export", {}, "Write a registered adapter's PEFT folder into a folder of yours", "MODEL",
              "Writes adapter_config.json and adapter_model.safetensors exactly as the registry holds them\n"
              "(a PEFT LoRA adapter folder: load it with peft.PeftModel.from_pretrained on its base model).\n"
              "DIR is created; files of these names in it are replaced. A BASE model has no adapter to export.",
              {{"to", 0, "DIR", "the folder to write the adapter into", ""}}, {}, trained_models_export, 1, 1, {}};
  exp.examples = {{"take a model away", "trainer trained-models export 5be1c0de --to ./sentiment-adapter"}};
  g.children = {reg, list, get, exp};
  return g;
}

Command snapshots_register_command() {
  Command c{"register", {}, "Register a snapshot's weights as a candidate model", "SNAPSHOT",
            "Returns once the registration is durable; the weights are then copied into the registry\n"
            "(PENDING, COPYING, REGISTERED or FAILED) while the snapshot is held. The model id derives\n"
            "from the snapshot: registering again returns the same id. Training-state-only snapshots\n"
            "cannot be served and are refused.",
            {}, {}, snapshots_register, 1, 1, {}};
  c.examples = {{"register a snapshot", "trainer snapshots register 3f2a9c71bd04"},
                {"its model id", "trainer snapshots register 3f2a9c71bd04 --jq .modelId"}};
  return c;
}

Command snapshots_candidate_command() {
  Command c{"candidate", {}, "Show the registration of a snapshot's weights until it is REGISTERED", "SNAPSHOT",
            "A FAILED registration keeps holding its snapshot until `trainer snapshots release`.", {}, {},
            snapshots_candidate, 1, 1, {}};
  c.examples = {{"the registration's status", "trainer snapshots candidate 3f2a9c71bd04"},
                {"as JSON", "trainer snapshots candidate 3f2a9c71bd04 --jq .status"}};
  return c;
}

}  // namespace trainer::cli

// `trainer trained-models register|list|get|export`: the model registry; and `trainer snapshots
// register|candidate`: registering a snapshot's weights as a candidate model.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
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

// The model's name: the plan's modelName, else its base model's (a model registered before names
// existed has none: its base model's).
std::string model_name(const json& m) {
  return str(m, "name").empty() ? base_model_name(m) : str(m, "name");
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
  view.header = {"MODEL", "NAME", "VARIANT", "METHOD", "BASE MODEL", "WORKLOAD", "STATUS", "SOURCE", "CREATED"};
  view.row = [](const json& m, double now) -> std::vector<std::string> {
    return {str(m, "modelId"), model_name(m), str(m, "variant"), str(m, "method"), base_model_name(m), workload_name(m),
            str(m, "status"), source_text(m), age_text(str(m, "createdAt"), now)};
  };
  view.empty = [](const json&) -> std::string {
    return "No registered models (a completed run registers its adapter; see trainer trained-models register -h).\n";
  };
  return run_list(ctx, view);
}

// How long `export --merged` waits for trainerd's answer when no --timeout is given: the first
// export of a model merges it (minutes for a large base model).
constexpr int kMergeWaitSeconds = 3600;

// The format `trained-models export` writes: --format peft|hf, --merged meaning hf. Empty (after
// printing the error) when the flags are wrong.
std::optional<std::string> export_format(Context& ctx) {
  const std::string format = ctx.inv.get_or("format", "");
  if (!format.empty() && format != "peft" && format != "hf") {
    ctx.fail("--format: unknown format '" + format +
                 "' (peft: the adapter's PEFT folder, the default; hf: the adapter merged into its base model, a "
                 "Hugging Face model folder; --merged is the same as --format hf)",
             kExitUsage);
    return std::nullopt;
  }
  if (ctx.inv.has("merged") && format == "peft") {
    ctx.fail("--merged and --format peft contradict each other (--merged is --format hf)", kExitUsage);
    return std::nullopt;
  }
  return ctx.inv.has("merged") ? std::string("hf") : format.empty() ? std::string("peft") : format;
}

// `trained-models export MODEL --to DIR`: the adapter's PEFT folder as the registry holds it,
// written into DIR (created; files already there with these names are replaced).
int export_peft(Context& ctx, const json& model, const std::string& to) {
  const std::string id = str(model, "modelId");
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
              {"baseModel", model.value("baseModel", json(nullptr))}};
  if (!ctx.text()) {
    ctx.print_json(doc);
    return kExitOk;
  }
  out("Exported model " + id + " (a PEFT LoRA adapter on base model " + base_model_name(model) + ") to " + to + ".\n");
  out("Load it with PEFT: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), \"" + to + "\")\n");
  return kExitOk;
}

// A temporary folder beside DIR, removed (with what it holds) unless released by the rename.
class ExportStaging {
 public:
  explicit ExportStaging(std::filesystem::path path) : path_(std::move(path)) {}
  ~ExportStaging() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ExportStaging(const ExportStaging&) = delete;
  ExportStaging& operator=(const ExportStaging&) = delete;
  const std::filesystem::path& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  std::filesystem::path path_;
};

// `trained-models export MODEL --merged --to DIR`: the adapter merged into its base model's
// weights by trainerd (GET .../merged makes the folder once; see src/service/merged_models.cpp for
// why the merge runs there), a Hugging Face model folder downloaded file by file into a
// temporary folder beside DIR and renamed to DIR when every file is written. DIR must not exist
// or be an empty folder: a merged export writes a new folder, never half of one.
int export_merged(Context& ctx, const json& model, const std::string& to) {
  namespace fs = std::filesystem;
  const std::string id = str(model, "modelId");
  const fs::path target = fs::path(to).lexically_normal();
  if (target.empty() || target.filename().empty()) return ctx.fail("--to " + to + ": does not name a folder", kExitUsage);
  std::error_code ec;
  if (fs::exists(target, ec) && !(fs::is_directory(target, ec) && fs::is_empty(target, ec))) {
    return ctx.fail("--to " + to + ": already exists and is not an empty folder; a merged export writes a new folder",
                    kExitError);
  }
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) return ctx.fail("--to " + to + ": cannot create " + parent.string() + ": " + ec.message(), kExitError);
  ExportStaging staging(parent / ("." + target.filename().string() + ".export-" + std::to_string(::getpid())));
  fs::remove_all(staging.path(), ec);
  fs::create_directory(staging.path(), ec);
  if (ec) return ctx.fail("--to " + to + ": cannot write into " + parent.string() + ": " + ec.message(), kExitError);

  const std::string base = "/v1/trained-models/" + seg(id) + "/merged";
  auto listing = ctx.get(base, ctx.client.call_timeout() ? -1 : kMergeWaitSeconds);
  if (!listing) return ctx.last_failure_code();
  json written = json::array();
  for (const json& f : listing->value("files", json::array())) {
    const std::string name = str(f, "name");
    auto bytes = ctx.get_bytes(base + "/" + seg(name));
    if (!bytes) return ctx.last_failure_code();
    const fs::path path = staging.path() / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
    out.close();
    if (!out) return ctx.fail(path.string() + ": cannot write the exported file", kExitError);
    written.push_back({{"name", name}, {"bytes", bytes->size()}, {"path", (target / name).string()}});
  }
  if (fs::exists(target, ec)) fs::remove(target, ec);  // the empty folder checked above
  fs::rename(staging.path(), target, ec);
  if (ec) return ctx.fail("--to " + to + ": cannot move the export into place: " + ec.message(), kExitError);
  staging.release();
  json doc = {{"modelId", id}, {"to", to}, {"format", "hf"}, {"files", written},
              {"baseModel", model.value("baseModel", json(nullptr))}};
  if (!ctx.text()) {
    ctx.print_json(doc);
    return kExitOk;
  }
  out("Exported model " + id + " merged into base model " + base_model_name(model) + " (a Hugging Face model folder, " +
      std::to_string(written.size()) + " files) to " + to + ".\n");
  out("Load it with transformers: AutoModelForCausalLM.from_pretrained(\"" + to + "\"); or serve it: vllm serve " + to +
      "\n");
  return kExitOk;
}

int trained_models_export(Context& ctx) {
  const std::string ref = ctx.inv.positionals[0];
  const std::string to = ctx.inv.get_or("to", "");
  auto format = export_format(ctx);
  if (!format) return kExitUsage;
  if (to.empty()) return ctx.fail("trained-models export needs --to DIR (the folder the model is written into)", kExitUsage);
  auto model = ctx.get("/v1/trained-models/" + seg(ref));
  if (!model) return ctx.last_failure_code();
  return *format == "hf" ? export_merged(ctx, *model, to) : export_peft(ctx, *model, to);
}

int trained_models_get(Context& ctx) {
  return show(ctx, "/v1/trained-models/" + seg(ctx.inv.positionals[0]), [&](const json& doc) {
    const json& m = doc;
    const json config = m.value("config", json(nullptr));
    const json lineage = m.value("lineage", json::object());
    const json artifact = m.value("artifact", json(nullptr));
    std::vector<std::pair<std::string, std::string>> rows = {
        {"Model", str(m, "modelId")},
        {"Name", model_name(m)},
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
  Command exp{"export", {}, "Write a registered adapter into a folder of yours: its PEFT folder, or merged into its base model", "MODEL",
              "--format peft (the default) writes adapter_config.json and adapter_model.safetensors exactly as\n"
              "the registry holds them (a PEFT LoRA adapter folder: load it with peft.PeftModel.from_pretrained\n"
              "on its base model). DIR is created; files of these names in it are replaced.\n"
              "\n"
              "--merged (or --format hf) writes the adapter merged into its base model's weights, a Hugging Face\n"
              "model folder that transformers and vLLM load without PEFT: the base's config.json and tokenizer\n"
              "files, and model.safetensors with every base weight under its own name and dtype, each adapted\n"
              "linear W + scale * B @ A (scale lora_alpha/r, or lora_alpha/sqrt(r) with rsLoRA), as PEFT's\n"
              "merge_and_unload() does. trainerd does the merge (it has the base model; this host needs neither)\n"
              "the first time the model is exported merged, which takes minutes on a large model, and keeps it.\n"
              "The files are written into a temporary folder beside DIR and renamed to DIR at the end; DIR must\n"
              "not exist or be empty.\n"
              "\n"
              "A BASE model has no adapter to export or merge.",
              {{"to", 0, "DIR", "the folder to write the model into", ""},
               {"format", 0, "FORMAT", "peft (the adapter's PEFT folder, the default) or hf (merged into the base model)", ""},
               {"merged", 0, "", "the adapter merged into its base model: the same as --format hf", ""}},
              {}, trained_models_export, 1, 1, {}};
  exp.examples = {{"take a model away", "trainer trained-models export 5be1c0de --to ./sentiment-adapter"},
                  {"a model transformers and vLLM load as is", "trainer trained-models export 5be1c0de --merged --to ./sentiment-model"}};
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

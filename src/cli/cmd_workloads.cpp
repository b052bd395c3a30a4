// `trainer workloads ...`: create, list, get, rename, annotate, set-evaluation, refs, history,
// archive, unarchive.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/list_command.h"
#include "cli/command_support.h"
#include "cli/format.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using nlohmann::json;





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
  if (kind == "baseModel") return "base model " + str(target, "name") + " (model " + str(target, "modelId") + ")";
  if (kind == "model") {
    const json artifact = target.value("artifact", json(nullptr));
    return "model " + str(target, "modelId") + " (" + str(target, "variant") + " on " + str(target, "baseModel") +
           (artifact.is_object() ? ", at " + str(artifact, "uri") : std::string()) + ")";
  }
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
  if (auto v = ctx.inv.get("storage-quota")) {
    char* end = nullptr;
    long long q = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end || q < 0) {
      return ctx.fail("--storage-quota must be a non-negative number of bytes (0: no limit), got \"" + *v + "\"",
                      kExitUsage);
    }
    body["storageQuotaBytes"] = q;
  }
  auto doc = ctx.post("/v1/workloads", body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*doc);
  else out("Created workload " + str(*doc, "name") + " (" + str(*doc, "id") + ")\n");
  return kExitOk;
}

int workloads_list(Context& ctx) {
  ListView view;
  view.path = "/v1/workloads";
  if (auto archived = ctx.inv.get("archived")) {
    if (*archived != "include" && *archived != "only") {
      return ctx.fail("--archived must be include or only, got \"" + *archived + "\"", kExitUsage);
    }
    view.path += "?archived=" + *archived;
  }
  view.items = "workloads";
  view.header = {"NAME", "ID", "EVAL DATASET", "GRADER", "GPU QUOTA", "DESCRIPTION", "CREATED"};
  view.row = [](const json& w, double now) -> std::vector<std::string> {
    return {str(w, "name") + (w.value("archived", false) ? " (archived)" : ""), short_id(str(w, "id")), evaluation_text(w, "dataset"), evaluation_text(w, "grader"),
            str(w, "gpuQuota"), str(w, "description"), age_text(str(w, "createdAt"), now)};
  };
  view.empty = [](const json&) -> std::string {
    return "No workloads yet; create one with `trainer workloads create NAME`.\n";
  };
  return run_list(ctx, view);
}

int workloads_get(Context& ctx) { return show_document(ctx, "/v1/workloads/" + seg(ctx.inv.positionals[0])); }

// `workloads archive|unarchive WORKLOAD`: POST .../archive or .../unarchive.
int workloads_archive_or_unarchive(Context& ctx, const std::string& verb) {
  auto doc = ctx.post("/v1/workloads/" + seg(ctx.inv.positionals[0]) + "/" + verb, json::object());
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
  } else if (verb == "archive") {
    out("Archived workload " + str(*doc, "name") + ": hidden from `workloads list` (`--archived include` shows it), " +
        "it takes no new runs, evaluations or endpoints; its runs, models and scores stay. " +
        "`trainer workloads unarchive " + str(*doc, "name") + "` takes it back.\n");
  } else {
    out("Unarchived workload " + str(*doc, "name") + ": listed again and taking new work.\n");
  }
  return kExitOk;
}

int workloads_archive(Context& ctx) { return workloads_archive_or_unarchive(ctx, "archive"); }
int workloads_unarchive(Context& ctx) { return workloads_archive_or_unarchive(ctx, "unarchive"); }

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
  if (auto f = ctx.inv.get("grader-instructions")) {
    std::string error;
    auto text = read_input(*f, &error);
    if (!text) return ctx.fail(error, kExitUsage);
    body["graderInstructions"] = *text;
  }
  auto doc = ctx.put("/v1/workloads/" + seg(ctx.inv.positionals[0]) + "/evaluation", body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*doc);
  else {
    out("Workload " + ctx.inv.positionals[0] + " now evaluates on " + *dataset + " with " +
        evaluation_text(*doc, "grader") + ". `trainer workloads scores " + ctx.inv.positionals[0] +
        "` shows this setting's table; older scores stay reachable with --dataset and --grader.\n");
  }
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
  json body = {{"target", ctx.inv.positionals[2]}};
  // Who moved it, for `workloads history`.
  if (const char* user = std::getenv("USER"); user && *user) body["by"] = user;
  auto doc = ctx.put("/v1/workloads/" + seg(ctx.inv.positionals[0]) + "/refs/" + ref, body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*doc);
  else out("Moved " + ref + " of workload " + ctx.inv.positionals[0] + " to " +
           ref_target_text(doc->value("target", json())) + "\n");
  return kExitOk;
}
int workloads_history(Context& ctx) {
  ListView view;
  view.path = "/v1/workloads/" + seg(ctx.inv.positionals[0]) + "/history";
  view.items = "history";
  view.header = {"TIME", "REF", "FROM", "TO", "BY", "CHANGE"};
  view.row = [](const json& h, double) -> std::vector<std::string> {
    const bool move = h.contains("ref");
    return {str(h, "time"), move ? "ref " + str(h, "ref") : "-", move ? (str(h, "from").empty() ? "-" : str(h, "from")) : "-",
            move ? str(h, "to") : "-", str(h, "by").empty() ? "-" : str(h, "by"), move ? "" : str(h, "change")};
  };
  return run_list(ctx, view);
}

}  // namespace

Command workloads_command() {
  Command g;
  g.name = "workloads";
  g.aliases = {"workload"};
  g.summary = "Workloads: one task each, with its evaluation dataset, grader and refs";
  g.examples = {{"create the workload a plan names", "trainer workloads create sentiment-demo"},
                {"list them", "trainer workloads list"}};
  Command create{"create", {}, "Create a workload", "NAME", "",
                 {{"description", 0, "TEXT", "free text", ""},
                  {"dataset", 0, "DATASET", "evaluation dataset (name or hash)", ""},
                  {"grader", 0, "GRADER", "json-label-match (default), model:MODEL or http:URL", ""},
                  {"gpu-quota", 0, "N", "devices its runs may hold at once", ""},
                  {"storage-quota", 0, "BYTES",
                   "bytes of datasets and bundles it may upload (0: no limit; default: the deployment's)", ""}},
                 {}, workloads_create, 1, 1, {}};
  create.examples = {{"a workload with defaults", "trainer workloads create sentiment-demo"},
                     {"with an evaluation dataset and a quota of 2 devices",
                      "trainer workloads create sentiment-demo --dataset sentiment-train --gpu-quota 2"}};
  Command list{"list", {}, "List workloads, newest first", "", "Archived workloads are hidden unless --archived asks.",
               {{"archived", 0, "include|only", "list archived workloads too (include), or only them (only)", ""}}, {},
               workloads_list, 0, 0, {}};
  list.examples = {{"every workload", "trainer workloads list"}, {"as JSON", "trainer workloads list -o json"},
                   {"the archived ones", "trainer workloads list --archived only"}};
  Command archive{"archive", {}, "Archive a workload: hidden from the list, no new work (refused while work runs)",
                  "WORKLOAD",
                  "An archived workload still answers `workloads get`, keeps its runs, models, scores and refs,\n"
                  "and refuses new runs, evaluations and endpoints. Archiving is refused while the workload has\n"
                  "work in progress (open runs, evaluations or endpoints), each named. Datasets and bundles are\n"
                  "not the workload's and stay as they are.",
                  {}, {}, workloads_archive, 1, 1, {}};
  archive.examples = {{"archive a finished workload", "trainer workloads archive sentiment-demo"}};
  Command unarchive{"unarchive", {}, "Take an archived workload back: listed again and taking new work", "WORKLOAD", "",
                    {}, {}, workloads_unarchive, 1, 1, {}};
  unarchive.examples = {{"take it back", "trainer workloads unarchive sentiment-demo"}};
  Command get{"get", {}, "Show a workload: evaluation settings and refs", "WORKLOAD", "", {}, {}, workloads_get, 1, 1, {}};
  get.examples = {{"one workload", "trainer workloads get sentiment-demo"},
                  {"as JSON", "trainer workloads get sentiment-demo -o json"}};
  Command rename{"rename", {}, "Rename a workload (its id never changes)", "WORKLOAD NAME", "", {}, {},
                 workloads_rename, 2, 2, {}};
  rename.examples = {{"give a workload a new name", "trainer workloads rename sentiment-demo sentiment"},
                     {"and back", "trainer workloads rename sentiment sentiment-demo"}};
  Command annotate{"annotate", {}, "Set a workload's description", "WORKLOAD", "",
                   {{"description", 0, "TEXT", "the new description (\"\" clears it)", ""}}, {}, workloads_annotate,
                   1, 1, {}};
  annotate.examples = {{"describe it", "trainer workloads annotate sentiment-demo --description \"review sentiment as JSON\""},
                       {"clear the description", "trainer workloads annotate sentiment-demo --description \"\""}};
  Command set_eval{"set-evaluation", {}, "Change a workload's evaluation dataset and grader", "WORKLOAD",
                   "A new setting starts a new default score table (`workloads scores`); the old setting is kept "
                   "in the workload's evaluationHistory and its scores stay reachable with --dataset and --grader.",
                   {{"dataset", 0, "DATASET", "evaluation dataset (name or hash, required)", ""},
                    {"grader", 0, "GRADER", "json-label-match, model:MODEL or http:URL", ""},
                    {"grader-instructions", 0, "FILE", "the judge's instructions (model: graders), - for stdin", ""}},
                   {}, workloads_set_evaluation, 1, 1, {}};
  set_eval.examples = {{"evaluate on a dataset", "trainer workloads set-evaluation sentiment-demo --dataset sentiment-train"},
                       {"and with a named grader",
                        "trainer workloads set-evaluation sentiment-demo --dataset sentiment-train --grader json-label-match"}};
  Command refs;
  refs.name = "refs";
  refs.summary = "Read or move a workload's base, candidate and champion refs";
  refs.examples = {{"what the champion is", "trainer workloads refs get sentiment-demo champion"},
                   {"point base at a base model", "trainer workloads refs set sentiment-demo base tiny-qwen3"}};
  Command refs_get{"get", {}, "Show what a ref points at", "WORKLOAD REF", "REF is base, candidate or champion.", {},
                   {}, workloads_refs_get, 2, 2, {}};
  refs_get.examples = {{"the base ref", "trainer workloads refs get sentiment-demo base"},
                       {"the champion, as JSON", "trainer workloads refs get sentiment-demo champion -o json"}};
  Command refs_set{"set", {}, "Move a ref (roll back by setting an earlier id)", "WORKLOAD REF TARGET",
                   "REF is base, candidate or champion; base must point at a base model.", {}, {},
                   workloads_refs_set, 3, 3, {}};
  refs_set.examples = {{"point base at a base model", "trainer workloads refs set sentiment-demo base tiny-qwen3"},
                       {"make a run's adapter the candidate", "trainer workloads refs set sentiment-demo candidate 7d496e82"}};
  refs.children = {refs_get, refs_set};
  Command history{"history", {}, "Show a workload's audit log: ref moves (who, when, from, to) and changes",
                  "WORKLOAD", "Roll a ref back by setting it to an earlier TO: trainer workloads refs set W REF MODEL.",
                  {}, {}, workloads_history, 1, 1, {}};
  history.examples = {{"a workload's history", "trainer workloads history sentiment-demo"},
                      {"the models its refs pointed at", "trainer workloads history sentiment-demo --jq '.history[].to'"}};
  g.children = {create, list, get, rename, annotate, set_eval, workloads_scores_command(), refs, history, archive,
                unarchive};
  return g;
}

}  // namespace trainer::cli

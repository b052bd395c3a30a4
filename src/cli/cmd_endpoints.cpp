// `trainer endpoints create|wait|list|get|send|info|detach|disable|enable|delete` (docs/serving.md, "Endpoints").
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/list_command.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

// `endpoints wait`'s deadline when none is given: 15 minutes, as documented.
constexpr double kDefaultWaitSeconds = 15 * 60;
constexpr int kPollMilliseconds = 500;

// A whole decimal number ("0", "0.7"); nullopt for anything else.
std::optional<double> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return v;
}

bool ended(const std::string& phase) { return phase == "DELETED" || phase == "FAILED"; }

std::string models_text(const json& e) {
  std::string out;
  for (const auto& m : e.value("models", json::array())) {
    out += (out.empty() ? "" : ", ") + m.value("name", std::string()) + " (" + m.value("kind", std::string()) + ")";
  }
  return out;
}

int print_endpoint(Context& ctx, const json& e) {
  if (!ctx.text()) {
    ctx.print_json(e);
    return kExitOk;
  }
  std::vector<std::pair<std::string, std::string>> rows = {
      {"Endpoint", str(e, "endpointId")},
      {"Phase", str(e, "phase")},
      {"Models", models_text(e)},
      {"Workload", e["workload"].is_object() ? str(e["workload"], "name") : "-"},
      {"Created", str(e, "createdAt")}};
  const json claim = e.value("claim", json(nullptr));
  if (claim.is_object()) {
    const std::string devices = std::to_string(claim.value("devices", 1)) + " device(s) of pool " + str(claim, "pool");
    const std::string state = str(claim, "state");
    rows.push_back({"Devices", state.empty() ? devices : devices + " (" + state + ")"});
  }
  if (e.contains("address")) rows.push_back({"Address", str(e, "address")});
  if (e.contains("readyAt")) rows.push_back({"Ready", str(e, "readyAt")});
  if (e.contains("failureReason")) rows.push_back({"Failure", str(e, "failureReason")});
  out(render_fields(rows));
  return kExitOk;
}

// Follows the endpoint until it is READY (exit 0), ends (exit 1: it will not answer) or the
// deadline passes (exit 5; the endpoint carries on coming up).
int wait_for_endpoint(Context& ctx, const std::string& ref) {
  int code = kExitOk;
  const std::optional<double> timeout = timeout_flag(ctx, kDefaultWaitSeconds, &code);
  if (!timeout) return code;
  const double timeout_seconds = *timeout;
  const auto start = std::chrono::steady_clock::now();
  std::string last;
  for (;;) {
    auto e = ctx.get("/v1/endpoints/" + seg(ref));
    if (!e) return ctx.last_failure_code();
    const std::string phase = str(*e, "phase");
    if (ctx.text() && !ctx.quiet && phase != last) {
      std::fprintf(stderr, "endpoint %s: %s\n", short_id(str(*e, "endpointId")).c_str(), phase.c_str());
    }
    last = phase;
    if (phase == "READY") return print_endpoint(ctx, *e);
    if (ended(phase) || phase == "DELETING") {
      print_endpoint(ctx, *e);
      return ctx.fail("endpoint " + str(*e, "endpointId") + " will not answer: it is " + phase +
                          (e->contains("failureReason") ? " (" + str(*e, "failureReason") + ")" : ""),
                      kExitError);
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds > 0 && elapsed >= timeout_seconds) {
      return ctx.fail("stopped waiting after " + format_duration(timeout_seconds) + " (--timeout); endpoint " + ref +
                          " is still " + phase + " and carries on",
                      kExitTimeout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMilliseconds));
  }
}

int endpoints_create(Context& ctx) {
  json body = {{"model", ctx.inv.get_or("model", "")}};
  if (auto w = ctx.inv.get("workload")) body["workload"] = *w;
  auto e = ctx.post("/v1/endpoints", body);
  if (!e) return ctx.last_failure_code();
  const std::string id = str(*e, "endpointId");
  if (ctx.inv.has("wait")) return wait_for_endpoint(ctx, id);
  if (!ctx.text()) {
    ctx.print_json(*e);
    return kExitOk;
  }
  if (e->contains("attachedModel")) {
    out("Attached " + str(*e, "attachedModel") + " to endpoint " + id + ", which serves its base model already (no new "
        "devices); it serves " + models_text(*e) + ".\n");
    return kExitOk;
  }
  out("Created endpoint " + id + " serving " + models_text(*e) + "; it is " + str(*e, "phase") +
      ". `trainer endpoints wait " + short_id(id) + "` waits until it answers.\n");
  return kExitOk;
}

int endpoints_wait(Context& ctx) { return wait_for_endpoint(ctx, ctx.inv.positionals[0]); }

int endpoints_list(Context& ctx) {
  ListView view;
  view.path = "/v1/endpoints";
  if (auto v = ctx.inv.get("phase")) append_query(&view.path, "phase", *v);
  view.paging = Paging::kNone;
  view.items = "endpoints";
  view.header = {"ENDPOINT", "PHASE", "MODELS", "WORKLOAD", "CREATED"};
  view.row = [](const json& e, double) -> std::vector<std::string> {
    return {short_id(str(e, "endpointId")), str(e, "phase"), models_text(e),
            e["workload"].is_object() ? str(e["workload"], "name") : "-", str(e, "createdAt")};
  };
  view.empty = [](const json&) -> std::string {
    return "No endpoints. Create one with `trainer endpoints create --model MODEL --workload W --wait`.\n";
  };
  return run_list(ctx, view);
}

int endpoints_get(Context& ctx) {
  auto e = ctx.get("/v1/endpoints/" + seg(ctx.inv.positionals[0]));
  if (!e) return ctx.last_failure_code();
  return print_endpoint(ctx, *e);
}

// One stateless chat completion through trainerd: {model, output, usage} with -o json.
int endpoints_send(Context& ctx) {
  std::string input;
  if (auto text = ctx.inv.get("input")) {
    input = *text;
  } else if (auto file = ctx.inv.get("file")) {
    std::string error;
    auto read = read_input(*file, &error);
    if (!read) return ctx.fail(error, kExitUsage);
    input = *read;
  } else {
    return ctx.fail("--input TEXT or --file FILE is required", kExitUsage);
  }
  json messages = json::array();
  if (auto instructions = ctx.inv.get("instructions")) messages.push_back({{"role", "system"}, {"content", *instructions}});
  messages.push_back({{"role", "user"}, {"content", input}});
  json body = {{"messages", messages}};
  if (auto model = ctx.inv.get("model")) body["model"] = *model;
  if (auto t = ctx.inv.get("temperature")) {
    auto value = parse_number(*t);
    if (!value) return ctx.fail("--temperature \"" + *t + "\" is not a number", kExitUsage);
    body["temperature"] = *value;
  }
  int code = kExitOk;
  auto max_tokens = int_flag(ctx, "max-tokens", &code);
  if (code != kExitOk) return code;
  if (max_tokens) body["max_tokens"] = *max_tokens;
  auto answer = ctx.post("/v1/endpoints/" + seg(ctx.inv.positionals[0]) + "/v1/chat/completions", body);
  if (!answer) return ctx.last_failure_code();
  const json choices = answer->value("choices", json::array());
  const std::string output =
      choices.empty() ? "" : choices[0].value("message", json::object()).value("content", std::string());
  if (!ctx.text()) {
    ctx.print_json({{"model", answer->value("model", std::string())}, {"output", output}, {"usage", (*answer)["usage"]}});
    return kExitOk;
  }
  out(output + "\n");
  return kExitOk;
}

int endpoints_info(Context& ctx) {
  auto info = ctx.get("/v1/endpoints/info");
  if (!info) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*info);
    return kExitOk;
  }
  auto value = [&](const char* key) {
    const json& v = info->value(key, json(nullptr));
    return v.is_null() ? std::string("-") : v.is_string() ? v.get<std::string>() : v.dump();
  };
  const json parsers = info->value("toolCallParsers", json::array());
  std::string tools;
  for (const auto& p : parsers) tools += (tools.empty() ? "" : ", ") + p.get<std::string>();
  out("Max adapter rank:       " + value("maxAdapterRank") + "\n" +
      "Adapters loaded at once: " + value("maxAdaptersLoaded") + "\n" +
      "Devices per endpoint:   " + value("devicesPerEndpoint") + "\n" +
      "Device type:            " + value("deviceType") + " (pool " + value("pool") + ")\n" +
      "Context limit:          each model's own\n" +
      "Idle timeout:           none (an endpoint serves until it is deleted)\n" +
      "Tool-call parsing:      " + (tools.empty() ? std::string("not yet") : tools) + "\n" +
      "Whole-weight models:    not served (a base model and LoRA adapters only)\n");
  return kExitOk;
}

int endpoints_delete(Context& ctx) {
  auto e = ctx.del("/v1/endpoints/" + seg(ctx.inv.positionals[0]));
  if (!e) return ctx.last_failure_code();
  if (!ctx.text()) ctx.print_json(*e);
  else out("Endpoint " + str(*e, "endpointId") + " is " + str(*e, "phase") + "; its process stops and its devices are released.\n");
  return kExitOk;
}

// `endpoints detach|disable|enable ENDPOINT MODEL`: one model of an endpoint.
int endpoint_model_action(Context& ctx, const std::string& action) {
  const std::string path = "/v1/endpoints/" + seg(ctx.inv.positionals[0]) + "/models/" + seg(ctx.inv.positionals[1]);
  auto e = action == "detach" ? ctx.del(path) : ctx.post(path + "/" + action, json::object());
  if (!e) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*e);
    return kExitOk;
  }
  const std::string id = str(*e, "endpointId"), model = ctx.inv.positionals[1];
  if (action == "detach" && str(*e, "phase") != "READY" && str(*e, "phase") != "STARTING" &&
      str(*e, "phase") != "AWAITING_CAPACITY") {
    out("Detached " + model + ", the last model of endpoint " + id + ": it is " + str(*e, "phase") +
        "; its process stops and its devices are released.\n");
  } else if (action == "detach") {
    out("Detached " + model + " from endpoint " + id + "; it serves " + models_text(*e) + ".\n");
  } else {
    out("Model " + model + " of endpoint " + id + " is " + action + "d" +
        (action == "disable" ? "; trainerd answers 409 for it until `trainer endpoints enable`.\n" : ".\n"));
  }
  return kExitOk;
}

int endpoints_detach(Context& ctx) { return endpoint_model_action(ctx, "detach"); }
int endpoints_disable(Context& ctx) { return endpoint_model_action(ctx, "disable"); }
int endpoints_enable(Context& ctx) { return endpoint_model_action(ctx, "enable"); }

}  // namespace

Command endpoints_command() {
  Command g;
  g.name = "endpoints";
  g.aliases = {"endpoint"};
  g.summary = "Endpoints: a model served at an OpenAI-compatible address, for trying it";
  g.description =
      "MODEL is a selected base model's name (then --workload is required), a completed run's id\n"
      "(its adapter on its base model) or a registered model's id. An endpoint holds one device of\n"
      "a serving pool while it exists. trainerd forwards POST /v1/endpoints/ID/v1/chat/completions\n"
      "to it. See docs/serving.md.";
  g.examples = {{"serve a run's adapter and wait until it answers", "trainer endpoints create --model 7d496e82 --wait"},
                {"ask it something", "trainer endpoints send 3f2a9c71 --input \"Is this review positive?\""}};
  const Flag timeout{"timeout", 0, "DURATION", "stop waiting after this long (default 15m0s, 0 = no deadline; exits 5)", "wait"};
  Command create{"create", {}, "Create an endpoint serving a model", "", "",
                 {{"model", 0, "MODEL", "a base model's name, a completed run's id or a registered model's id", ""},
                  {"workload", 0, "WORKLOAD", "the workload its devices count against (required for a base model)", ""},
                  {"wait", 0, "", "wait until it answers (fails if it will not)", ""},
                  timeout},
                 {}, endpoints_create, 0, 0, {}};
  create.examples = {g.examples[0], {"serve a base model", "trainer endpoints create --model qwen3-tiny --workload tickets --wait"}};
  Command wait_cmd{"wait", {}, "Wait until an endpoint answers (fails if it will not)", "ENDPOINT", "", {timeout}, {},
                   endpoints_wait, 1, 1, {}};
  wait_cmd.flags[0].requires_flag = "";
  wait_cmd.examples = {{"wait up to two minutes", "trainer endpoints wait 3f2a9c71 --timeout 2m"}};
  Command list{"list", {}, "List endpoints, newest first", "", "",
               {{"phase", 0, "PHASE", "AWAITING_CAPACITY, STARTING, READY, DELETING, DELETED, FAILED or active", ""}},
               {}, endpoints_list, 0, 0, {}};
  list.examples = {{"endpoints that hold devices", "trainer endpoints list --phase active"}};
  Command get{"get", {}, "Show an endpoint: phase, models and their request names, devices", "ENDPOINT", "", {}, {},
              endpoints_get, 1, 1, {}};
  get.examples = {{"the names requests use", "trainer endpoints get 3f2a9c71 --jq '.models[].name'"}};
  Command send{"send", {}, "Send one input to an endpoint and print the answer (no history is kept)", "ENDPOINT", "",
               {{"input", 0, "TEXT", "the user message", ""},
                {"file", 0, "FILE", "read the user message from FILE (- for stdin)", ""},
                {"instructions", 0, "TEXT", "a system message before it", ""},
                {"model", 0, "NAME", "which served model answers (default: the adapter, else the base model)", ""},
                {"temperature", 0, "T", "sampling temperature (0 = greedy)", ""},
                {"max-tokens", 0, "N", "the most tokens to generate", ""}},
               {}, endpoints_send, 1, 1, {}};
  send.examples = {g.examples[1], {"model, output and token usage as JSON",
                                   "trainer endpoints send 3f2a9c71 --input Hi --temperature 0 -o json"}};
  Command info{"info", {}, "Show what an endpoint of this deployment can serve: adapter rank, adapters at once, devices",
               "", "", {}, {}, endpoints_info, 0, 0, {}};
  info.examples = {{"the largest adapter rank served", "trainer endpoints info --jq .maxAdapterRank"}};
  Command del{"delete", {}, "Take an endpoint down: its process stops, its devices are released", "ENDPOINT", "", {},
              {}, endpoints_delete, 1, 1, {}};
  del.examples = {{"take it down", "trainer endpoints delete 3f2a9c71"}};
  Command detach{"detach", {}, "Stop serving one model of an endpoint; the last one takes the endpoint down",
                 "ENDPOINT MODEL", "MODEL is a served name, a run or model id, or a prefix of one.", {}, {},
                 endpoints_detach, 2, 2, {}};
  detach.examples = {{"stop serving a run's adapter", "trainer endpoints detach 3f2a9c71 7d496e82"}};
  Command disable{"disable", {}, "Keep a model attached but refuse requests for it through trainerd (409)",
                  "ENDPOINT MODEL", "", {}, {}, endpoints_disable, 2, 2, {}};
  disable.examples = {{"refuse requests for the base model", "trainer endpoints disable 3f2a9c71 qwen3-tiny"}};
  Command enable{"enable", {}, "Allow requests for a disabled model again", "ENDPOINT MODEL", "", {}, {},
                 endpoints_enable, 2, 2, {}};
  enable.examples = {{"allow them again", "trainer endpoints enable 3f2a9c71 qwen3-tiny"}};
  g.children = {create, wait_cmd, list, get, send, endpoints_proxy_command(), info, detach, disable, enable, del};
  return g;
}

}  // namespace trainer::cli

// trainer-job serve: a base model and its LoRA adapters at an OpenAI-compatible address, on the
// native engine's serving core (docs/serving.md).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/version.h"
#include "engine/serving.h"
#include "job/commands.h"
#include "job/heartbeat.h"
#include "job/input_fetch.h"
#include "job/job_events.h"
#include "job/serve_api.h"
#include "job/stop_signals.h"
#include "protocol/job_request.h"

namespace trainer::job {
namespace {

constexpr const char* kUsage =
    "usage: trainer-job serve --model DIR [--adapter NAME=DIR]... [--port N (0)] [--host ADDR (127.0.0.1)]\n"
    "                         [--name NAME (the folder's name)] [--max-adapters N (4)] [--max-rank N (64)]\n"
    "                         [--kv-blocks N (1024)] [--block-size N (16)] [--context-limit N (0 = the model's)]\n"
    "                         [--prefill-chunk N (128)] [--max-batch N (64)] [--precision FP32|BF16 (FP32)]\n"
    "                         [--gpus N (0)] [--prefix-cache on|off (on)] [--greedy-head screened|fp32 (screened)]\n"
    "                         [--events FILE] [--heartbeat-seconds N (0 = none)]\n"
    "       trainer-job serve --spec FILE [FLAG VALUE]...\n"
    "Serves the model and adapters over HTTP (OpenAI's /v1/models, /v1/chat/completions,\n"
    "/v1/completions; /v1/adapters to attach and detach; /v1/stats). Once listening it prints one JSON\n"
    "line on stdout: {\"event\": \"listening\", \"host\": ADDR, \"port\": N, \"models\": [...],\n"
    "\"contextLimit\": N} (listening on every interface, \"hostname\" too: this machine's name).\n"
    "With TRAINER_SERVE_SECRET in its environment (as trainerd starts an endpoint's process) it\n"
    "answers only requests carrying \"Authorization: Bearer SECRET\" (else 401); without, any.\n"
    "--events FILE: the job protocol's events (its hello, then a heartbeat every --heartbeat-seconds,\n"
    "by which trainerd tells a live process from a hung one).\n"
    "SIGTERM or SIGINT stops it. --spec FILE gives the flags as one JSON object by name, as\n"
    "trainerd starts an endpoint's process: {\"model\": DIR, \"port\": 0, \"adapter\": {NAME: DIR}};\n"
    "flags after it add to it (trainerd passes --events so). A model or adapter given as an s3:// URI\n"
    "under TRAINER_ARTIFACT_ROOT (trainerd's staged inputs, docs/job-protocol.md) is fetched into\n"
    "the node's input cache first, its content hash checked; so is one POST /v1/adapters names.\n";

// The environment variable of an endpoint's secret (protocol/job_request.h, serve_secret).
constexpr const char* kSecretVariable = "TRAINER_SERVE_SECRET";

bool is_wildcard(const std::string& host) { return host == "0.0.0.0" || host == "::" || host.empty(); }

std::string this_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// Parses a whole non-negative integer (minimum `lo`) into `out`; false when it is not one.
bool parse_int(const std::string& text, int64_t lo, int64_t* out) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != text.size() || v < lo) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}

struct ServeArgs {
  engine::ServeOptions engine;
  ServeHttpOptions http;
  std::vector<std::pair<std::string, std::string>> adapters;  // NAME, DIR
  std::string events_path;                                     // "": no events
  int64_t heartbeat_seconds = 0;                               // 0: no heartbeat
};

// Fills `out` from argv (--adapter may repeat); returns an error message, empty when fine.
std::string parse_serve_args(int argc, char** argv, ServeArgs* out) {
  struct IntOption {
    const char* name;
    int64_t lo;
    int64_t* target;
  };
  int64_t port = 0, max_adapters = out->engine.max_adapters, gpus = 0;
  const IntOption ints[] = {
      {"--port", 0, &port},
      {"--max-adapters", 0, &max_adapters},
      {"--max-rank", 1, &out->engine.max_rank},
      {"--kv-blocks", 1, &out->engine.kv_blocks},
      {"--block-size", 1, &out->engine.block_size},
      {"--context-limit", 0, &out->engine.context_limit},
      {"--prefill-chunk", 1, &out->engine.prefill_chunk},
      {"--max-batch", 1, &out->engine.max_batch},
      {"--gpus", 0, &gpus},
      {"--heartbeat-seconds", 0, &out->heartbeat_seconds},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return arg + " needs a value";
    const std::string value = argv[++i];
    bool known = false;
    for (const auto& o : ints) {
      if (arg != o.name) continue;
      known = true;
      if (!parse_int(value, o.lo, o.target)) return arg + " must be an integer of at least " + std::to_string(o.lo);
    }
    if (known) continue;
    if (arg == "--model") {
      out->engine.model_dir = value;
    } else if (arg == "--name") {
      out->engine.base_name = value;
    } else if (arg == "--events") {
      out->events_path = value;
    } else if (arg == "--host") {
      out->http.host = value;
    } else if (arg == "--precision") {
      if (value == "BF16" || value == "bf16") {
        out->engine.precision = plan::Precision::kBf16;
      } else if (value != "FP32" && value != "fp32") {
        return "--precision must be FP32 or BF16, got '" + value + "'";
      }
    } else if (arg == "--prefix-cache") {
      if (value != "on" && value != "off") return "--prefix-cache must be on or off, got '" + value + "'";
      out->engine.prefix_cache = value == "on";
    } else if (arg == "--greedy-head") {
      if (value != "screened" && value != "fp32") return "--greedy-head must be screened or fp32, got '" + value + "'";
      out->engine.screened_greedy_head = value == "screened";
    } else if (arg == "--adapter") {
      const size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) return "--adapter takes NAME=DIR, got '" + value + "'";
      out->adapters.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else {
      return "unknown option '" + arg + "'";
    }
  }
  if (out->engine.model_dir.empty()) return "--model is required";
  if (port > 65535) return "--port must be at most 65535";
  out->http.port = static_cast<int>(port);
  out->engine.max_adapters = static_cast<int>(max_adapters);
  out->engine.gpus = static_cast<int>(gpus);
  return "";
}

// The flags a --spec file gives ({"model": DIR, "port": 0, "adapter": {NAME: DIR}, ...}), as the
// command line would: "--model", DIR, ... Returns an error message, empty when fine.
std::string spec_arguments(const std::string& path, std::vector<std::string>* out) {
  std::ifstream in(path);
  if (!in) return "--spec " + path + ": cannot read it";
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json spec = nlohmann::json::parse(text.str(), nullptr, false);
  if (!spec.is_object()) return "--spec " + path + ": not a JSON object";
  out->push_back("serve");
  for (const auto& [key, value] : spec.items()) {
    if (key == "adapter" && value.is_object()) {
      for (const auto& [name, dir] : value.items()) {
        if (!dir.is_string()) return "--spec " + path + ": adapter." + name + " must be a folder's path";
        out->insert(out->end(), {"--adapter", name + "=" + dir.get<std::string>()});
      }
    } else if (value.is_string() || value.is_number_integer()) {
      out->insert(out->end(), {"--" + key, value.is_string() ? value.get<std::string>() : value.dump()});
    } else {
      return "--spec " + path + ": " + key + " must be a string or an integer";
    }
  }
  return "";
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--spec") {
    std::vector<std::string> args;
    if (std::string error = spec_arguments(argv[2], &args); !error.empty()) {
      std::fprintf(stderr, "trainer-job serve: %s\n", error.c_str());
      return 2;
    }
    for (int i = 3; i < argc; ++i) args.emplace_back(argv[i]);  // the flags after the spec (--events)
    std::vector<char*> spec_argv;
    for (auto& a : args) spec_argv.push_back(a.data());
    spec_argv.push_back(nullptr);
    return cmd_serve(static_cast<int>(args.size()), spec_argv.data());
  }
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  ServeArgs args;
  if (std::string error = parse_serve_args(argc, argv, &args); !error.empty()) {
    std::fprintf(stderr, "trainer-job serve: %s\n%s", error.c_str(), kUsage);
    return 2;
  }
  // The endpoint's secret comes in the environment (never on the command line) and leaves it.
  if (const char* secret = std::getenv(kSecretVariable); secret != nullptr) {
    args.http.api_key = secret;
    ::unsetenv(kSecretVariable);
  }
  // Its events: a hello, then a heartbeat from the start (a model load may take long).
  auto request = protocol::job_request_from_environment(std::getenv);
  EventWriter events;
  std::unique_ptr<PostedLog> posted_log;
  if (!args.events_path.empty()) {
    if (Status st = events.open(args.events_path); !st.is_ok()) {
      std::fprintf(stderr, "trainer-job serve: --events: %s\n", st.message().c_str());
      return 2;
    }
    protocol::Hello hello{.job_version = std::string("trainer-job ") + version_string()};
    if (request.is_ok() && !request->run_id.empty()) {
      hello.run_id = request->run_id;
      hello.attempt = request->attempt;
    }
    events.write(hello);
    // Started by trainerd: its events and log (the listening line among them) go over its API too,
    // so that trainerd on another machine, sharing no folder with this node, hears from it.
    if (request.is_ok()) posted_log = report_to_trainerd(events, *request);
  }
  Heartbeat heartbeat(events, std::chrono::seconds(args.events_path.empty() ? 0 : args.heartbeat_seconds));
  // A model or adapter staged in the artifact store (s3:// URIs): verified copies on this node.
  const InputFetchOptions fetch_options = request.is_ok() ? input_fetch_options(*request) : InputFetchOptions{};
  {
    std::vector<std::pair<std::string, std::string*>> inputs = {{"--model", &args.engine.model_dir}};
    for (auto& [name, dir] : args.adapters) inputs.push_back({"--adapter " + name, &dir});
    if (Status fetched = fetch_inputs(inputs, fetch_options); !fetched.is_ok()) {
      std::fprintf(stderr, "trainer-job serve: %s\n", fetched.describe().c_str());
      return 1;
    }
  }
  // An adapter attached at run time by its URI is fetched the same way before it loads.
  args.http.fetch_input = [fetch_options](const std::string& field, std::string* path) {
    return fetch_inputs({{field, path}}, fetch_options);
  };
  block_stop_signals();
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-answer is a failed write, not a death
  auto engine = engine::ServingEngine::start(args.engine);
  if (!engine.is_ok()) {
    std::fprintf(stderr, "trainer-job serve: %s\n", engine.status().describe().c_str());
    return 1;
  }
  for (const auto& [name, dir] : args.adapters) {
    Status st = (*engine)->attach_adapter(name, dir);
    if (!st.is_ok()) {
      std::fprintf(stderr, "trainer-job serve: --adapter %s=%s: %s\n", name.c_str(), dir.c_str(), st.message().c_str());
      return 1;
    }
  }
  auto http = bind_serve_http(**engine, args.http);
  if (!http.is_ok()) {
    std::fprintf(stderr, "trainer-job serve: %s\n", http.status().message().c_str());
    return 1;
  }
  ServeHttp* server = http->get();
  StopSignals signals([server](int) { server->stop(); });
  nlohmann::json models = nlohmann::json::array({(*engine)->base_name()});
  for (const auto& a : (*engine)->adapters()) models.push_back(a.name);
  nlohmann::json line = {{"event", "listening"}, {"host", server->host()}, {"port", server->port()}, {"models", models},
                         {"contextLimit", (*engine)->context_limit()}};
  // On every interface: the machine's name, for a reader (trainerd asks its backend for the node).
  if (is_wildcard(server->host())) line["hostname"] = this_hostname();
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  // Reporting to trainerd: the same line in the posted log, where trainerd reads it when the
  // node's stdout (the backend's log) is not on its disk.
  if (posted_log) std::fprintf(stderr, "%s\n", line.dump().c_str());
  server->run();
  return kExitCancelled;
}

}  // namespace trainer::job

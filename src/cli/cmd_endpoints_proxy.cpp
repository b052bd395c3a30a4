// `trainer endpoints proxy ENDPOINT [--port N]` (docs/serving.md, "Endpoints"): a local port on
// 127.0.0.1 that forwards only POST /v1/chat/completions to trainerd's
// /v1/endpoints/ID/v1/chat/completions, streamed answers passed through as they come; anything
// else gets a local 404 in OpenAI's error shape. Runs until SIGINT or SIGTERM (exit 0).
#include <signal.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "common/http_client.h"
#include "http/relay.h"
#include "http/server.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

// What a chat completion's body may weigh (the serving process's own limit).
constexpr size_t kMaxBodyBytes = 32 << 20;
// The longest a whole (not streamed) answer may take; a streamed one, until its client goes.
constexpr double kWholeSeconds = 600;
constexpr double kStreamSeconds = 6 * 3600;

// An error in OpenAI's shape: {"error": {message, type, param, code}}.
http::Response openai_error(int status, const std::string& code, const std::string& message) {
  http::Response r;
  r.status = status;
  const char* type = status >= 500 ? "server_error" : "invalid_request_error";
  r.body = json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}}.dump() + "\n";
  return r;
}

// Answers POST /v1/chat/completions by forwarding it to `target` (trainerd's route).
http::Handler forward_to(const std::string& target, const std::string& trainer_url, const std::string& token,
                         const std::string& ca_file) {
  return [target, trainer_url, token, ca_file](const http::Request& req) -> http::Outcome {
    HttpRequest call;
    call.url = target;
    call.ca_file = ca_file;
    if (!token.empty()) call.headers.emplace_back("Authorization", "Bearer " + token);
    call.body = req.body;
    auto unreachable = [trainer_url](const HttpResponse& failed) {
      return openai_error(502, "trainer_unreachable",
                          "the trainer service at " + trainer_url + " did not answer: " + failed.detail);
    };
    const json body = json::parse(req.body, nullptr, false);
    const bool stream = body.is_object() && body.value("stream", json(false)) == json(true);
    if (stream) {
      call.timeout_seconds = kStreamSeconds;
      return http::relay(std::move(call), unreachable);
    }
    call.timeout_seconds = kWholeSeconds;
    HttpResponse answer = http_call(call);
    if (answer.failure != HttpFailure::kNone) return unreachable(answer);
    http::Response r;
    r.status = answer.status;
    r.body = std::move(answer.body);
    return r;
  };
}

int endpoints_proxy(Context& ctx) {
  int code = kExitOk;
  const auto port = int_flag(ctx, "port", &code);
  if (code != kExitOk) return code;
  if (port && *port > 65535) return ctx.fail("--port must be at most 65535, got " + std::to_string(*port), kExitUsage);
  auto e = ctx.get("/v1/endpoints/" + seg(ctx.inv.positionals[0]));
  if (!e) return ctx.last_failure_code();
  const std::string id = str(*e, "endpointId");

  http::Router router;
  router.set_error_renderer([](int status, const Status& st) {
    if (status == 404 || status == 405) {
      return openai_error(404, "not_found", "this proxy forwards only POST /v1/chat/completions");
    }
    return openai_error(status, status == 503 ? "overloaded" : "invalid_request", st.message());
  });
  router.add("POST", "/v1/chat/completions", kMaxBodyBytes,
             forward_to(ctx.client.base_url() + "/v1/endpoints/" + seg(id) + "/v1/chat/completions",
                        ctx.client.base_url(), ctx.client.token(), ctx.client.ca_file()));

  // SIGINT and SIGTERM wait for sigwait below: blocked before the server's threads start, so
  // none of them takes the signal.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  http::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = static_cast<int>(port.value_or(0));
  auto server = http::serve(options, router);
  if (!server.is_ok()) return ctx.fail(server.status().message(), kExitError);
  const std::string address = "http://127.0.0.1:" + std::to_string((*server)->port()) + "/v1";
  if (ctx.text()) {
    out("Proxy for endpoint " + id + " listening on " + address + " (Ctrl-C to stop)\n");
  } else {
    ctx.print_json({{"endpointId", id}, {"address", address}});
  }
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  (*server)->stop();
  return kExitOk;
}

}  // namespace

Command endpoints_proxy_command() {
  Command proxy{"proxy", {}, "Forward a local port's chat completions to an endpoint through trainerd", "ENDPOINT",
                "Listens on 127.0.0.1 and forwards only POST /v1/chat/completions to the endpoint, through\n"
                "trainerd (streamed answers pass through as they come); anything else gets a 404. Point an\n"
                "OpenAI client at the printed address. Runs until Ctrl-C or SIGTERM (exit 0).",
                {{"port", 0, "N", "the local port (default 0: any free port)", ""}},
                {}, endpoints_proxy, 1, 1, {}};
  proxy.examples = {{"an OpenAI-compatible address for the endpoint on port 8000",
                     "trainer endpoints proxy 3f2a9c71 --port 8000"}};
  return proxy;
}

}  // namespace trainer::cli

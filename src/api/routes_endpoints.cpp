// Endpoints (docs/serving.md, "Endpoints"): create, list, get, delete, their models (detach,
// disable, enable), and the chat completions
// trainerd forwards to an endpoint's serving process.
#include <string>

#include "api/route_support.h"
#include "http/relay.h"

namespace trainer::api {

using http::Request;

void install_endpoint_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;
  router.add("POST", "/v1/endpoints", max,
             route_body(201, [&svc](const Request&, const json& body) { return svc.create_endpoint(body); }));
  router.add("GET", "/v1/endpoints", max, route_json(200, [&svc](const Request& req) {
               return svc.list_endpoints(req.query_value("phase"));
             }));
  // Before /v1/endpoints/{ref}: the first route that matches answers (endpoint ids are hex).
  router.add("GET", "/v1/endpoints/info", max, route_json(200, [&svc](const Request&) { return svc.endpoint_info(); }));
  router.add("GET", "/v1/endpoints/{ref}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_endpoint(req.params[0]); }));
  // One model of an endpoint: detach (the last one takes the endpoint down), disable, enable.
  router.add("DELETE", "/v1/endpoints/{ref}/models/{model}", max, route_json(200, [&svc](const Request& req) {
               return svc.detach_endpoint_model(req.params[0], req.params[1]);
             }));
  for (const bool enabled : {false, true}) {
    router.add("POST", std::string("/v1/endpoints/{ref}/models/{model}/") + (enabled ? "enable" : "disable"), max,
               route_json(200, [&svc, enabled](const Request& req) {
                 return svc.set_endpoint_model_enabled(req.params[0], req.params[1], enabled);
               }));
  }
  router.add("DELETE", "/v1/endpoints/{ref}", max,
             route_json(202, [&svc](const Request& req) { return svc.delete_endpoint(req.params[0]); }));
  // The serving process's answer passes through as it came: OpenAI's shapes, its errors included;
  // for `stream: true` its server-sent events as they come.
  router.add("POST", "/v1/endpoints/{ref}/v1/chat/completions", max, [&svc](const Request& req) -> http::Outcome {
    auto answer = svc.endpoint_chat(req.params[0], req.body);
    if (!answer.is_ok()) return error_response(answer.status());
    if (answer->stream_call) {
      const std::string ref = req.params[0];
      return http::relay(
          std::move(*answer->stream_call),
          [ref](const HttpResponse& failed) {
            return error_response(unavailable("endpoint " + ref + "'s serving process did not answer: " + failed.detail));
          },
          std::move(answer->stream_done));
    }
    http::Response r;
    r.status = answer->status;
    r.body = answer->body;
    return r;
  });
}

}  // namespace trainer::api

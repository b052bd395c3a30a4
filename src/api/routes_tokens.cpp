// API tokens (docs/security.md): create (the secret answered once), list, revoke. Admin only, on
// every workload (the role table, authorization.cpp).
#include <string>

#include "api/route_support.h"

namespace trainer::api {

using http::Request;

void install_token_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;
  router.add("POST", "/v1/tokens", max,
             route_body(201, [&svc](const Request&, const json& body) { return svc.create_token(body); }));
  router.add("GET", "/v1/tokens", max, route_json(200, [&svc](const Request&) { return svc.list_tokens(); }));
  router.add("POST", "/v1/tokens/{ref}/revoke", max,
             route_json(200, [&svc](const Request& req) { return svc.revoke_token(req.params[0]); }));
}

}  // namespace trainer::api

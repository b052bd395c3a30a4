// The audit log (docs/security.md, "Audit log"): GET /v1/audit answers its entries as JSON lines,
// oldest first. Admin only, on every workload (the role table, authorization.cpp); the guard
// (request_guard.cpp) records the entries.
#include <string>

#include "api/route_support.h"

namespace trainer::api {

using http::Outcome;
using http::Request;
using http::Response;

namespace {

// The entries a listing answers when ?limit= is absent.
constexpr int64_t kDefaultListed = 100;

}  // namespace

void install_audit_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  router.add("GET", "/v1/audit", limits.max_request_bytes, [&svc](const Request& req) -> Outcome {
    auto limit = int_param(req, "limit", kDefaultListed);
    if (!limit.is_ok()) return error_response(limit.status());
    auto entries = svc.list_audit(req.query_value("since"), req.query_value("token"),
                                  req.query_value("workload"), *limit);
    if (!entries.is_ok()) return error_response(entries.status());
    Response out;
    out.content_type = "application/x-ndjson";
    for (const json& e : *entries) out.body += e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    return out;
  });
}

}  // namespace trainer::api

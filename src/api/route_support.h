// What the route files of src/api share: reading a request (JSON body, query parameters), the
// JSON answer, the route_json() adapter, and one install function per resource. Internal to
// src/api; install_routes() (api.h) is the public entry.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "api/api.h"
#include "common/status.h"

namespace trainer::api {

using json = nlohmann::json;

// A JSON answer: `body` with `status`, as one line ending in "\n" (invalid UTF-8 replaced).
http::Response json_response(int status, const json& body);

// The request's body as a JSON object (nested at most kMaxJsonDepth levels); a 400 naming
// "body" when it is empty, not JSON or not an object. The server already refused bodies over
// the route's limit while reading.
Result<json> body_json(const http::Request& req);
// body_json(), but an empty body is the empty object (the holds: pin, unpin).
Result<json> optional_body_json(const http::Request& req);

// The value of the request's header `name` (compared in any case); "" when absent.
std::string header_value(const http::Request& req, const char* name);
// The token of the request's `Authorization: Bearer TOKEN` header; "" when there is none.
std::string bearer_token(const http::Request& req);
// A job's credentials as its callbacks send them: `X-Trainer-Job: JOBID` and the bearer token
// (docs/job-protocol.md, "Snapshots").
service::JobCredentials job_credentials(const http::Request& req);

// The query parameter `name` as an integer (at most 13 characters); `fallback` when absent.
Result<int64_t> int_param(const http::Request& req, const std::string& name, int64_t fallback);
// The query parameter `name` as a boolean: true, 1 or empty; false or 0; false when absent.
Result<bool> bool_param(const http::Request& req, const std::string& name);

// ?limit=N&offset=M: the page a list asks for (`default_limit` and 0 when absent).
struct Page {
  int64_t limit = 0;
  int64_t offset = 0;
};
Result<Page> page_params(const http::Request& req, int64_t default_limit);

// The adapter from a handler's value to its HTTP answer. `handler(const Request&)` returns
//   Result<json>:                    answered with `status`;
//   Result<std::pair<json, bool>>:   a create-or-existing answer: `status` when the bool says it
//                                    was created (or started), 200 when it already existed;
// and a failed Result is answered with its Status as the JSON error body (error_response()), with
// the HTTP status `error_status(status)` gives when there is one and it gives one (not 0).
using ErrorStatus = int (*)(const Status&);
template <typename F>
http::Handler route_json(int status, F handler, ErrorStatus error_status = nullptr) {
  return [status, handler = std::move(handler), error_status](const http::Request& req) -> http::Outcome {
    auto r = handler(req);
    if (!r.is_ok()) return error_response(r.status(), error_status ? error_status(r.status()) : 0);
    using Value = std::decay_t<decltype(*r)>;
    if constexpr (std::is_same_v<Value, std::pair<json, bool>>) {
      return json_response(r->second ? status : 200, r->first);
    } else {
      return json_response(status, *r);
    }
  };
}

// route_json() for a handler of the request's JSON body (body_json(), whose error answers
// first): `handler(const Request&, const json& body)` returns what route_json() takes.
template <typename F>
http::Handler route_body(int status, F handler, ErrorStatus error_status = nullptr) {
  using R = std::invoke_result_t<const F&, const http::Request&, const json&>;
  return route_json(
      status,
      [handler = std::move(handler)](const http::Request& req) -> R {
        auto body = body_json(req);
        if (!body.is_ok()) return body.status();
        return handler(req, *body);
      },
      error_status);
}

// The routes of one resource each (routes_*.cpp); install_routes() calls them all.
void install_model_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_data_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_workload_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_run_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_pipeline_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_lineage_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_snapshot_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_evaluation_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_endpoint_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_job_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_token_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
void install_audit_routes(http::Router& router, service::Service& svc, const service::Limits& limits);
// The web dashboard's pages and files (routes_ui.cpp); they answer from the binary, not the service.
void install_ui_routes(http::Router& router, const service::Limits& limits);

}  // namespace trainer::api

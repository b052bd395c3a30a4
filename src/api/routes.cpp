// install_routes(): the gate, the info and telemetry routes, and every resource's routes
// (routes_*.cpp); and the helpers of route_support.h. Each handler parses and checks the
// request, calls the service, and writes its result or its Status as the JSON error body.
// Handlers never throw.
#include <charconv>
#include <string>
#include <strings.h>

#include "api/request_guard.h"
#include "api/route_support.h"
#include "common/json_parse.h"

namespace trainer::api {

using service::Service;
using http::Outcome;
using http::Request;
using http::Response;

Response json_response(int status, const json& body) {
  Response r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return r;
}

// Parses the body as a JSON object (nested at most kMaxJsonDepth levels). The server already
// refused bodies over the route's limit while reading.
Result<json> body_json(const Request& req) {
  if (req.body.empty()) return invalid_field("body", "empty; send a JSON object");
  static const std::string kWhat = "body";
  auto doc = parse_json(req.body, kWhat);
  if (!doc.is_ok()) {
    // parse_json names what it parsed first ("body: ..."); the field carries it here.
    std::string message = doc.status().message();
    if (message.rfind(kWhat + ": ", 0) == 0) message = message.substr(kWhat.size() + 2);
    return invalid_field("body", message);
  }
  if (!doc->is_object()) return invalid_field("body", "must be a JSON object, got " + std::string(doc->type_name()));
  return std::move(*doc);
}

Result<int64_t> int_param(const Request& req, const std::string& name, int64_t fallback) {
  if (!req.has_query(name)) return fallback;
  std::string v = req.query_value(name);
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || v.size() > 13 || ec != std::errc() || end != v.data() + v.size()) {
    return invalid_field(name, "must be an integer, got '" + v + "'");
  }
  return out;
}

Result<bool> bool_param(const Request& req, const std::string& name) {
  if (!req.has_query(name)) return false;
  std::string v = req.query_value(name);
  if (v == "true" || v == "1" || v.empty()) return true;
  if (v == "false" || v == "0") return false;
  return invalid_field(name, "must be true or false, got '" + v + "'");
}

Result<Page> page_params(const Request& req, int64_t default_limit) {
  Page page;
  TRAINER_ASSIGN_OR_RETURN(page.limit, int_param(req, "limit", default_limit));
  TRAINER_ASSIGN_OR_RETURN(page.offset, int_param(req, "offset", 0));
  return page;
}

Result<json> optional_body_json(const Request& req) {
  if (req.body.empty()) return json::object();
  return body_json(req);
}

std::string header_value(const Request& req, const char* name) {
  for (const auto& [header, value] : req.headers) {
    if (strcasecmp(header.c_str(), name) == 0) return value;
  }
  return "";
}

std::string bearer_token(const Request& req) {
  const std::string value = header_value(req, "Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (value.size() > kBearer.size() && strncasecmp(value.c_str(), kBearer.data(), kBearer.size()) == 0) {
    return value.substr(kBearer.size());
  }
  return "";
}

service::JobCredentials job_credentials(const Request& req) {
  return {header_value(req, service::kJobIdHeader), bearer_token(req)};
}

Response error_response(const Status& st, int http_status_override) {
  json err = {{"code", status_code_name(st.code())}, {"message", st.describe()}};
  if (!st.field().empty()) err["field"] = st.field();
  return json_response(http_status_override ? http_status_override : http_status(st.code()), {{"error", err}});
}


void install_routes(http::Router& router, Service& svc, const service::Limits& limits) {
  const size_t max_request = limits.max_request_bytes;

  router.set_error_renderer([](int status, const Status& st) { return error_response(st, status); });
  router.set_gate([&svc](const Request& req) -> std::optional<Response> {
    // Telemetry passes while starting: a job that outlived a restart keeps pushing its metrics.
    if (svc.ready() || req.path == "/v1/info" || req.path == "/metrics" || req.path == "/otlp/v1/metrics") {
      return std::nullopt;
    }
    return error_response(unavailable("trainerd is starting; not ready yet (see GET /v1/info)"));
  });

  // ---- info and telemetry
  router.add("GET", "/v1/info", max_request, [&svc](const Request&) -> Outcome {
    return json_response(svc.ready() ? 200 : 503, svc.info());
  });
  router.add("GET", "/metrics", max_request, [&svc](const Request&) -> Outcome {
    Response r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = svc.metrics_text();
    return r;
  });
  // A job's OTLP/HTTP JSON metrics (TRAINER_OTLP_ENDPOINT + /v1/metrics), served on /metrics.
  router.add("POST", "/otlp/v1/metrics", service::kMaxOtlpBodyBytes, [&svc](const Request& req) -> Outcome {
    if (req.body.empty()) return error_response(invalid_field("body", "empty; send an ExportMetricsServiceRequest"));
    // A malformed body is a 400 naming its field (body.resourceMetrics[0]...); a push past the
    // relay's series bound is a 429.
    Status st = svc.ingest_job_metrics(req.body, header_value(req, service::kJobIdHeader), bearer_token(req));
    if (st.code() == StatusCode::kUnauthenticated || st.code() == StatusCode::kPermissionDenied) {
      return error_response(st.field() == service::kJobIdHeader ? st : st.with_field("body"));
    }
    if (!st.is_ok()) return error_response(st.with_field("body"));
    return json_response(200, json::object());  // an ExportMetricsServiceResponse with nothing rejected
  });
  router.add("GET", "/v1/capacity", max_request,
             route_json(200, [&svc](const Request& req) { return svc.capacity(req.query_value("workload")); }));
  router.add("GET", "/v1/capacity/device-hours", max_request, route_json(200, [&svc](const Request& req) {
               return svc.device_hours(req.query_value("from"), req.query_value("to"), req.query_value("by"));
             }));
  router.add("POST", "/v1/capacity/scan", max_request,
             route_json(200, [&svc](const Request&) { return svc.scan_capacity(); }));

  // ---- the resources, in the order of docs/api.md
  install_model_routes(router, svc, limits);
  install_data_routes(router, svc, limits);
  install_workload_routes(router, svc, limits);
  install_run_routes(router, svc, limits);
  install_snapshot_routes(router, svc, limits);
  install_evaluation_routes(router, svc, limits);
  install_pipeline_routes(router, svc, limits);
  install_endpoint_routes(router, svc, limits);
  install_lineage_routes(router, svc, limits);
  install_job_routes(router, svc, limits);
  install_token_routes(router, svc, limits);
  install_audit_routes(router, svc, limits);
  install_ui_routes(router, limits);
  // Every route above is checked against the role table (docs/security.md); one without an entry
  // is refused (and fails tests/unit/api/authorization_test.cpp). Writes are audited, and each
  // token's requests limited (request_guard.h).
  install_request_guard(router, svc, limits);
}

}  // namespace trainer::api

// A job's reports (docs/job-protocol.md, "Reporting to trainerd"): a job attempt asks leave to
// train, then posts its events and its log lines, authenticated by its attempt's token (Authorization: Bearer TOKEN). An
// unknown attempt is a 404, another token a 403; neither changes anything.
#include <string>

#include "api/route_support.h"

namespace trainer::api {
namespace {

using http::Request;

// route_body() for a job's post: the attempt authenticated first.
template <typename F>
http::Handler job_route(service::Service& svc, F handler) {
  http::Handler inner = route_body(200, std::move(handler));
  return [&svc, inner = std::move(inner)](const Request& req) -> http::Outcome {
    Status st = svc.authenticate_job(req.params[0], bearer_token(req));
    if (!st.is_ok()) return error_response(st, st.code() == StatusCode::kInvalidArgument ? 403 : 0);
    return inner(req);
  };
}

}  // namespace

void install_job_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;
  router.add("POST", "/v1/jobs/{id}/events", max, job_route(svc, [&svc](const Request& req, const json& body) {
               return svc.post_job_events(req.params[0], body);
             }));
  router.add("POST", "/v1/jobs/{id}/logs", max, job_route(svc, [&svc](const Request& req, const json& body) {
               return svc.post_job_logs(req.params[0], body);
             }));
  // A run's job asks leave to train before it writes anything (docs/job-protocol.md, "Leave to train").
  router.add("POST", "/v1/jobs/{id}/start", max, job_route(svc, [&svc](const Request& req, const json& body) {
               return svc.confirm_job_start(req.params[0], body);
             }));
}

}  // namespace trainer::api

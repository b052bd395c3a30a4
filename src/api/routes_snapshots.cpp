// The snapshot catalog: the job's callbacks (reserve, commit: sent with the attempt's credentials,
// X-Trainer-Job and Authorization: Bearer, and refused with 401 or 403 unless they are the run's
// current attempt's; service::job_refusal_http_status()), the users' reads, registration as a
// model, and the holds (pin, unpin, release).
#include <string>

#include "api/route_support.h"

namespace trainer::api {

using http::Request;

void install_snapshot_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;

  router.add("POST", "/v1/runs/{ref}/snapshots", max, route_body(201, [&svc](const Request& req, const json& body) {
               return svc.reserve_snapshot(job_credentials(req), req.params[0], body);
             }, service::job_refusal_http_status));
  router.add("GET", "/v1/runs/{ref}/snapshots", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               TRAINER_ASSIGN_OR_RETURN(Page page, page_params(req, 50));
               return svc.list_run_snapshots(req.params[0], page.limit, page.offset);
             }));
  router.add("POST", "/v1/snapshots/{ref}/commit", max, route_body(200, [&svc](const Request& req, const json& body) {
               return svc.commit_snapshot(job_credentials(req), req.params[0], body);
             }, service::job_refusal_http_status));
  router.add("GET", "/v1/snapshots/{ref}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_snapshot(req.params[0]); }));

  // Registration as a trained model: 202 when it starts, 200 when it was registered before.
  router.add("POST", "/v1/snapshots/{ref}/register", max,
             route_json(202, [&svc](const Request& req) { return svc.register_snapshot(req.params[0]); }));
  router.add("GET", "/v1/snapshots/{ref}/candidate", max,
             route_json(200, [&svc](const Request& req) { return svc.snapshot_candidate(req.params[0]); }));

  // Holds: an empty body pins or unpins both kinds.
  router.add("POST", "/v1/snapshots/{ref}/pin", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               TRAINER_ASSIGN_OR_RETURN(json body, optional_body_json(req));
               return svc.pin_snapshot(req.params[0], body);
             }));
  router.add("POST", "/v1/snapshots/{ref}/unpin", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               TRAINER_ASSIGN_OR_RETURN(json body, optional_body_json(req));
               return svc.unpin_snapshot(req.params[0], body);
             }));
  router.add("POST", "/v1/snapshots/{ref}/release", max,
             route_json(200, [&svc](const Request& req) { return svc.release_snapshot(req.params[0]); }));
}

}  // namespace trainer::api

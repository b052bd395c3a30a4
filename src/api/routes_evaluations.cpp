// Evaluations (a model scored on a dataset) and comparisons (docs/comparisons.md).
#include <string>

#include "api/route_support.h"

namespace trainer::api {

using http::Request;

void install_evaluation_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;

  // ---- evaluations
  router.add("POST", "/v1/evaluations", max,
             route_body(201, [&svc](const Request&, const json& body) { return svc.start_evaluation(body); }));
  router.add("GET", "/v1/evaluations", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               service::EvaluationListQuery q;
               q.phase = req.query_value("phase");
               q.workload = req.query_value("workload");
               q.model = req.query_value("model");
               TRAINER_ASSIGN_OR_RETURN(q.limit, int_param(req, "limit", 50));
               return svc.list_evaluations(q);
             }));
  router.add("GET", "/v1/evaluations/{ref}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_evaluation(req.params[0]); }));
  router.add("GET", "/v1/evaluations/{ref}/report", max,
             route_json(200, [&svc](const Request& req) { return svc.evaluation_report(req.params[0]); }));
  router.add("GET", "/v1/evaluations/{ref}/rows", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               TRAINER_ASSIGN_OR_RETURN(Page page, page_params(req, 100));
               return svc.evaluation_rows(req.params[0], page.limit, page.offset);
             }));
  router.add("POST", "/v1/evaluations/{ref}/cancel", max,
             route_json(202, [&svc](const Request& req) { return svc.cancel_evaluation(req.params[0]); }));
  router.add("PATCH", "/v1/evaluations/{ref}", max, route_body(200, [&svc](const Request& req, const json& body) {
               return svc.annotate_evaluation(req.params[0], body);
             }));

  // ---- comparisons
  router.add("POST", "/v1/comparisons", max,
             route_body(201, [&svc](const Request&, const json& body) { return svc.create_comparison(body); }));
  router.add("GET", "/v1/comparisons", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               service::ComparisonListQuery q;
               q.source = req.query_value("source");
               TRAINER_ASSIGN_OR_RETURN(Page page, page_params(req, service::kMaxComparisonsPage));
               q.limit = page.limit;
               q.offset = page.offset;
               return svc.list_comparisons(q);
             }));
  router.add("GET", "/v1/comparisons/{ref}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_comparison(req.params[0]); }));
}

}  // namespace trainer::api

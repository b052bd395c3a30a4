// Workloads: the named groups of runs, their evaluation settings, history, scores and refs.
#include <string>

#include "api/route_support.h"

namespace trainer::api {

using http::Request;

void install_workload_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;

  router.add("POST", "/v1/workloads", max,
             route_body(201, [&svc](const Request&, const json& body) { return svc.create_workload(body); }));
  router.add("GET", "/v1/workloads", max, route_json(200, [&svc](const Request& req) {
               return svc.list_workloads(req.has_query("archived") ? req.query_value("archived") : "");
             }));
  router.add("POST", "/v1/workloads/{ref}/archive", max,
             route_json(200, [&svc](const Request& req) { return svc.archive_workload(req.params[0]); }));
  router.add("POST", "/v1/workloads/{ref}/unarchive", max,
             route_json(200, [&svc](const Request& req) { return svc.unarchive_workload(req.params[0]); }));
  // One workload, with `storage`: the bytes its uploads hold against its storage quota.
  router.add("GET", "/v1/workloads/{ref}", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               TRAINER_ASSIGN_OR_RETURN(json doc, svc.get_workload(req.params[0]));
               TRAINER_ASSIGN_OR_RETURN(doc["storage"], svc.workload_storage(doc.value("id", std::string())));
               return doc;
             }));
  router.add("PATCH", "/v1/workloads/{ref}", max, route_body(200, [&svc](const Request& req, const json& body) {
               return svc.update_workload(req.params[0], body);
             }));
  router.add("PUT", "/v1/workloads/{ref}/evaluation", max, route_body(200, [&svc](const Request& req, const json& body) {
               return svc.set_evaluation(req.params[0], body);
             }));
  router.add("GET", "/v1/workloads/{ref}/history", max,
             route_json(200, [&svc](const Request& req) { return svc.workload_history(req.params[0]); }));
  router.add("GET", "/v1/workloads/{ref}/scores", max, route_json(200, [&svc](const Request& req) {
               service::ScoreQuery q;
               if (req.has_query("dataset")) q.dataset = req.query_value("dataset");
               if (req.has_query("grader")) q.grader = req.query_value("grader");
               return svc.workload_scores(req.params[0], q);
             }));
  router.add("GET", "/v1/workloads/{ref}/refs/{which}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_ref(req.params[0], req.params[1]); }));
  router.add("PUT", "/v1/workloads/{ref}/refs/{which}", max, route_body(200, [&svc](const Request& req, const json& body) {
               return svc.set_ref(req.params[0], req.params[1], body);
             }));
}

}  // namespace trainer::api

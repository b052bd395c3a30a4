// Data: datasets (registered rows, measured under a base model), sessions and curations
// (docs/curations.md), distillations (docs/distillations.md) and scoring bundles (docs/graders.md, "Registered bundles").
#include <optional>
#include <string>

#include "api/route_support.h"

namespace trainer::api {
namespace {

using http::Request;

// POST /v1/datasets: {name?, rows, workload?} registered; created (201) or already registered
// (200). New rows count against the workload's storage quota (none named: the shared catalog's).
Result<std::pair<json, bool>> register_dataset(service::Service& svc, const Request& req) {
  TRAINER_ASSIGN_OR_RETURN(json body, body_json(req));
  for (const auto& [k, v] : body.items()) {
    if (k != "name" && k != "rows" && k != "workload") return invalid_field(k, "unknown field");
  }
  std::optional<std::string> workload;
  if (body.contains("workload") && !body["workload"].is_null()) {
    if (!body["workload"].is_string()) return invalid_field("workload", "must be a workload's name or id");
    workload = body["workload"].get<std::string>();
  }
  if (!body.contains("rows") || !body["rows"].is_string()) {
    return invalid_field("rows", "required: the dataset's chat JSONL as one string");
  }
  std::optional<std::string> name;
  if (body.contains("name") && !body["name"].is_null()) {
    if (!body["name"].is_string()) return invalid_field("name", "must be a string");
    name = body["name"].get<std::string>();
  }
  return svc.register_dataset(name, body["rows"].get<std::string>(), workload);
}

// POST /v1/datasets/{ref}/measure: {baseModel, maxSeqLength?}.
Result<json> measure_dataset(service::Service& svc, const Request& req) {
  TRAINER_ASSIGN_OR_RETURN(json body, body_json(req));
  for (const auto& [k, v] : body.items()) {
    if (k != "baseModel" && k != "maxSeqLength") return invalid_field(k, "unknown field");
  }
  if (!body.contains("baseModel") || !body["baseModel"].is_string()) {
    return invalid_field("baseModel", "required: the base model whose tokenizer measures");
  }
  std::optional<int> max_len;
  if (body.contains("maxSeqLength")) {
    const json& v = body["maxSeqLength"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1048576) {
      return invalid_field("maxSeqLength", "must be an integer between 1 and 1048576");
    }
    max_len = static_cast<int>(v.get<int64_t>());
  }
  return svc.measure_dataset(req.params[0], body["baseModel"].get<std::string>(), max_len);
}

}  // namespace

void install_data_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;
  const size_t max_upload = limits.max_dataset_bytes;

  // ---- datasets
  router.add("POST", "/v1/datasets", max_upload,
             route_json(201, [&svc](const Request& req) { return register_dataset(svc, req); }));
  router.add("GET", "/v1/datasets", max, route_json(200, [&svc](const Request&) { return svc.list_datasets(); }));
  router.add("POST", "/v1/datasets/{ref}/measure", max,
             route_json(200, [&svc](const Request& req) { return measure_dataset(svc, req); }));
  // Background analyses: the measurement as a task (service/dataset_analyses.h).
  router.add("POST", "/v1/datasets/{ref}/analyses", max, route_body(201, [&svc](const Request& req, const json& body) {
               return svc.analyze_dataset(req.params[0], body);
             }));
  router.add("GET", "/v1/datasets/{ref}/analyses", max,
             route_json(200, [&svc](const Request& req) { return svc.list_dataset_analyses(req.params[0]); }));
  router.add("GET", "/v1/datasets/{ref}/analyses/{id}", max, route_json(200, [&svc](const Request& req) {
               return svc.get_dataset_analysis(req.params[0], req.params[1]);
             }));
  router.add("GET", "/v1/datasets/{ref}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_dataset(req.params[0]); }));
  // A name moved to other registered rows (body {"dataset": REF}), without an upload.
  router.add("PUT", "/v1/dataset-names/{name}", max, route_body(200, [&svc](const Request& req, const json& body) {
               return svc.name_dataset(req.params[0], body);
             }));

  // ---- sessions and curations (docs/curations.md)
  router.add("POST", "/v1/sessions", max_upload,
             route_body(201, [&svc](const Request&, const json& body) { return svc.create_session(body); }));
  router.add("GET", "/v1/sessions/{hash}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_session(req.params[0]); }));
  router.add("POST", "/v1/curations", max,
             route_body(201, [&svc](const Request&, const json& body) { return svc.apply_curation(body); }));
  router.add("GET", "/v1/curations", max, route_json(200, [&svc](const Request&) { return svc.list_curations(); }));
  router.add("GET", "/v1/curations/{id}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_curation(req.params[0]); }));

  // ---- distillations (docs/distillations.md)
  router.add("POST", "/v1/distillations", max,
             route_body(201, [&svc](const Request&, const json& body) { return svc.create_distillation(body); }));
  router.add("GET", "/v1/distillations", max,
             route_json(200, [&svc](const Request&) { return svc.list_distillations(); }));
  router.add("GET", "/v1/distillations/{id}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_distillation(req.params[0]); }));
  router.add("GET", "/v1/distillations/{id}/rejections", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               TRAINER_ASSIGN_OR_RETURN(int64_t limit, int_param(req, "limit", 0));
               return svc.distillation_rejections(req.params[0], limit);
             }));
  router.add("POST", "/v1/distillations/{id}/pause", max,
             route_json(200, [&svc](const Request& req) { return svc.pause_distillation(req.params[0]); }));
  router.add("POST", "/v1/distillations/{id}/resume", max,
             route_json(200, [&svc](const Request& req) { return svc.resume_distillation(req.params[0]); }));
  router.add("POST", "/v1/distillations/{id}/cancel", max,
             route_json(200, [&svc](const Request& req) { return svc.cancel_distillation(req.params[0]); }));

  // ---- scoring bundles
  router.add("POST", "/v1/bundles", max_upload,
             route_body(201, [&svc](const Request&, const json& body) { return svc.register_bundle(body); }));
  router.add("GET", "/v1/bundles", max, route_json(200, [&svc](const Request&) { return svc.list_bundles(); }));
  router.add("GET", "/v1/bundles/{ref}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_bundle(req.params[0]); }));
}

}  // namespace trainer::api

// Models: the base models a deployment allows (selection), and the trained-model registry.
#include <optional>
#include <string>

#include "api/route_support.h"

namespace trainer::api {

using http::Request;

void install_model_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;

  // ---- base models
  router.add("GET", "/v1/base-models", max, route_json(200, [&svc](const Request& req) -> Result<json> {
    TRAINER_ASSIGN_OR_RETURN(bool all, bool_param(req, "all"));
    return svc.list_base_models(all);
  }));
  router.add("POST", "/v1/base-models/select", max, route_json(202, [&svc](const Request& req) -> Result<json> {
    TRAINER_ASSIGN_OR_RETURN(json body, body_json(req));
    for (const auto& [k, v] : body.items()) {
      if (k != "name") return invalid_field(k, "unknown field");
    }
    if (!body.contains("name") || !body["name"].is_string()) {
      return invalid_field("name", "required: the base model to select");
    }
    return svc.select_base_model(body["name"].get<std::string>());
  }));
  // Not under /v1/base-models/: every path there names a model (names hold slashes).
  router.add("GET", "/v1/base-model-envelopes", max,
             route_json(200, [&svc](const Request&) { return svc.base_model_envelopes(); }));
  router.add("GET", "/v1/base-models/{name...}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_base_model(req.params[0]); }));

  // ---- the model registry
  router.add("POST", "/v1/trained-models", max,
             route_body(201, [&svc](const Request&, const json& body) { return svc.register_trained_model(body); }));
  router.add("GET", "/v1/trained-models", max, route_json(200, [&svc](const Request& req) {
    service::TrainedModelQuery q;
    q.workload = req.query_value("workload");
    q.base_model = req.query_value("baseModel");
    return svc.list_trained_models(q);
  }));
  router.add("GET", "/v1/trained-models/{ref}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_trained_model(req.params[0]); }));
  // One file of an adapter's PEFT folder, as the registry holds it (`trained-models export`).
  router.add("GET", "/v1/trained-models/{ref}/files/{file}", max, [&svc](const Request& req) -> http::Outcome {
    auto bytes = svc.trained_model_file(req.params[0], req.params[1]);
    if (!bytes.is_ok()) return error_response(bytes.status());
    http::Response out;
    out.content_type = "application/octet-stream";
    out.body = std::move(*bytes);
    return out;
  });
  // The adapter merged into its base model, a Hugging Face model folder (`trained-models export
  // --merged`): its listing (made on the first call; a GET because it changes nothing a client
  // sees: the same model always merges to the same files), then each file.
  router.add("GET", "/v1/trained-models/{ref}/merged", max,
             route_json(200, [&svc](const Request& req) { return svc.merged_trained_model(req.params[0]); }));
  router.add("GET", "/v1/trained-models/{ref}/merged/{file}", max, [&svc](const Request& req) -> http::Outcome {
    auto bytes = svc.merged_trained_model_file(req.params[0], req.params[1]);
    if (!bytes.is_ok()) return error_response(bytes.status());
    http::Response out;
    out.content_type = "application/octet-stream";
    out.body = std::move(*bytes);
    return out;
  });
}

}  // namespace trainer::api

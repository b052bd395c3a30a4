// The routes of docs/api.md. Each handler parses and checks the request, calls the service,
// and writes its result or its Status as the JSON error body. Handlers never throw.
#include <charconv>
#include <string>

#include "api/api.h"
#include "common/json_parse.h"

namespace trainer::api {
namespace {

using json = nlohmann::json;
using service::Service;
using http::Outcome;
using http::Request;
using http::Response;

constexpr int64_t kMaxWaitSeconds = 60;  // the events long poll's longest wait

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

// Answers `r`'s value with `status`, or its error.
template <typename T>
Response reply(const Result<T>& r, int status) {
  if (!r.is_ok()) return error_response(r.status());
  return json_response(status, *r);
}

}  // namespace

Response error_response(const Status& st, int http_status_override) {
  json err = {{"code", status_code_name(st.code())}, {"message", st.describe()}};
  if (!st.field().empty()) err["field"] = st.field();
  return json_response(http_status_override ? http_status_override : http_status(st.code()), {{"error", err}});
}

void install_routes(http::Router& router, Service& svc, const service::Limits& limits) {
  const size_t max_request = limits.max_request_bytes;
  const size_t max_dataset = limits.max_dataset_bytes;

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
    Status st = svc.ingest_job_metrics(req.body);
    if (!st.is_ok()) return error_response(st.with_field("body"));
    return json_response(200, json::object());  // an ExportMetricsServiceResponse with nothing rejected
  });
  router.add("GET", "/v1/capacity", max_request, [&svc](const Request&) -> Outcome { return reply(svc.capacity(), 200); });

  // ---- base models
  router.add("GET", "/v1/base-models", max_request, [&svc](const Request& req) -> Outcome {
    auto all = bool_param(req, "all");
    if (!all.is_ok()) return error_response(all.status());
    return reply(svc.list_base_models(*all), 200);
  });
  router.add("POST", "/v1/base-models/select", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    for (const auto& [k, v] : body->items()) {
      if (k != "name") return error_response(invalid_field(k, "unknown field"));
    }
    if (!body->contains("name") || !(*body)["name"].is_string()) {
      return error_response(invalid_field("name", "required: the base model to select"));
    }
    return reply(svc.select_base_model((*body)["name"].get<std::string>()), 202);
  });
  router.add("GET", "/v1/base-models/{name...}", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.get_base_model(req.params[0]), 200); });

  // ---- datasets
  router.add("POST", "/v1/datasets", max_dataset, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    for (const auto& [k, v] : body->items()) {
      if (k != "name" && k != "rows") return error_response(invalid_field(k, "unknown field"));
    }
    if (!body->contains("rows") || !(*body)["rows"].is_string()) {
      return error_response(invalid_field("rows", "required: the dataset's chat JSONL as one string"));
    }
    std::optional<std::string> name;
    if (body->contains("name") && !(*body)["name"].is_null()) {
      if (!(*body)["name"].is_string()) return error_response(invalid_field("name", "must be a string"));
      name = (*body)["name"].get<std::string>();
    }
    auto r = svc.register_dataset(name, (*body)["rows"].get<std::string>());
    if (!r.is_ok()) return error_response(r.status());
    return json_response(r->second ? 201 : 200, r->first);
  });
  router.add("GET", "/v1/datasets", max_request,
             [&svc](const Request&) -> Outcome { return reply(svc.list_datasets(), 200); });
  router.add("POST", "/v1/datasets/{ref}/measure", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    for (const auto& [k, v] : body->items()) {
      if (k != "baseModel" && k != "maxSeqLength") return error_response(invalid_field(k, "unknown field"));
    }
    if (!body->contains("baseModel") || !(*body)["baseModel"].is_string()) {
      return error_response(invalid_field("baseModel", "required: the base model whose tokenizer measures"));
    }
    std::optional<int> max_len;
    if (body->contains("maxSeqLength")) {
      const json& v = (*body)["maxSeqLength"];
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1048576) {
        return error_response(invalid_field("maxSeqLength", "must be an integer between 1 and 1048576"));
      }
      max_len = static_cast<int>(v.get<int64_t>());
    }
    return reply(svc.measure_dataset(req.params[0], (*body)["baseModel"].get<std::string>(), max_len), 200);
  });
  router.add("GET", "/v1/datasets/{ref}", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.get_dataset(req.params[0]), 200); });

  // ---- scoring bundles (docs/graders.md, "Registered bundles")
  router.add("POST", "/v1/bundles", max_dataset, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    auto r = svc.register_bundle(*body);
    if (!r.is_ok()) return error_response(r.status());
    return json_response(r->second ? 201 : 200, r->first);
  });
  router.add("GET", "/v1/bundles", max_request,
             [&svc](const Request&) -> Outcome { return reply(svc.list_bundles(), 200); });
  router.add("GET", "/v1/bundles/{ref}", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.get_bundle(req.params[0]), 200); });

  // ---- workloads
  router.add("POST", "/v1/workloads", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.create_workload(*body), 201);
  });
  router.add("GET", "/v1/workloads", max_request,
             [&svc](const Request&) -> Outcome { return reply(svc.list_workloads(), 200); });
  router.add("GET", "/v1/workloads/{ref}", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.get_workload(req.params[0]), 200); });
  router.add("PATCH", "/v1/workloads/{ref}", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.update_workload(req.params[0], *body), 200);
  });
  router.add("PUT", "/v1/workloads/{ref}/evaluation", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.set_evaluation(req.params[0], *body), 200);
  });
  router.add("GET", "/v1/workloads/{ref}/history", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.workload_history(req.params[0]), 200); });
  router.add("GET", "/v1/workloads/{ref}/scores", max_request, [&svc](const Request& req) -> Outcome {
    service::ScoreQuery q;
    if (req.has_query("dataset")) q.dataset = req.query_value("dataset");
    if (req.has_query("grader")) q.grader = req.query_value("grader");
    return reply(svc.workload_scores(req.params[0], q), 200);
  });
  router.add("GET", "/v1/workloads/{ref}/refs/{which}", max_request, [&svc](const Request& req) -> Outcome {
    return reply(svc.get_ref(req.params[0], req.params[1]), 200);
  });
  router.add("PUT", "/v1/workloads/{ref}/refs/{which}", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.set_ref(req.params[0], req.params[1], *body), 200);
  });

  // ---- runs
  router.add("POST", "/v1/runs", max_request, [&svc](const Request& req) -> Outcome {
    auto dry = bool_param(req, "dryRun");
    if (!dry.is_ok()) return error_response(dry.status());
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    auto r = svc.submit_run(*body, *dry);
    if (!r.is_ok()) return error_response(r.status());
    return json_response(*dry ? 200 : (r->second ? 201 : 200), r->first);
  });
  router.add("GET", "/v1/runs", max_request, [&svc](const Request& req) -> Outcome {
    service::RunListQuery q;
    q.phase = req.query_value("phase");
    q.workload = req.query_value("workload");
    auto limit = int_param(req, "limit", 50);
    if (!limit.is_ok()) return error_response(limit.status());
    auto offset = int_param(req, "offset", 0);
    if (!offset.is_ok()) return error_response(offset.status());
    q.limit = *limit;
    q.offset = *offset;
    auto r = svc.list_runs_text(q);
    if (!r.is_ok()) return error_response(r.status());
    Response out;
    out.body = *r + "\n";
    return out;
  });
  // The long poll: answers at once when events exist, else parks until a run changes or the
  // wait ends (no thread is held meanwhile).
  router.add("GET", "/v1/runs/{ref}/events", max_request, [&svc](const Request& req) -> Outcome {
    auto after = int_param(req, "after", 0);
    if (!after.is_ok()) return error_response(after.status());
    auto wait = int_param(req, "waitSeconds", 0);
    if (!wait.is_ok()) return error_response(wait.status());
    if (*wait < 0 || *wait > kMaxWaitSeconds) {
      return error_response(invalid_field("waitSeconds", "must be between 0 and " + std::to_string(kMaxWaitSeconds)));
    }
    const std::string ref = req.params[0];
    const int64_t from = *after;
    auto now = svc.run_events(ref, from, std::chrono::milliseconds(0));
    if (!now.is_ok()) return error_response(now.status());
    if (*wait == 0 || !(*now)["events"].empty()) return json_response(200, *now);
    http::Park park;
    park.until = std::chrono::steady_clock::now() + std::chrono::seconds(*wait);
    park.key = "events\n" + ref + "\n" + std::to_string(from);  // the poll depends on these only
    park.poll = [&svc, ref, from](bool final) -> std::optional<Response> {
      auto r = svc.run_events(ref, from, std::chrono::milliseconds(0));
      if (!r.is_ok()) return error_response(r.status());
      if (final || !(*r)["events"].empty()) return json_response(200, *r);
      return std::nullopt;
    };
    return park;
  });
  router.add("POST", "/v1/runs/{ref}/cancel", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.cancel_run(req.params[0]), 202); });
  router.add("POST", "/v1/runs/{ref}/pause", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.pause_run(req.params[0], *body), 202);
  });
  router.add("POST", "/v1/runs/{ref}/resume", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.resume_run(req.params[0]), 202); });
  router.add("GET", "/v1/runs/{ref}/metrics", max_request, [&svc](const Request& req) -> Outcome {
    auto limit = int_param(req, "limit", 100000);
    if (!limit.is_ok()) return error_response(limit.status());
    return reply(svc.run_metrics(req.params[0], *limit), 200);
  });
  router.add("GET", "/v1/runs/{ref}/rollouts", max_request, [&svc](const Request& req) -> Outcome {
    service::RolloutQuery q;
    for (const char* name : {"step", "best", "worst", "limit"}) {
      if (!req.has_query(name)) continue;
      auto v = int_param(req, name, 0);
      if (!v.is_ok()) return error_response(v.status());
      const std::string n = name;
      if (n == "step") q.step = *v;
      else if (n == "best") q.best = *v;
      else if (n == "worst") q.worst = *v;
      else q.limit = *v;
    }
    return reply(svc.run_rollouts(req.params[0], q), 200);
  });
  router.add("GET", "/v1/runs/{ref}/hparams", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.run_hparams(req.params[0]), 200); });
  router.add("PATCH", "/v1/runs/{ref}", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.annotate_run(req.params[0], *body), 200);
  });
  router.add("GET", "/v1/runs/{ref}", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.get_run(req.params[0]), 200); });

  // ---- the snapshot catalog: the job's callbacks (reserve, commit) and the users' reads
  router.add("POST", "/v1/runs/{ref}/snapshots", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    auto r = svc.reserve_snapshot(req.params[0], *body);
    if (!r.is_ok()) return error_response(r.status());
    return json_response(r->second ? 201 : 200, r->first);
  });
  router.add("GET", "/v1/runs/{ref}/snapshots", max_request, [&svc](const Request& req) -> Outcome {
    auto limit = int_param(req, "limit", 50);
    if (!limit.is_ok()) return error_response(limit.status());
    auto offset = int_param(req, "offset", 0);
    if (!offset.is_ok()) return error_response(offset.status());
    return reply(svc.list_run_snapshots(req.params[0], *limit, *offset), 200);
  });
  router.add("POST", "/v1/snapshots/{ref}/commit", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.commit_snapshot(req.params[0], *body), 200);
  });
  router.add("GET", "/v1/snapshots/{ref}", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.get_snapshot(req.params[0]), 200); });

  // ---- evaluations
  router.add("POST", "/v1/evaluations", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.start_evaluation(*body), 201);
  });
  router.add("GET", "/v1/evaluations", max_request, [&svc](const Request& req) -> Outcome {
    service::EvaluationListQuery q;
    q.phase = req.query_value("phase");
    q.workload = req.query_value("workload");
    q.model = req.query_value("model");
    auto limit = int_param(req, "limit", 50);
    if (!limit.is_ok()) return error_response(limit.status());
    q.limit = *limit;
    return reply(svc.list_evaluations(q), 200);
  });
  router.add("GET", "/v1/evaluations/{ref}", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.get_evaluation(req.params[0]), 200); });
  router.add("GET", "/v1/evaluations/{ref}/report", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.evaluation_report(req.params[0]), 200); });
  router.add("GET", "/v1/evaluations/{ref}/rows", max_request, [&svc](const Request& req) -> Outcome {
    auto limit = int_param(req, "limit", 100);
    if (!limit.is_ok()) return error_response(limit.status());
    auto offset = int_param(req, "offset", 0);
    if (!offset.is_ok()) return error_response(offset.status());
    return reply(svc.evaluation_rows(req.params[0], *limit, *offset), 200);
  });
  router.add("POST", "/v1/evaluations/{ref}/cancel", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.cancel_evaluation(req.params[0]), 202); });
  router.add("PATCH", "/v1/evaluations/{ref}", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.annotate_evaluation(req.params[0], *body), 200);
  });
  router.add("POST", "/v1/snapshots/{ref}/register", max_request, [&svc](const Request& req) -> Outcome {
    auto r = svc.register_snapshot(req.params[0]);
    if (!r.is_ok()) return error_response(r.status());
    return json_response(r->second ? 202 : 200, r->first);
  });
  router.add("GET", "/v1/snapshots/{ref}/candidate", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.snapshot_candidate(req.params[0]), 200); });

  // ---- the model registry
  router.add("POST", "/v1/trained-models", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    auto r = svc.register_trained_model(*body);
    if (!r.is_ok()) return error_response(r.status());
    return json_response(r->second ? 201 : 200, r->first);
  });
  router.add("GET", "/v1/trained-models", max_request, [&svc](const Request& req) -> Outcome {
    service::TrainedModelQuery q;
    q.workload = req.query_value("workload");
    q.base_model = req.query_value("baseModel");
    return reply(svc.list_trained_models(q), 200);
  });
  router.add("GET", "/v1/trained-models/{ref}", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.get_trained_model(req.params[0]), 200); });
  // ---- comparisons (docs/comparisons.md)
  router.add("POST", "/v1/comparisons", max_request, [&svc](const Request& req) -> Outcome {
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    auto r = svc.create_comparison(*body);
    if (!r.is_ok()) return error_response(r.status());
    return json_response(r->second ? 201 : 200, r->first);
  });
  router.add("GET", "/v1/comparisons", max_request, [&svc](const Request& req) -> Outcome {
    service::ComparisonListQuery q;
    q.source = req.query_value("source");
    auto limit = int_param(req, "limit", service::kMaxComparisonsPage);
    if (!limit.is_ok()) return error_response(limit.status());
    auto offset = int_param(req, "offset", 0);
    if (!offset.is_ok()) return error_response(offset.status());
    q.limit = *limit;
    q.offset = *offset;
    return reply(svc.list_comparisons(q), 200);
  });
  router.add("GET", "/v1/comparisons/{ref}", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.get_comparison(req.params[0]), 200); });
  // ---- lineage: child runs from a snapshot, and the family views (docs/lineage.md)
  using ChildStart = Result<std::pair<json, bool>> (Service::*)(const std::string&, const json&, bool);
  for (auto [path, start] : {std::pair<const char*, ChildStart>{"/v1/runs/{ref}/branch", &Service::branch_run},
                             std::pair<const char*, ChildStart>{"/v1/runs/{ref}/continue", &Service::continue_run}}) {
    router.add("POST", path, max_request, [&svc, start](const Request& req) -> Outcome {
      auto dry = bool_param(req, "dryRun");
      if (!dry.is_ok()) return error_response(dry.status());
      auto body = body_json(req);
      if (!body.is_ok()) return error_response(body.status());
      auto r = (svc.*start)(req.params[0], *body, *dry);
      if (!r.is_ok()) return error_response(r.status());
      return json_response(*dry ? 200 : (r->second ? 201 : 200), r->first);
    });
  }
  router.add("POST", "/v1/runs/{ref}/sweep", max_request, [&svc](const Request& req) -> Outcome {
    auto dry = bool_param(req, "dryRun");
    if (!dry.is_ok()) return error_response(dry.status());
    auto body = body_json(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.sweep_run(req.params[0], *body, *dry), *dry ? 200 : 201);
  });
  router.add("GET", "/v1/runs/{ref}/branches", max_request, [&svc](const Request& req) -> Outcome {
    auto limit = int_param(req, "limit", 50);
    if (!limit.is_ok()) return error_response(limit.status());
    auto offset = int_param(req, "offset", 0);
    if (!offset.is_ok()) return error_response(offset.status());
    return reply(svc.run_branches(req.params[0], *limit, *offset), 200);
  });
  router.add("GET", "/v1/runs/{ref}/tree", max_request, [&svc](const Request& req) -> Outcome {
    auto depth = int_param(req, "depth", 0);
    if (!depth.is_ok()) return error_response(depth.status());
    return reply(svc.run_tree(req.params[0], *depth), 200);
  });
  router.add("GET", "/v1/runs/{ref}/ancestry", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.run_ancestry(req.params[0]), 200); });
  // Holds: an empty body pins or unpins both kinds.
  auto optional_body = [](const Request& req) -> Result<json> {
    if (req.body.empty()) return json::object();
    return body_json(req);
  };
  router.add("POST", "/v1/snapshots/{ref}/pin", max_request, [&svc, optional_body](const Request& req) -> Outcome {
    auto body = optional_body(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.pin_snapshot(req.params[0], *body), 200);
  });
  router.add("POST", "/v1/snapshots/{ref}/unpin", max_request, [&svc, optional_body](const Request& req) -> Outcome {
    auto body = optional_body(req);
    if (!body.is_ok()) return error_response(body.status());
    return reply(svc.unpin_snapshot(req.params[0], *body), 200);
  });
  router.add("POST", "/v1/snapshots/{ref}/release", max_request,
             [&svc](const Request& req) -> Outcome { return reply(svc.release_snapshot(req.params[0]), 200); });
}

}  // namespace trainer::api

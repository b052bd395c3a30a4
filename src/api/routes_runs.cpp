// Runs: submission, the list, the events long poll, control (cancel, pause, resume), metrics
// (and their live stream, metrics_stream.h), rollouts, TensorBoard event files, annotations; and
// lineage: child runs from a snapshot (branch, continue, sweep) and the family views (branches,
// tree, ancestry; docs/lineage.md).
#include <chrono>
#include <functional>
#include <string>

#include "api/metrics_stream.h"
#include "api/route_support.h"

namespace trainer::api {
namespace {

using http::Outcome;
using http::Request;
using http::Response;
using service::Service;
using Started = std::pair<json, bool>;  // a run's view, and whether this request created it

constexpr int64_t kMaxWaitSeconds = 60;  // the events long poll's longest wait

// A POST that may be a dry run (?dryRun=true, read before the body): `start(body, dry)`. A dry
// run is never "created", so route_json(201, ...) answers it 200.
Result<Started> dry_run_or_start(const Request& req, const std::function<Result<Started>(const json&, bool)>& start) {
  TRAINER_ASSIGN_OR_RETURN(bool dry, bool_param(req, "dryRun"));
  TRAINER_ASSIGN_OR_RETURN(json body, body_json(req));
  TRAINER_ASSIGN_OR_RETURN(Started r, start(body, dry));
  return Started{std::move(r.first), !dry && r.second};
}

// GET /v1/runs: the list as the service renders it (text, one JSON document).
Outcome list_runs(Service& svc, const Request& req) {
  service::RunListQuery q;
  q.phase = req.query_value("phase");
  q.workload = req.query_value("workload");
  auto page = page_params(req, 50);
  if (!page.is_ok()) return error_response(page.status());
  q.limit = page->limit;
  q.offset = page->offset;
  auto r = svc.list_runs_text(q);
  if (!r.is_ok()) return error_response(r.status());
  Response out;
  out.body = *r + "\n";
  return out;
}

// GET /v1/runs/{ref}/events, the long poll: answers at once when events exist, else parks
// until a run changes or the wait ends (no thread is held meanwhile).
Outcome run_events(Service& svc, const Request& req) {
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
}

// GET /v1/runs/{ref}/rollouts?step&best&worst&limit.
Result<json> run_rollouts(Service& svc, const Request& req) {
  service::RolloutQuery q;
  for (const char* name : {"step", "best", "worst", "limit"}) {
    if (!req.has_query(name)) continue;
    TRAINER_ASSIGN_OR_RETURN(int64_t v, int_param(req, name, 0));
    const std::string n = name;
    if (n == "step") q.step = v;
    else if (n == "best") q.best = v;
    else if (n == "worst") q.worst = v;
    else q.limit = v;
  }
  return svc.run_rollouts(req.params[0], q);
}

// GET /v1/runs/{ref}/tensorboard/{file}: one event file's bytes, as the job copied them.
Outcome run_event_file(Service& svc, const Request& req) {
  auto bytes = svc.run_event_file(req.params[0], req.params[1]);
  if (!bytes.is_ok()) return error_response(bytes.status());
  Response out;
  out.content_type = "application/octet-stream";
  out.body = std::move(*bytes);
  return out;
}

}  // namespace

void install_run_routes(http::Router& router, Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;

  router.add("POST", "/v1/runs", max, route_json(201, [&svc](const Request& req) {
               return dry_run_or_start(req, [&svc](const json& body, bool dry) { return svc.submit_run(body, dry); });
             }));
  router.add("GET", "/v1/runs", max, [&svc](const Request& req) { return list_runs(svc, req); });
  router.add("GET", "/v1/runs/{ref}/events", max, [&svc](const Request& req) { return run_events(svc, req); });
  router.add("POST", "/v1/runs/{ref}/cancel", max,
             route_json(202, [&svc](const Request& req) { return svc.cancel_run(req.params[0]); }));
  router.add("POST", "/v1/runs/{ref}/pause", max, route_body(202, [&svc](const Request& req, const json& body) {
               return svc.pause_run(req.params[0], body);
             }));
  router.add("POST", "/v1/runs/{ref}/resume", max,
             route_json(202, [&svc](const Request& req) { return svc.resume_run(req.params[0]); }));
  router.add("GET", "/v1/runs/{ref}/metrics", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               TRAINER_ASSIGN_OR_RETURN(int64_t limit, int_param(req, "limit", 100000));
               return svc.run_metrics(req.params[0], limit);
             }));
  router.add("GET", "/v1/runs/{ref}/metrics/stream", max,
             [&svc](const Request& req) { return run_metrics_stream(svc, req); });
  router.add("GET", "/v1/runs/{ref}/rollouts", max,
             route_json(200, [&svc](const Request& req) { return run_rollouts(svc, req); }));
  router.add("GET", "/v1/runs/{ref}/tensorboard", max,
             route_json(200, [&svc](const Request& req) { return svc.run_event_files(req.params[0]); }));
  router.add("GET", "/v1/runs/{ref}/tensorboard/{file}", max,
             [&svc](const Request& req) { return run_event_file(svc, req); });
  router.add("GET", "/v1/runs/{ref}/hparams", max,
             route_json(200, [&svc](const Request& req) { return svc.run_hparams(req.params[0]); }));
  router.add("GET", "/v1/runs/{ref}/engine-config", max,
             route_json(200, [&svc](const Request& req) { return svc.run_engine_config(req.params[0]); }));
  router.add("GET", "/v1/runs/{ref}/engine-runtime", max,
             route_json(200, [&svc](const Request& req) { return svc.run_engine_runtime(req.params[0]); }));
  router.add("PATCH", "/v1/runs/{ref}", max, route_body(200, [&svc](const Request& req, const json& body) {
               return svc.annotate_run(req.params[0], body);
             }));
  router.add("GET", "/v1/runs/{ref}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_run(req.params[0]); }));
}

void install_lineage_routes(http::Router& router, Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;

  // Child runs from a snapshot: 201 when started, 200 for a dry run or one already started.
  using ChildStart = Result<Started> (Service::*)(const std::string&, const json&, bool);
  for (auto [path, start] : {std::pair<const char*, ChildStart>{"/v1/runs/{ref}/branch", &Service::branch_run},
                             std::pair<const char*, ChildStart>{"/v1/runs/{ref}/continue", &Service::continue_run}}) {
    router.add("POST", path, max, route_json(201, [&svc, start](const Request& req) {
                 return dry_run_or_start(
                     req, [&](const json& body, bool dry) { return (svc.*start)(req.params[0], body, dry); });
               }));
  }
  // A sweep always starts new runs: 201, or 200 for a dry run.
  router.add("POST", "/v1/runs/{ref}/sweep", max, route_json(201, [&svc](const Request& req) {
               return dry_run_or_start(req, [&](const json& body, bool dry) -> Result<Started> {
                 TRAINER_ASSIGN_OR_RETURN(json r, svc.sweep_run(req.params[0], body, dry));
                 return Started{std::move(r), true};
               });
             }));
  router.add("GET", "/v1/runs/{ref}/branches", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               TRAINER_ASSIGN_OR_RETURN(Page page, page_params(req, 50));
               return svc.run_branches(req.params[0], page.limit, page.offset,
                                       req.has_query("submission") ? req.query_value("submission") : "");
             }));
  router.add("GET", "/v1/runs/{ref}/tree", max, route_json(200, [&svc](const Request& req) -> Result<json> {
               TRAINER_ASSIGN_OR_RETURN(int64_t depth, int_param(req, "depth", 0));
               return svc.run_tree(req.params[0], depth);
             }));
  router.add("GET", "/v1/runs/{ref}/ancestry", max,
             route_json(200, [&svc](const Request& req) { return svc.run_ancestry(req.params[0]); }));
}

}  // namespace trainer::api

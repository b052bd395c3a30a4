// Pipelines (docs/pipelines.md): submission (a dry run too), the list, one pipeline, resume,
// cancel, annotate, and its snapshots as Server-Sent Events.
#include <chrono>
#include <string>

#include "api/metrics_stream.h"
#include "api/route_support.h"

namespace trainer::api {
namespace {

using http::Request;
using Clock = std::chrono::steady_clock;

// How often a stream looks at its pipeline when nothing announced a change (an evaluation's end
// is not a run change), and notices a client that has gone.
constexpr auto kLook = std::chrono::seconds(1);
// A comment this often keeps an idle stream open through proxies that close silent connections.
constexpr auto kKeepAlive = std::chrono::seconds(15);

bool ended(const json& p) {
  const std::string phase = p.value("phase", std::string());
  return phase == "COMPLETED" || phase == "FAILED" || phase == "CANCELLED";
}

// The stream: `pipeline` with the whole pipeline (as GET /v1/pipelines/{id} answers it) each time it
// changed, the first time at once; a last `end` {phase, failureReason} once it ended; `problem`
// when a read fails.
void follow(service::Service& svc, const std::string& id, http::StreamWriter& writer) {
  json last;
  auto keep_alive_due = Clock::now() + kKeepAlive;
  while (writer.alive()) {
    const uint64_t version = svc.run_change_version();
    auto p = svc.get_pipeline(id);
    if (!p.is_ok()) {
      writer.write(sse_event("problem", {{"code", status_code_name(p.status().code())}, {"message", p.status().describe()}}));
      return;
    }
    if (*p != last) {
      if (!writer.write(sse_event("pipeline", *p))) return;
      last = *p;
      keep_alive_due = Clock::now() + kKeepAlive;
    }
    if (ended(*p)) {
      writer.write(sse_event("end", {{"phase", (*p)["phase"]}, {"failureReason", p->value("failureReason", json(nullptr))}}));
      return;
    }
    svc.wait_for_run_change(version, std::min(Clock::now() + kLook, keep_alive_due));
    if (Clock::now() >= keep_alive_due) {
      if (!writer.write(": keep-alive\n\n")) return;
      keep_alive_due = Clock::now() + kKeepAlive;
    }
  }
}

http::Outcome pipeline_stream(service::Service& svc, const Request& req) {
  auto p = svc.get_pipeline(req.params[0]);
  if (!p.is_ok()) return error_response(p.status());
  http::Stream stream;
  stream.head.content_type = "text/event-stream";
  stream.head.headers = {{"Cache-Control", "no-cache"}};
  stream.produce = [&svc, id = (*p)["pipelineId"].get<std::string>()](http::StreamWriter& writer) {
    follow(svc, id, writer);
  };
  return stream;
}

}  // namespace

void install_pipeline_routes(http::Router& router, service::Service& svc, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;
  // 201 when started; 200 for a dry run (?dryRun=true, with ?showResolved=true for the train
  // stages' resolved plans).
  router.add("POST", "/v1/pipelines", max, route_json(201, [&svc](const Request& req) -> Result<std::pair<json, bool>> {
               TRAINER_ASSIGN_OR_RETURN(bool dry, bool_param(req, "dryRun"));
               TRAINER_ASSIGN_OR_RETURN(bool resolved, bool_param(req, "showResolved"));
               if (resolved && !dry) return invalid_field("showResolved", "applies to a dry run only (dryRun=true)");
               TRAINER_ASSIGN_OR_RETURN(json body, body_json(req));
               return svc.start_pipeline(body, dry, resolved);
             }));
  router.add("GET", "/v1/pipelines", max,
             route_json(200, [&svc](const Request& req) { return svc.list_pipelines(req.query_value("phase")); }));
  router.add("GET", "/v1/pipelines/{ref}", max,
             route_json(200, [&svc](const Request& req) { return svc.get_pipeline(req.params[0]); }));
  router.add("GET", "/v1/pipelines/{ref}/events", max,
             [&svc](const Request& req) { return pipeline_stream(svc, req); });
  router.add("POST", "/v1/pipelines/{ref}/resume", max,
             route_json(200, [&svc](const Request& req) { return svc.resume_pipeline(req.params[0]); }));
  router.add("POST", "/v1/pipelines/{ref}/cancel", max,
             route_json(202, [&svc](const Request& req) { return svc.cancel_pipeline(req.params[0]); }));
  router.add("PATCH", "/v1/pipelines/{ref}", max, route_body(200, [&svc](const Request& req, const json& body) {
               return svc.annotate_pipeline(req.params[0], body);
             }));
}

}  // namespace trainer::api

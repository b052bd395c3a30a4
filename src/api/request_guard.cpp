// The guard before every route (request_guard.h): authorize, limit, answer, audit.
#include "api/request_guard.h"

#include <cstdio>
#include <string>

#include "api/authorization.h"
#include "api/request_limits.h"
#include "api/route_support.h"
#include "common/json_parse.h"

namespace trainer::api {
namespace {

using http::Outcome;
using http::Request;
using http::Response;

// How long a client refused for holding too many long polls should wait before trying again:
// one of them may end at any moment.
constexpr int kLongPollRetrySeconds = 1;

// The keys of the ids a create answers, in the order they are looked for: the audit's target
// of a write whose path names no object.
constexpr const char* kIdKeys[] = {"runId",      "workloadId",   "tokenId", "evaluationId",   "endpointId",
                                   "pipelineId", "comparisonId", "modelId", "distillationId", "curationId",
                                   "analysisId", "snapshotId",   "hash"};

// Whether a request is a write the audit log records: any method but GET, on a route of the
// role table that is neither a job's own (its reports) nor one a job also calls (reads, and the
// endpoints' chat completions, which answer without changing anything).
bool audited(const Request& req, const RouteRule* rule) {
  if (req.method == "GET" || req.method == "HEAD") return false;
  return rule == nullptr || (rule->need != Need::kJob && !rule->job_too);
}

Response too_many(const std::string& message, int retry_after_seconds) {
  Response r = error_response(Status(StatusCode::kResourceExhausted, message), 429);
  r.headers.emplace_back("Retry-After", std::to_string(retry_after_seconds));
  return r;
}

// The workload id of a document (workload.id, else workloadId, else a "workload" string).
std::string workload_in(const json& doc) {
  if (!doc.is_object()) return "";
  if (doc.contains("workload") && doc["workload"].is_object())
    return doc["workload"].value("id", std::string());
  if (doc.contains("workload") && doc["workload"].is_string()) return doc["workload"].get<std::string>();
  return doc.value("workloadId", std::string());
}

// The workload the request names or whose object it touches, as a name or id; "" when not known
// without more than one read.
std::string workload_of_request(service::Service& svc, const RouteRule& rule, const Request& req) {
  const std::string ref = req.params.empty() ? std::string() : req.params[0];
  switch (rule.scope) {
    case Scope::kWorkloadPath:
      return ref;
    case Scope::kQueryWorkload:
      return req.query_value("workload");
    case Scope::kBodyWorkload: {
      auto body = body_json(req);
      return body.is_ok() ? workload_in(*body) : std::string();
    }
    case Scope::kRunPath: {
      auto run = svc.get_run(ref);
      return run.is_ok() ? workload_in(*run) : std::string();
    }
    default:
      return "";
  }
}

// What the audit log keeps of one write request and its answer `out` (never the body).
json audit_entry(service::Service& svc, const Request& req, const std::string& pattern, const RouteRule* rule,
                 const Caller& caller, const Outcome& out) {
  json entry = {{"tokenId", caller.token_id},
                {"tokenName", caller.token_name},
                {"roles", caller.roles},
                {"from", req.remote_address},
                {"method", req.method},
                {"route", pattern},
                {"path", req.path}};
  if (!caller.job_id.empty()) entry["jobId"] = caller.job_id;
  std::string target;
  for (const std::string& p : req.params) target += (target.empty() ? "" : "/") + p;
  std::string workload = rule != nullptr ? workload_of_request(svc, *rule, req) : std::string();
  int status = 200;
  if (const auto* r = std::get_if<Response>(&out)) {
    status = r->status;
    if (r->content_type == "application/json") {
      auto doc = parse_json(r->body, "the answer");
      if (doc.is_ok() && doc->is_object()) {
        if (status >= 400 && doc->contains("error") && (*doc)["error"].is_object()) {
          entry["error"] = (*doc)["error"].value("code", std::string());
        }
        for (const char* key : kIdKeys) {
          if (!target.empty()) break;
          if (doc->contains(key) && (*doc)[key].is_string()) target = (*doc)[key].get<std::string>();
        }
        if (workload.empty() && status < 400) workload = workload_in(*doc);
        if (workload.empty() && status < 400 && pattern == "/v1/workloads")
          workload = doc->value("id", std::string());
      }
    }
  } else if (const auto* s = std::get_if<http::Stream>(&out)) {
    status = s->head.status;
  }
  entry["status"] = status;
  if (!target.empty()) entry["target"] = target;
  if (!workload.empty()) entry["workload"] = workload;
  return entry;
}

// `out` holding `slot` until it ends: a parked request until it is answered, a stream until its
// producer returns.
Outcome holding(Outcome out, std::shared_ptr<void> slot) {
  if (auto* park = std::get_if<http::Park>(&out)) {
    park->poll = [poll = std::move(park->poll), slot](bool final) { return poll(final); };
  } else if (auto* stream = std::get_if<http::Stream>(&out)) {
    stream->produce = [produce = std::move(stream->produce), slot](http::StreamWriter& w) { produce(w); };
  }
  return out;
}

// The 429 of a request over its token's or its workload's rate; nullopt when both take it.
std::optional<Response> over_rate(service::Service& svc, RequestLimiter& tokens, RequestLimiter& workloads,
                                  const RouteRule* rule, const Request& req, const Caller& caller) {
  const auto now = RequestLimiter::Clock::now();
  if (auto wait = tokens.take(caller.token_id, now)) {
    return too_many("token " + caller.token_id + " is over its rate of " +
                        std::to_string(tokens.requests_per_second()) + " requests per second (burst " +
                        std::to_string(tokens.request_burst()) +
                        ", limits.requestsPerSecond and limits.requestBurst); retry after " +
                        std::to_string(*wait) + " s",
                    *wait);
  }
  if (workloads.requests_per_second() <= 0 || rule == nullptr) return std::nullopt;
  const std::string ref = workload_of_request(svc, *rule, req);
  if (ref.empty()) return std::nullopt;
  auto workload = svc.get_workload(ref);
  if (!workload.is_ok()) return std::nullopt;  // the handler answers for a workload that is not there
  const std::string name = workload->value("name", ref);
  if (auto wait = workloads.take(workload->value("id", ref), now)) {
    return too_many(
        "workload " + name + " is over its rate of " + std::to_string(workloads.requests_per_second()) +
            " requests per second, all tokens together (burst " + std::to_string(workloads.request_burst()) +
            ", limits.workloadRequestsPerSecond and limits.workloadRequestBurst); retry after " +
            std::to_string(*wait) + " s",
        *wait);
  }
  return std::nullopt;
}

}  // namespace

void install_request_guard(http::Router& router, service::Service& svc, const service::Limits& limits) {
  std::shared_ptr<RequestLimiter> tokens = RequestLimiter::for_tokens(limits);
  std::shared_ptr<RequestLimiter> workloads = RequestLimiter::for_workloads(limits);
  router.set_guard([&svc, tokens, workloads](const Request& req, const std::string& pattern,
                                             const http::Handler& handler) -> Outcome {
    const RouteRule* rule = find_rule(req.method, pattern);
    Caller caller;
    Outcome out;
    if (auto refused = authorize(svc, req, pattern, caller)) {
      out = std::move(*refused);
    } else if (caller.token_id.empty() || caller.token_id == "trainerd") {
      // Not counted: the public routes, a job's own calls, trainerd's own token.
      out = handler(req);
    } else if (auto limited = over_rate(svc, *tokens, *workloads, rule, req, caller)) {
      out = std::move(*limited);
    } else {
      out = handler(req);
      if (auto* r = std::get_if<Response>(&out)) filter_to_workloads(caller, pattern, *r);
      if (std::holds_alternative<http::Park>(out) || std::holds_alternative<http::Stream>(out)) {
        if (auto slot = tokens->hold_long_poll(caller.token_id)) {
          out = holding(std::move(out), std::move(slot));
        } else {
          out = too_many(
              "token " + caller.token_id + " holds " + std::to_string(tokens->long_polls_per_token()) +
                  " long polls and streams already, the most one token may (limits.longPollsPerToken); "
                  "end one or retry later",
              kLongPollRetrySeconds);
        }
      }
    }
    if (audited(req, rule)) {
      Status st = svc.record_audit(audit_entry(svc, req, pattern, rule, caller, out));
      if (!st.is_ok()) {
        std::fprintf(stderr, "trainerd: warning: the audit log could not record %s %s: %s\n",
                     req.method.c_str(), req.path.c_str(), st.describe().c_str());
      }
    }
    return out;
  });
}

}  // namespace trainer::api

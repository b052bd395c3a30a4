// The role table and the authorizer (authorization.h, docs/security.md).
#include "api/authorization.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <strings.h>

#include "api/route_support.h"

namespace trainer::api {
namespace {

using http::Request;
using http::Response;
using service::Identity;
using service::Service;

constexpr Need P = Need::kPublic, R = Need::kRead, S = Need::kSubmit, A = Need::kAdmin, C = Need::kControl,
               J = Need::kJob;

// The name of the cookie the dashboard keeps its token in; read for GET requests only, so that a
// page of another site cannot make a browser write with it.
constexpr const char* kTokenCookie = "trainer_token";

}  // namespace

const std::vector<RouteRule>& role_table() {
  using enum Scope;
  static const std::vector<RouteRule> table = {
      // info and telemetry
      {"GET", "/v1/info", P, kNone},
      {"GET", "/metrics", R, kAllWorkloads},
      {"POST", "/otlp/v1/metrics", J, kNone},
      {"GET", "/v1/capacity", R, kQueryWorkload},
      {"GET", "/v1/capacity/device-hours", R, kAllWorkloads},
      {"POST", "/v1/capacity/scan", C, kAllWorkloads},
      // API tokens
      {"POST", "/v1/tokens", A, kAllWorkloads},
      {"GET", "/v1/tokens", A, kAllWorkloads},
      {"POST", "/v1/tokens/{ref}/revoke", A, kAllWorkloads},
      // the audit log of every write
      {"GET", "/v1/audit", A, kAllWorkloads},
      // base models and the model registry
      {"GET", "/v1/base-models", R, kNone},
      {"POST", "/v1/base-models/select", A, kAllWorkloads},
      {"GET", "/v1/base-model-envelopes", R, kNone},
      {"GET", "/v1/base-models/{name...}", R, kNone},
      {"POST", "/v1/trained-models", S, kBodyWorkload},
      {"GET", "/v1/trained-models", R, kListFiltered},
      {"GET", "/v1/trained-models/{ref}", R, kTrainedModelPath},
      {"GET", "/v1/trained-models/{ref}/files/{file}", R, kTrainedModelPath},
      {"GET", "/v1/trained-models/{ref}/merged", R, kTrainedModelPath},
      {"GET", "/v1/trained-models/{ref}/merged/{file}", R, kTrainedModelPath},
      // datasets and bundles: the shared catalog; an upload counts against the storage quota of the
      // workload it names, so a limited token must name one of its own
      {"POST", "/v1/datasets", S, kBodyWorkload},
      {"GET", "/v1/datasets", R, kNone},
      {"POST", "/v1/datasets/{ref}/measure", S, kNone},
      {"POST", "/v1/datasets/{ref}/analyses", S, kNone},
      {"GET", "/v1/datasets/{ref}/analyses", R, kNone},
      {"GET", "/v1/datasets/{ref}/analyses/{id}", R, kNone},
      {"GET", "/v1/datasets/{ref}", R, kNone},
      {"PUT", "/v1/dataset-names/{name}", S, kNone},
      {"POST", "/v1/bundles", A, kAllWorkloads},
      {"GET", "/v1/bundles", R, kNone},
      {"GET", "/v1/bundles/{ref}", R, kNone},
      // sessions and curations: they feed the shared catalog's datasets
      {"POST", "/v1/sessions", S, kNone},
      {"GET", "/v1/sessions/{hash}", R, kNone},
      {"POST", "/v1/curations", S, kNone},
      {"GET", "/v1/curations", R, kNone},
      {"GET", "/v1/curations/{id}", R, kNone},
      // distillations: a workload's teacher calls, into the shared catalog; the list answers a
      // limited token its workloads' ones; one is found by id only, so reading or moving it needs a
      // token on every workload
      {"POST", "/v1/distillations", S, kBodyWorkload},
      {"GET", "/v1/distillations", R, kListFiltered},
      {"GET", "/v1/distillations/{id}", R, kAllWorkloads},
      {"GET", "/v1/distillations/{id}/rejections", R, kAllWorkloads},
      {"POST", "/v1/distillations/{id}/pause", S, kAllWorkloads},
      {"POST", "/v1/distillations/{id}/resume", S, kAllWorkloads},
      {"POST", "/v1/distillations/{id}/cancel", S, kAllWorkloads},
      // workloads
      {"POST", "/v1/workloads", A, kAllWorkloads},
      {"GET", "/v1/workloads", R, kListFiltered},
      {"POST", "/v1/workloads/{ref}/archive", A, kWorkloadPath},
      {"POST", "/v1/workloads/{ref}/unarchive", A, kWorkloadPath},
      {"GET", "/v1/workloads/{ref}", R, kWorkloadPath},
      {"PATCH", "/v1/workloads/{ref}", A, kWorkloadPath},
      {"PUT", "/v1/workloads/{ref}/evaluation", A, kWorkloadPath},
      {"GET", "/v1/workloads/{ref}/history", R, kWorkloadPath},
      {"GET", "/v1/workloads/{ref}/scores", R, kWorkloadPath},
      {"GET", "/v1/workloads/{ref}/refs/{which}", R, kWorkloadPath},
      {"PUT", "/v1/workloads/{ref}/refs/{which}", A, kWorkloadPath},
      // runs
      {"POST", "/v1/runs", S, kBodyWorkload},
      {"GET", "/v1/runs", R, kListFiltered},
      {"GET", "/v1/runs/{ref}/events", R, kRunPath},
      {"POST", "/v1/runs/{ref}/cancel", S, kRunPath},
      {"POST", "/v1/runs/{ref}/pause", S, kRunPath},
      {"POST", "/v1/runs/{ref}/resume", S, kRunPath},
      {"GET", "/v1/runs/{ref}/metrics", R, kRunPath},
      {"GET", "/v1/runs/{ref}/metrics/stream", R, kRunPath},
      {"GET", "/v1/runs/{ref}/rollouts", R, kRunPath},
      {"GET", "/v1/runs/{ref}/tensorboard", R, kRunPath},
      {"GET", "/v1/runs/{ref}/tensorboard/{file}", R, kRunPath},
      {"GET", "/v1/runs/{ref}/hparams", R, kRunPath},
      {"GET", "/v1/runs/{ref}/engine-config", R, kRunPath},
      {"GET", "/v1/runs/{ref}/engine-runtime", R, kRunPath},
      {"PATCH", "/v1/runs/{ref}", S, kRunPath},
      {"GET", "/v1/runs/{ref}", R, kRunPath},
      {"POST", "/v1/runs/{ref}/branch", S, kRunPath},
      {"POST", "/v1/runs/{ref}/continue", S, kRunPath},
      {"POST", "/v1/runs/{ref}/sweep", S, kRunPath},
      {"GET", "/v1/runs/{ref}/branches", R, kRunPath},
      {"GET", "/v1/runs/{ref}/tree", R, kRunPath},
      {"GET", "/v1/runs/{ref}/ancestry", R, kRunPath},
      // snapshots: the job's reserve and commit, the users' reads, registration and holds
      {"POST", "/v1/runs/{ref}/snapshots", J, kNone},
      {"GET", "/v1/runs/{ref}/snapshots", R, kRunPath, /*job_too=*/true},
      {"POST", "/v1/snapshots/{ref}/commit", J, kNone},
      {"GET", "/v1/snapshots/{ref}", R, kSnapshotPath, /*job_too=*/true},
      {"POST", "/v1/snapshots/{ref}/register", S, kSnapshotPath},
      {"GET", "/v1/snapshots/{ref}/candidate", R, kSnapshotPath},
      {"POST", "/v1/snapshots/{ref}/pin", C, kSnapshotPath},
      {"POST", "/v1/snapshots/{ref}/unpin", C, kSnapshotPath},
      {"POST", "/v1/snapshots/{ref}/release", C, kSnapshotPath},
      // evaluations and comparisons
      {"POST", "/v1/evaluations", S, kBodyWorkload},
      {"GET", "/v1/evaluations", R, kListFiltered},
      {"GET", "/v1/evaluations/{ref}", R, kEvaluationPath},
      {"GET", "/v1/evaluations/{ref}/report", R, kEvaluationPath},
      {"GET", "/v1/evaluations/{ref}/rows", R, kEvaluationPath},
      {"POST", "/v1/evaluations/{ref}/cancel", S, kEvaluationPath},
      {"PATCH", "/v1/evaluations/{ref}", S, kEvaluationPath},
      {"POST", "/v1/comparisons", S, kAllWorkloads},
      {"GET", "/v1/comparisons", R, kListFiltered},
      {"GET", "/v1/comparisons/{ref}", R, kComparisonPath},
      // pipelines: their stages may be of several workloads, so only a token on every workload; the
      // list answers a limited token the pipelines all of whose stages' workloads are its own
      {"POST", "/v1/pipelines", S, kAllWorkloads},
      {"GET", "/v1/pipelines", R, kListFiltered},
      {"GET", "/v1/pipelines/{ref}", R, kAllWorkloads},
      {"GET", "/v1/pipelines/{ref}/events", R, kAllWorkloads},
      {"POST", "/v1/pipelines/{ref}/resume", S, kAllWorkloads},
      {"POST", "/v1/pipelines/{ref}/cancel", S, kAllWorkloads},
      {"PATCH", "/v1/pipelines/{ref}", S, kAllWorkloads},
      // endpoints
      {"POST", "/v1/endpoints", S, kBodyWorkload},
      {"GET", "/v1/endpoints", R, kListFiltered},
      {"GET", "/v1/endpoints/info", R, kNone},
      {"GET", "/v1/endpoints/{ref}", R, kEndpointPath},
      {"DELETE", "/v1/endpoints/{ref}/models/{model}", S, kEndpointPath},
      {"POST", "/v1/endpoints/{ref}/models/{model}/disable", S, kEndpointPath},
      {"POST", "/v1/endpoints/{ref}/models/{model}/enable", S, kEndpointPath},
      {"DELETE", "/v1/endpoints/{ref}", S, kEndpointPath},
      {"POST", "/v1/endpoints/{ref}/v1/chat/completions", S, kEndpointPath, /*job_too=*/true},
      // a job's reports
      {"POST", "/v1/jobs/{id}/events", J, kNone},
      {"POST", "/v1/jobs/{id}/logs", J, kNone},
      {"POST", "/v1/jobs/{id}/start", J, kNone},
      // the dashboard's page and files: its JSON reads need a token like any other client's
      {"GET", "/", P, kNone},
      {"GET", "/runs", P, kNone},
      {"GET", "/runs/{id}", P, kNone},
      {"GET", "/workloads", P, kNone},
      {"GET", "/workloads/{name}", P, kNone},
      {"GET", "/capacity", P, kNone},
      {"GET", "/ui/{file}", P, kNone},
  };
  return table;
}

const RouteRule* find_rule(const std::string& method, const std::string& pattern) {
  for (const RouteRule& rule : role_table()) {
    if (method == rule.method && pattern == rule.pattern) return &rule;
  }
  return nullptr;
}

const char* need_name(Need need) {
  switch (need) {
    case Need::kPublic: return "public";
    case Need::kRead: return "read";
    case Need::kSubmit: return "submit";
    case Need::kAdmin: return "admin";
    case Need::kControl: return "control";
    case Need::kJob: return "job";
  }
  return "?";
}

const char* scope_name(Scope scope) {
  switch (scope) {
    case Scope::kNone: return "none";
    case Scope::kAllWorkloads: return "all";
    case Scope::kWorkloadPath: return "workload";
    case Scope::kRunPath: return "run";
    case Scope::kSnapshotPath: return "snapshot";
    case Scope::kEvaluationPath: return "evaluation";
    case Scope::kEndpointPath: return "endpoint";
    case Scope::kTrainedModelPath: return "trained-model";
    case Scope::kComparisonPath: return "comparison";
    case Scope::kBodyWorkload: return "body";
    case Scope::kListFiltered: return "list";
    case Scope::kQueryWorkload: return "query";
  }
  return "?";
}

json role_table_json() {
  json routes = json::array();
  for (const RouteRule& r : role_table()) {
    routes.push_back({{"method", r.method}, {"pattern", r.pattern},
                      {"role", std::string(need_name(r.need)) + (r.job_too ? " or job" : "")},
                      {"scope", scope_name(r.scope)}});
  }
  return json{{"routes", routes}};
}

std::vector<std::string> routes_without_rule(const http::Router& router) {
  std::vector<std::string> out;
  for (const auto& [method, pattern] : router.routes()) {
    if (!find_rule(method, pattern)) out.push_back(method + " " + pattern);
  }
  return out;
}

namespace {

// The token a request carries: its bearer token, else (for a GET, the dashboard's reads and its
// metrics stream, which a browser's EventSource sends without headers) the dashboard's cookie.
std::string request_token(const Request& req) {
  std::string token = bearer_token(req);
  if (!token.empty() || req.method != "GET") return token;
  const std::string cookies = header_value(req, "Cookie");
  const std::string key = std::string(kTokenCookie) + "=";
  size_t at = 0;
  while (at < cookies.size()) {
    while (at < cookies.size() && (cookies[at] == ' ' || cookies[at] == ';')) ++at;
    size_t end = cookies.find(';', at);
    if (end == std::string::npos) end = cookies.size();
    if (cookies.compare(at, key.size(), key) == 0) {
      return http::url_decode(cookies.substr(at + key.size(), end - at - key.size()), false);
    }
    at = end;
  }
  return "";
}

// The same answer for an object outside the token's workloads as for one that does not exist.
Response hidden(const std::string& what, const std::string& ref) {
  return error_response(not_found(what + " '" + ref + "' not found"));
}

// The workload id an object's document names (workload.id, else workloadId); "" when none.
std::string workload_of(const json& doc) {
  if (doc.contains("workload") && doc["workload"].is_object()) return doc["workload"].value("id", std::string());
  return doc.value("workloadId", std::string());
}

// Whether the token may touch the workload `ref` (a name or id) names; false when none does.
bool may_touch_workload(Service& svc, const Identity& who, const std::string& ref) {
  if (ref.empty()) return false;
  auto w = svc.get_workload(ref);
  return w.is_ok() && who.may_touch(w->value("id", std::string()));
}

bool may_touch_run(Service& svc, const Identity& who, const std::string& ref) {
  auto run = svc.get_run(ref);
  return run.is_ok() && who.may_touch(workload_of(*run));
}

// A limited token's request: allowed when the workload it touches is one of the token's.
std::optional<Response> check_scope(Service& svc, const Identity& who, const RouteRule& rule, const Request& req,
                                   Caller* caller = nullptr) {
  const std::string ref = req.params.empty() ? std::string() : req.params[0];
  switch (rule.scope) {
    case Scope::kListFiltered: {
      const std::string workload = req.query_value("workload");
      if (!workload.empty() && !may_touch_workload(svc, who, workload)) return hidden("workload", workload);
      if (caller == nullptr) {
        if (!workload.empty()) return std::nullopt;
        return hidden("object", ref);
      }
      // Filtered with ?workload= too: a list that does not take it (distillations, pipelines)
      // would otherwise answer every workload's items.
      caller->filtered = true;
      caller->only_workloads = who.workloads;
      for (const std::string& id : who.workloads) {
        if (auto w = svc.get_workload(id); w.is_ok()) caller->only_workload_names.push_back(w->value("name", std::string()));
      }
      return std::nullopt;
    }
    case Scope::kNone: return std::nullopt;
    case Scope::kAllWorkloads:
      return error_response(permission_denied(std::string(rule.method) + " " + rule.pattern +
                                              " needs a token on every workload; this one is limited to some"));
    case Scope::kWorkloadPath:
      if (may_touch_workload(svc, who, ref)) return std::nullopt;
      return hidden("workload", ref);
    case Scope::kRunPath:
      if (may_touch_run(svc, who, ref)) return std::nullopt;
      return hidden("run", ref);
    case Scope::kSnapshotPath: {
      auto snap = svc.get_snapshot(ref);
      if (snap.is_ok() && may_touch_run(svc, who, snap->value("runId", std::string()))) return std::nullopt;
      return hidden("snapshot", ref);
    }
    case Scope::kComparisonPath: {
      auto doc = svc.get_comparison(ref);
      if (doc.is_ok()) {
        const std::string w = workload_of(*doc);
        if (!w.empty() && who.may_touch(w)) return std::nullopt;
      }
      return hidden("comparison", ref);
    }
    case Scope::kEvaluationPath:
    case Scope::kEndpointPath:
    case Scope::kTrainedModelPath: {
      const bool evaluation = rule.scope == Scope::kEvaluationPath, endpoint = rule.scope == Scope::kEndpointPath;
      auto doc = evaluation ? svc.get_evaluation(ref) : endpoint ? svc.get_endpoint(ref) : svc.get_trained_model(ref);
      if (doc.is_ok()) {
        const std::string w = workload_of(*doc);
        if (!w.empty() && who.may_touch(w)) return std::nullopt;
      }
      return hidden(evaluation ? "evaluation" : endpoint ? "endpoint" : "trained model", ref);
    }
    case Scope::kBodyWorkload:
    case Scope::kQueryWorkload: {
      std::string workload;
      if (rule.scope == Scope::kQueryWorkload) {
        workload = req.query_value("workload");
      } else if (auto body = body_json(req); body.is_ok() && body->value("workload", json()).is_string()) {
        workload = body->value("workload", std::string());
      }
      if (workload.empty()) {
        return error_response(Status(StatusCode::kPermissionDenied, "workload",
                                     "a token limited to some workloads must name one of them (" +
                                         std::string(rule.scope == Scope::kQueryWorkload ? "?workload=NAME"
                                                                                         : "\"workload\" in the body") +
                                         ")"));
      }
      if (may_touch_workload(svc, who, workload)) return std::nullopt;
      return hidden("workload", workload);
    }
  }
  return hidden("object", ref);
}

}  // namespace

std::optional<Response> authorize(Service& svc, const Request& req, const std::string& pattern, Caller& caller) {
  const RouteRule* rule = find_rule(req.method, pattern);
  if (rule == nullptr) {
    return error_response(permission_denied(req.method + " " + pattern +
                                            " has no entry in the role table (src/api/authorization.cpp); refused"));
  }
  if (rule->need == Need::kPublic || rule->need == Need::kJob) return std::nullopt;
  if (rule->job_too && !header_value(req, service::kJobIdHeader).empty()) {
    // A job attempt's own credentials: as a token on its run's workload with the route's role.
    const service::JobCredentials job = job_credentials(req);
    caller.job_id = job.job_id;
    auto workload = svc.job_workload(job.job_id, job.token);
    if (!workload.is_ok()) {
      const Status& st = workload.status();
      return error_response(st, st.code() == StatusCode::kInvalidArgument ? 403 : 0);
    }
    Identity as_job;
    as_job.roles = {need_name(rule->need)};
    as_job.workloads = {*workload};
    return check_scope(svc, as_job, *rule, req);
  }
  auto who = svc.authenticate_token(request_token(req));
  if (!who.is_ok()) {
    Response r = error_response(who.status());
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"trainer\"");
    return r;
  }
  caller.token_id = who->token_id;
  caller.token_name = who->name;
  caller.roles = who->roles;
  if (!who->has(need_name(rule->need))) {
    std::string roles;
    for (const std::string& role : who->roles) roles += (roles.empty() ? "" : ", ") + role;
    return error_response(permission_denied(req.method + " " + pattern + " needs the " + need_name(rule->need) +
                                            " role; token " + who->token_id + " has " + roles));
  }
  if (who->all_workloads) return std::nullopt;
  return check_scope(svc, *who, *rule, req, &caller);
}

namespace {

// The workloads a pipeline's stages name (by name or id): a train or evaluate stage's `workload`,
// a distill stage's `distillation.workload`.
std::vector<std::string> pipeline_workloads(const json& pipeline) {
  std::vector<std::string> out;
  const json stages = pipeline.value("plan", json::object()).value("stages", json::array());
  for (const json& stage : stages) {
    if (!stage.is_object()) continue;
    if (stage.value("workload", json()).is_string()) out.push_back(stage["workload"].get<std::string>());
    const json distillation = stage.value("distillation", json::object());
    if (distillation.is_object() && distillation.value("workload", json()).is_string()) {
      out.push_back(distillation["workload"].get<std::string>());
    }
  }
  return out;
}

// The workloads a listed item belongs to: a workload itself, a distillation's (by name), every
// workload a pipeline's stages name, else the item's own workload.
std::vector<std::string> item_workloads(const std::string& pattern, const json& item) {
  if (pattern == "/v1/workloads") return {item.value("id", std::string())};
  if (pattern == "/v1/distillations") {
    return {item.value("workload", json()).is_string() ? item["workload"].get<std::string>() : workload_of(item)};
  }
  if (pattern == "/v1/pipelines") return pipeline_workloads(item);
  return {workload_of(item)};
}

}  // namespace

void filter_to_workloads(const Caller& caller, const std::string& pattern, Response& response) {
  if (!caller.filtered || response.status < 200 || response.status >= 300) return;
  json doc = json::parse(response.body, nullptr, false);
  if (!doc.is_object()) return;
  std::set<std::string> allowed(caller.only_workloads.begin(), caller.only_workloads.end());
  allowed.insert(caller.only_workload_names.begin(), caller.only_workload_names.end());
  allowed.erase("");
  for (auto& [key, value] : doc.items()) {
    if (!value.is_array()) continue;
    json kept = json::array();
    for (auto& item : value) {
      if (!item.is_object()) {
        kept.push_back(std::move(item));
        continue;
      }
      // Shown when it names a workload and every one it names is the token's.
      const std::vector<std::string> named = item_workloads(pattern, item);
      const bool mine = !named.empty() && std::all_of(named.begin(), named.end(),
                                                      [&](const std::string& w) { return allowed.count(w) != 0; });
      if (mine) kept.push_back(std::move(item));
    }
    value = std::move(kept);
  }
  response.body = doc.dump();
}

}  // namespace trainer::api

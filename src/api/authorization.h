// Who may call which route (docs/security.md): the one role table, and the authorizer that checks
// every request against it. The table says, for each route (method and pattern), the role it
// needs and how the workload it touches is found; docs/security.md's table is printed from it
// (`trainerd --print-roles`), and a route without an entry is refused (and fails a unit test).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/server.h"
#include "service/service.h"

namespace trainer::api {

// The role a route needs.
enum class Need {
  kPublic,   // anyone, no token (the service's info, the dashboard's static files)
  kRead,     // read ⊂ submit ⊂ admin; control includes read
  kSubmit,
  kAdmin,
  kControl,  // the operator's commands
  kJob,      // a job attempt's own token (X-Trainer-Job and Bearer), checked by the handler
};

// How the workload a request touches is found, for a token limited to some workloads (a token
// on every workload skips this). An object of a workload outside the token's answers 404, as a
// missing one does, so ids cannot be probed.
enum class Scope {
  kNone,             // not tied to a workload (the shared catalog: datasets, bundles, base models)
  kAllWorkloads,     // only a token on every workload (service-wide lists and writes)
  kWorkloadPath,     // the first path parameter names the workload
  kRunPath,          // ... a run, its workload
  kSnapshotPath,     // ... a snapshot, its run's workload
  kEvaluationPath,   // ... an evaluation, its workload (none: only a token on every workload)
  kEndpointPath,     // ... an endpoint, its workload (likewise)
  kTrainedModelPath, // ... a registered model, its workload (likewise)
  kComparisonPath,   // ... a comparison, its source run's workload
  kBodyWorkload,     // the JSON body's "workload" (a limited token must name one of its own)
  kQueryWorkload,    // the query's ?workload= (a limited token must name one of its own)
  kListFiltered,     // a list: ?workload= as kQueryWorkload; without it a limited token is answered
                     // the items of its own workloads only (filter_to_workloads())
};

struct RouteRule {
  const char* method;
  const char* pattern;
  Need need;
  Scope scope;
  // Also answered for a job attempt's own credentials (X-Trainer-Job and its bearer token) within
  // its run's workload: the snapshot a job reads back, the endpoint a job's judge calls.
  bool job_too = false;
};

// The role table: every route trainerd serves, in the order of docs/api.md.
const std::vector<RouteRule>& role_table();
// The rule of (method, pattern); null when the table has none.
const RouteRule* find_rule(const std::string& method, const std::string& pattern);
// The names the table and docs/security.md use ("read", "run", ...).
const char* need_name(Need need);
const char* scope_name(Scope scope);
// The table as JSON ({routes: [{method, pattern, role, scope}]}: `trainerd --print-roles`; a
// role of "read or job" for a rule with job_too).
nlohmann::json role_table_json();
// The routes of `router` the table does not name, as "METHOD PATTERN".
std::vector<std::string> routes_without_rule(const http::Router& router);

// Who a request comes from, as authorize() found it (the audit log and the request limits use it).
struct Caller {
  std::string token_id;            // the API token's id ("trainerd": its own); "" for none
  std::string token_name;          // the token's name
  std::vector<std::string> roles;  // the token's roles
  std::string job_id;              // a job attempt's own credentials (X-Trainer-Job); "" for none
  // A limited token's list (Scope::kListFiltered): only the items of these workloads go out (by
  // id, and by name for the lists whose items name workloads by name: distillations, pipelines).
  bool filtered = false;
  std::vector<std::string> only_workloads;
  std::vector<std::string> only_workload_names;
};

// Checks a request that matched (method, `pattern`) against its rule: the caller's bearer token
// authenticated through `service` (401 without a live one, 403 without the role, 404 for an object
// of a workload outside the token's); a route without a rule answers 403. The refusal, or nullopt
// to let it through; `caller` says who it came from, as far as it was found.
std::optional<http::Response> authorize(service::Service& service, const http::Request& req,
                                        const std::string& pattern, Caller& caller);

// A list's answer cut down to the items of `caller.only_workloads` (when `caller.filtered`): every
// top-level array of objects keeps the items whose workload (workload.id, workloadId; a workload
// list's own id) is one of them; an item naming no workload is left out. Answers that are not a
// JSON object with status 2xx pass unchanged.
void filter_to_workloads(const Caller& caller, const std::string& pattern, http::Response& response);

}  // namespace trainer::api

// What stands before every route's handler (docs/security.md): the authorization of
// authorization.h, the request limits of request_limits.h, and the audit log of every write.
#pragma once

#include "http/server.h"
#include "service/config.h"
#include "service/service.h"

namespace trainer::api {

// Installs the guard on `router` (Router::set_guard): each matched request is
//   1. authorized against its role table entry (authorize(): 401, 403, 404);
//   2. counted against its token's rate (limits.requestsPerSecond, limits.requestBurst), the rate
//      of the workload it names or whose run it touches (limits.workloadRequestsPerSecond,
//      limits.workloadRequestBurst) and, when its handler parks or streams, its token's long polls
//      (limits.longPollsPerToken): 429 with Retry-After past any (trainerd's own token, the public
//      routes and a job's own calls are not counted);
//   3. when it writes (not a GET, not a job's own call nor a route a job also calls), recorded in
//      the audit log through `service` with how it was answered, refused ones included. Its body
//      never is.
// `service` is not owned and must outlive the router.
void install_request_guard(http::Router& router, service::Service& service, const service::Limits& limits);

}  // namespace trainer::api

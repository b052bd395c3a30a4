// HTTP/JSON routes of trainerd: translate requests into service calls, and back (docs/api.md).
// Routes only: the server (src/http) and the wiring (apps/trainerd) live elsewhere.
#pragma once

#include "http/server.h"
#include "service/service.h"

namespace trainer::api {

// Installs every route of docs/api.md on `router`, answering from `service` (not owned; must
// outlive the router). Until the service is ready, every route but /v1/info and /metrics
// answers 503 unavailable. Every route checks the caller's API token against the role table
// (authorization.h, docs/security.md). Errors are JSON bodies {"error": {code, message, field?}}.
//
// The events long poll parks its request without a thread; whoever owns the server must call
// Server::wake() on every run change (Service::subscribe_run_changes) so that it answers.
void install_routes(http::Router& router, service::Service& service, const service::Limits& limits);

// The JSON error answer for `status` (the API's error body), with `http_status` (0: the
// status's own, see http_status()).
http::Response error_response(const Status& status, int http_status = 0);

}  // namespace trainer::api

// HTTP/JSON API of trainerd: translates requests into service calls, and back (docs/api.md).
#pragma once

#include <httplib.h>

#include "service/service.h"

namespace trainer::api {

// Installs every route of docs/api.md on `server`, answering from `service` (not owned; must
// outlive the server). Until the service is ready, every route but /v1/info and /metrics
// answers 503 unavailable.
void install_routes(httplib::Server& server, service::Service& service, const service::Limits& limits);

// Entry point of the trainerd executable; returns the process exit code.
int trainerd_main(int argc, char** argv);

}  // namespace trainer::api

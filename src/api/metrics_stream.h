// GET /v1/runs/{ref}/metrics/stream: a run's step metrics as Server-Sent Events, for the
// dashboard's live curves (docs/dashboard.md). Internal to src/api.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "http/server.h"
#include "service/service.h"

namespace trainer::api {

// One Server-Sent Event: `event: NAME`, `data: ` the JSON on one line, and the blank line that
// ends it.
std::string sse_event(std::string_view name, const nlohmann::json& data);

// The stream of run `req.params[0]`: `points` {steps, reset} with every step so far (reset:
// true) and then the steps that are new or changed, `run` {runId, phase, progress, latest,
// cost, ...} after each change of the run, and a last `end` {phase, outcome, failureReason} once
// the run is in a terminal phase, when the stream ends. It waits on the service's run changes
// (no polling) on a thread of its own, and ends as soon as the client has gone. A run that does
// not resolve is answered whole with the API's JSON error.
http::Outcome run_metrics_stream(service::Service& svc, const http::Request& req);

}  // namespace trainer::api

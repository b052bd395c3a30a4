// Passes an upstream HTTP answer on as it comes: trainerd's forwarding of a streamed chat
// completion to an endpoint's serving process, and `trainer endpoints proxy`'s to trainerd.
#pragma once

#include <functional>

#include "common/http_client.h"
#include "http/server.h"

namespace trainer::http {

// A Stream that makes `call` (on the stream's thread) and passes its answer on: a 200 answer as
// server-sent events, each piece written to the client the moment it arrives, byte for byte; any
// other status whole, as it came (an error the upstream answered before streaming). A client that
// goes stops the call, which closes its connection to the upstream. When no answer came,
// `unreachable(failed call)` is the answer. A `call.on_body` given sees each piece of a 200
// answer first (its false stops the call); `done`, when given, gets the call's end.
Stream relay(HttpRequest call, std::function<Response(const HttpResponse&)> unreachable,
             std::function<void(const HttpResponse&)> done = {});

}  // namespace trainer::http

// The OpenAI-compatible HTTP face of `trainer-job serve` (docs/serving.md): /v1/models,
// /v1/chat/completions, /v1/completions (streamed as server-sent events on request), the
// adapters a service attaches and detaches at run time, and the engine's counters.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/serving.h"

namespace trainer::job {

struct ServeHttpOptions {
  std::string host = "127.0.0.1";   // address to listen on
  int port = 0;                     // 0: any free port
  int threads = 256;                // connections served at once (a streaming answer holds one)
  size_t max_body_bytes = 32 << 20; // request bodies over this get 413
  // When set, every request must carry `Authorization: Bearer <api_key>` (else 401 in OpenAI's
  // error shape, `invalid_api_key`); "" = no check (a process started by hand).
  std::string api_key = {};
  // When set, POST /v1/adapters passes the adapter's path through it first: an s3:// URI of an
  // input trainerd staged becomes its verified copy on this node (job/input_fetch.h). A failure
  // is the request's 400, naming it.
  std::function<Status(const std::string& field, std::string* path)> fetch_input = {};
};

class ServeHttp {
 public:
  virtual ~ServeHttp() = default;
  virtual int port() const = 0;
  // The address it listens on, as given ("127.0.0.1", "0.0.0.0" for every IPv4 interface).
  virtual std::string host() const = 0;
  // Serves until stop() (blocks the calling thread).
  virtual void run() = 0;
  virtual void stop() = 0;
};

// Binds `options.host:port`; `engine` must outlive the server.
Result<std::unique_ptr<ServeHttp>> bind_serve_http(engine::ServingEngine& engine, const ServeHttpOptions& options);

}  // namespace trainer::job

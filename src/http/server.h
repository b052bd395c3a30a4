// trainerd's HTTP/1.1 server: our own Request, Response and Router, served asynchronously.
//
// The implementation (server.cpp) uses Boost.Beast and Boost.Asio; nothing of them shows here.
// A few I/O threads read and write every connection; handlers run on a small worker pool, so a
// slow handler never holds up reading or writing. A handler may answer later instead of at once
// (Park): the request then waits without a thread until Server::wake() or its deadline, and
// is looked at again on a poller thread of its own, away from the handlers' workers.
//
// What a hostile client meets (ServerOptions): a deadline to send the request head and another
// for the body, a bound on header bytes and header count (431), a body limit per route enforced
// while reading, Content-Length or chunked (413, without reading the rest), and a bound on open
// connections (past it: 503 and close).
//
// TLS (ServerOptions::tls_cert_file and tls_key_file): every connection is HTTPS only, its
// handshake bounded by the header deadline; a client that speaks plain HTTP to it is closed
// without an answer. Everything above (parks, streams, the hostile-client bounds) is the same.
//
// A handler may also stream its answer (Stream): the head goes out with Transfer-Encoding:
// chunked and each StreamWriter::write is one chunk sent at once, from a thread of the stream's
// own; at most `max_streams` run at once (past it: 503).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace trainer::http {

struct Request {
  std::string method;                                       // "GET", "POST", ...
  std::string path;                                         // percent-decoded, without the query
  std::vector<std::pair<std::string, std::string>> query;   // decoded, in order
  std::vector<std::pair<std::string, std::string>> headers; // names as sent
  std::vector<std::string> params;                          // the route's {placeholders}, in order
  std::string body;
  std::string remote_address;                               // the peer's IP address; "" when unknown

  bool has_query(const std::string& name) const;
  // The first value of query parameter `name`; "" when absent.
  std::string query_value(const std::string& name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";  // "": no Content-Type (a bodiless 304)
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  bool close = false;  // close the connection after this answer
};

// A request that waits for something to happen. The server calls `poll(false)` once when it is
// parked and after each Server::wake(), and answers with what it returns, if anything; when
// `until` passes first it calls `poll(true)`, which must answer. Polls run on the server's own
// poller thread, never on an I/O thread nor on the workers that run handlers, so parked requests
// (however many) never delay other requests; `poll` may run after the client has gone.
// Requests parked under the same non-empty `key` wait for the same thing (their poll depends on
// the key only): after a wake one of them is polled and its answer goes to all of them, so 500
// followers of one run cost one poll per change, not 500.
struct Park {
  std::chrono::steady_clock::time_point until;
  std::function<std::optional<Response>(bool final)> poll;
  std::string key;
};

// What a streaming answer's producer writes to. Not thread-safe: the producer's thread only.
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  // Sends `bytes` as one chunk at once (the stream's head before the first); waits until the
  // chunk is written. False once the client has gone or the server stops: stop producing.
  virtual bool write(std::string_view bytes) = 0;
  // Before the first write only: answers `response` whole instead of the stream (an error found
  // before streaming). Ignored after a write.
  virtual void answer(Response response) = 0;
  // False once the client has gone (noticed without writing) or the server stops.
  virtual bool alive() const = 0;
};

// An answer streamed as it is produced: `head` (its status, content type and headers; its body
// is ignored) with Transfer-Encoding: chunked, then what `produce` writes, each write one chunk;
// the answer ends when `produce` returns (or throws), and the connection closes after it.
// `produce` runs on a thread of its own, neither an I/O thread nor a handler worker; the head
// goes out with the first write (or when `produce` returns without writing), so the producer
// may still answer() whole until then.
struct Stream {
  Response head;
  std::function<void(StreamWriter&)> produce;
};

using Outcome = std::variant<Response, Park, Stream>;
using Handler = std::function<Outcome(const Request&)>;
// Renders an error answer (the server's own: 404, 405, 408, 413, 431, 503, ...).
using ErrorRenderer = std::function<Response(int http_status, const Status& status)>;

// Routes by method and path pattern. A pattern is a path whose segments may be `{name}` (one
// non-empty segment) or, as the last segment, `{name...}` (the rest of the path, slashes
// included). Routes are tried in the order added.
class Router {
 public:
  Router();
  // `max_body_bytes`: requests with a larger body get 413 before their body is read.
  void add(const std::string& method, const std::string& pattern, size_t max_body_bytes, Handler handler);
  void set_error_renderer(ErrorRenderer renderer);
  // Runs on every request before routing; an answer it gives ends the request there.
  void set_gate(std::function<std::optional<Response>(const Request&)> gate);
  // Runs on every request that matched a route, after the gate, with the route's pattern and its
  // params filled in, in place of the route's handler: it decides whether to call `handler` and
  // answers its outcome or another (the API's authorization, audit log and request limits:
  // docs/security.md). Without a guard the handler answers.
  using Guard = std::function<Outcome(const Request&, const std::string& pattern, const Handler& handler)>;
  void set_guard(Guard guard);
  // Every route added, as (method, pattern), in the order added.
  std::vector<std::pair<std::string, std::string>> routes() const;

  struct Match {
    const Handler* handler = nullptr;  // null: no route (see status)
    int status = 0;                    // 404 (no path matches) or 405 (path matches, method does not)
    size_t max_body_bytes = 0;
    std::vector<std::string> params;
    const std::string* pattern = nullptr;  // the matched route's pattern
  };
  Match match(const std::string& method, const std::string& path) const;
  // Routes `request` (its params filled from the match) and runs the handler; never throws.
  Outcome dispatch(Request& request) const;
  Response error(int http_status, const Status& status) const;
  // The largest body any route accepts.
  size_t max_body_bytes() const;

 private:
  struct Route {
    std::string method;
    std::string pattern;
    std::vector<std::string> segments;
    bool rest = false;  // the last segment is {name...}
    size_t max_body_bytes = 0;
    Handler handler;
  };
  std::vector<Route> routes_;
  ErrorRenderer render_;
  std::function<std::optional<Response>(const Request&)> gate_;
  Guard guard_;
};

struct ServerOptions {
  std::string host = "127.0.0.1";                        // address to listen on
  int port = 0;                                          // 0: any free port
  int io_threads = 2;                                    // threads that read and write sockets
  int worker_threads = 8;                                // threads that run handlers
  size_t max_connections = 1024;                         // open connections; past it 503 and close
  size_t max_streams = 256;                              // streamed answers at once; past it 503
  size_t max_header_bytes = 16 * 1024;                   // request line and headers, in bytes
  size_t max_header_count = 100;                         // header fields per request
  std::chrono::milliseconds header_timeout{10'000};      // to send the request head (and idle keep-alive)
  std::chrono::milliseconds body_timeout{60'000};        // to send the body, once the head is in
  // HTTPS: the PEM certificate (chain, leaf first) and its PEM private key; both or neither.
  // "": plain HTTP. serve() refuses a file it cannot read or use, or a key that does not match
  // the certificate (InvalidArgument, field "tls_cert_file" or "tls_key_file", naming the file).
  std::string tls_cert_file;
  std::string tls_key_file;
};

class Server {
 public:
  virtual ~Server() = default;
  // The port it listens on.
  virtual int port() const = 0;
  // Re-polls every parked request soon (on the poller thread; wakes that come during a sweep
  // make one more sweep, not one each). Cheap and safe from any thread.
  virtual void wake() = 0;
  // Stops accepting, closes every connection and joins every thread. Idempotent. Running streams
  // see write() and alive() turn false; stop() waits for their producers to return.
  virtual void stop() = 0;
};

// Binds and starts serving `router` (not owned; must outlive the server).
Result<std::unique_ptr<Server>> serve(const ServerOptions& options, const Router& router);

// Percent-decodes `text`; `plus_is_space` for query strings.
std::string url_decode(const std::string& text, bool plus_is_space);

}  // namespace trainer::http

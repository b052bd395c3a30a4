// The server of server.h, inside the trainer_http library only: the connection's interface
// (connection.cpp, one per accepted socket, over a plain or a TLS stream) and the server that
// accepts, parks and streams (server.cpp). Boost stays out of server.h; it is here.
//
// Threads: `io_threads` threads run the io_context; each connection lives on its own strand, so
// its callbacks never run concurrently. Handlers run on `workers_`; every poll of a parked
// request (its first look, the sweeps after wake(), its final poll at the deadline) runs on the
// one `poller_` thread, so however many requests are parked, the workers stay free for other
// requests. Answers are posted back to the connection's strand to be written. A streamed answer's
// producer runs on a thread of its own (counted, at most max_streams) and writes through a
// ChunkedWriter (stream_writer.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "http/server.h"
#include "http/stream_writer.h"

namespace trainer::http::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class ServerImpl;

// What the server sees of a connection, whichever its stream.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  virtual ~Connection() = default;
  virtual void start() = 0;
  // Writes `response` (from any thread) and goes on with the next request.
  virtual void send(Response response) = 0;
  // Arms the deadline of parked request `id` (from any thread).
  virtual void arm_park(uint64_t id, std::chrono::steady_clock::time_point until) = 0;
  // A streamed answer's writer on this connection (closes it, after draining, once complete).
  virtual std::unique_ptr<ChunkedWriter> stream_writer(Response head, std::chrono::milliseconds timeout) = 0;
};

// A connection of `server` on `socket` (connection.cpp): over TLS with `tls` (the server's
// context), else plain. `refused`: answer 503 (too many connections) and close, without reading a
// request.
std::shared_ptr<Connection> make_connection(ServerImpl& server, tcp::socket socket, bool refused,
                                            asio::ssl::context* tls);

class ServerImpl : public Server {
 public:
  ServerImpl(const ServerOptions& options, const Router& router);
  ~ServerImpl() override;

  Status listen();
  int port() const override { return port_; }
  // One sweep at a time (one poller thread); wakes while one is queued add nothing, and a wake
  // during a sweep queues exactly one more (the sweep may have looked before the change).
  void wake() override;
  void stop() override;

  // ---- for connections
  const ServerOptions& options() const { return options_; }
  const Router& router() const { return router_; }
  asio::thread_pool& workers() { return workers_; }
  void park(const std::shared_ptr<Connection>& conn, Park park);
  // The deadline of parked request `id` passed: answer it with poll(true).
  void expire(uint64_t id);
  // Runs `stream`'s producer on a thread of its own, or answers 503 past max_streams.
  void start_stream(const std::shared_ptr<Connection>& conn, Stream stream);
  void connection_closed(bool refused);

 private:
  struct Parked {
    std::shared_ptr<Connection> conn;
    std::function<std::optional<Response>(bool)> poll;
    std::string key;  // Park::key
  };

  static std::optional<Response> run_poll(const Parked& p, bool final);
  std::shared_ptr<Parked> find(uint64_t id);
  std::shared_ptr<Parked> take(uint64_t id);
  void sweep();
  void accept();

  // Constant after construction.
  const ServerOptions options_;
  const Router& router_;
  int port_ = 0;
  std::unique_ptr<asio::ssl::context> tls_;  // set by listen() when the options name a certificate

  std::atomic<size_t> connections_{0};  // open connections being served
  std::atomic<size_t> refusing_{0};     // connections being answered 503
  std::atomic<bool> sweep_pending_{false};
  std::mutex park_mu_;
  uint64_t next_park_id_ = 1;                            // guarded by park_mu_
  std::map<uint64_t, std::shared_ptr<Parked>> parked_;  // guarded by park_mu_
  std::once_flag stopped_;
  // Streamed answers: their count and writers (to cancel when stopping); their threads are
  // detached and touch nothing of the server after the count drops.
  std::mutex streams_mu_;
  std::condition_variable streams_done_;
  size_t streams_ = 0;                  // guarded by streams_mu_
  bool stopping_ = false;               // guarded by streams_mu_
  std::set<ChunkedWriter*> writers_;    // guarded by streams_mu_

  // Destroyed before the counters above: pending handlers hold connections.
  asio::io_context ioc_;
  tcp::acceptor acceptor_{asio::make_strand(ioc_)};
  asio::thread_pool workers_;
  asio::thread_pool poller_;  // every poll of a parked request, one at a time
  std::vector<std::thread> io_threads_;
};

}  // namespace trainer::http::detail

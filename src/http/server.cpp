// The server of server.h on Boost.Beast (HTTP/1.1 parsing) and Boost.Asio (sockets, timers,
// the worker pool).
//
// Threads: `io_threads` threads run the io_context; each connection lives on its own strand, so
// its callbacks never run concurrently. Handlers run on `workers_`; every poll of a parked
// request (its first look, the sweeps after wake(), its final poll at the deadline) runs on the
// one `poller_` thread, so however many requests are parked, the workers stay free for other
// requests. Answers are posted back to the connection's strand to be written. A streamed answer's
// producer runs on a thread of its own (counted, at most max_streams) and writes through a
// ChunkedWriter (stream_writer.h).
//
// TLS: each connection's stream is an ssl_stream over the beast::tcp_stream (ConnectionOn<TlsStream>)
// and starts with the handshake, under the header deadline; a plain server's is the tcp_stream
// itself (ConnectionOn<PlainStream>). Deadlines, the socket and closing go to the lowest layer,
// the tcp_stream, either way.
#include "http/server.h"

#include <atomic>
#include <condition_variable>
#include <map>
#include <set>
#include <mutex>
#include <thread>
#include <type_traits>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "common/subprocess.h"
#include "http/stream_writer.h"
#include "http/tls_context.h"

namespace trainer::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// After an answer that closes the connection, the unread rest of the request is drained (read
// and dropped) for at most this long in all, this long without a byte, and this many bytes, so
// that a client still sending its body reads the answer instead of a reset.
constexpr std::chrono::milliseconds kLingerTime{5000};
constexpr std::chrono::milliseconds kLingerIdle{1000};
constexpr size_t kLingerBytes = 16 << 20;
// Connections refused past max_connections that may be answering their 503 at once.
constexpr size_t kMaxRefusing = 256;

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
  virtual std::unique_ptr<detail::ChunkedWriter> stream_writer(Response head, std::chrono::milliseconds timeout) = 0;
};

// A connection's stream over `socket`; `tls` is the server's context (TlsStream only).
template <class AsyncStream>
AsyncStream make_stream(tcp::socket socket, ssl::context* tls);
template <>
PlainStream make_stream<PlainStream>(tcp::socket socket, ssl::context*) { return PlainStream(std::move(socket)); }
template <>
TlsStream make_stream<TlsStream>(tcp::socket socket, ssl::context* tls) { return TlsStream(std::move(socket), *tls); }

// `AsyncStream`: PlainStream or TlsStream.
template <class AsyncStream>
class ConnectionOn final : public Connection {
 public:
  // `refused`: answer 503 (too many connections) and close, without reading a request. `tls`:
  // the server's context when `AsyncStream` is TlsStream.
  ConnectionOn(ServerImpl& server, tcp::socket socket, bool refused, ssl::context* tls);
  ~ConnectionOn() override;
  void start() override;
  void send(Response response) override;
  void arm_park(uint64_t id, std::chrono::steady_clock::time_point until) override;
  std::unique_ptr<detail::ChunkedWriter> stream_writer(Response head, std::chrono::milliseconds timeout) override;
  // For a streamed answer (on the strand, once it is complete): closes after draining the rest.
  void close_after_write();

 private:
  std::shared_ptr<ConnectionOn> self() { return std::static_pointer_cast<ConnectionOn>(shared_from_this()); }
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }
  void begin();  // after the handshake, if any
  void read_head();
  void on_head(beast::error_code ec);
  void read_body();
  void on_body(beast::error_code ec);
  void dispatch();
  void fail(int http_status, const Status& status);
  void write(Response response);
  void drain();
  void close();

  ServerImpl& server_;
  AsyncStream stream_;
  const bool refused_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  Request request_;
  bool keep_alive_ = false;
  bool body_pending_ = false;  // the request's body has not been read (or not all of it)
  size_t body_limit_ = 0;      // the route's body limit, in bytes
  std::shared_ptr<bhttp::response<bhttp::string_body>> out_;
  asio::steady_timer park_timer_;
  std::array<char, 16 * 1024> drain_buf_{};
  size_t drained_ = 0;
  std::chrono::steady_clock::time_point linger_until_;
};

class ServerImpl : public Server {
 public:
  ServerImpl(const ServerOptions& options, const Router& router)
      : options_(options),
        router_(router),
        workers_(static_cast<size_t>(std::max(1, options.worker_threads))),
        poller_(1) {}

  ~ServerImpl() override { stop(); }

  Status listen() {
    if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
      auto context = server_tls_context(options_.tls_cert_file, options_.tls_key_file);
      if (!context.is_ok()) return context.status();
      tls_ = std::move(*context);
    }
    beast::error_code ec;
    auto address = asio::ip::make_address(options_.host, ec);
    if (ec) return invalid_argument("host: '" + options_.host + "' is not an IP address: " + ec.message());
    tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (ec) {
      return unavailable("cannot listen on " + options_.host + ":" + std::to_string(options_.port) + ": " +
                         ec.message());
    }
    // A child process must never hold our port (asio opens sockets without SOCK_CLOEXEC).
    TRAINER_RETURN_IF_ERROR(mark_close_on_exec(acceptor_.native_handle(), "the listening socket"));
    acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return unavailable("cannot listen on " + options_.host + ":" + std::to_string(options_.port) + ": " +
                         ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    accept();
    for (int i = 0; i < std::max(1, options_.io_threads); ++i) {
      io_threads_.emplace_back([this] { ioc_.run(); });
    }
    return Status::ok();
  }

  int port() const override { return port_; }

  // One sweep at a time (one poller thread); wakes while one is queued add nothing, and a wake
  // during a sweep queues exactly one more (the sweep may have looked before the change).
  void wake() override {
    if (sweep_pending_.exchange(true)) return;
    asio::post(poller_, [this] { sweep(); });
  }

  void stop() override {
    std::call_once(stopped_, [this] {
      {
        std::unique_lock<std::mutex> lock(streams_mu_);
        stopping_ = true;
        for (auto* w : writers_) w->cancel();
        streams_done_.wait(lock, [this] { return streams_ == 0; });
      }
      asio::post(acceptor_.get_executor(), [this] {
        beast::error_code ec;
        acceptor_.close(ec);
      });
      ioc_.stop();
      for (auto& t : io_threads_) t.join();
      workers_.stop();
      workers_.join();
      poller_.stop();
      poller_.join();
      std::lock_guard<std::mutex> lock(park_mu_);
      parked_.clear();
    });
  }

  // ---- for connections
  const ServerOptions& options() const { return options_; }
  const Router& router() const { return router_; }
  asio::thread_pool& workers() { return workers_; }

  void park(const std::shared_ptr<Connection>& conn, Park park) {
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(park_mu_);
      id = next_park_id_++;
      parked_[id] = std::make_shared<Parked>(Parked{conn, std::move(park.poll), std::move(park.key)});
    }
    conn->arm_park(id, park.until);
    // A change may have come between the handler's look and the parking: look once more at
    // this request alone (a sweep of every parked request per new one would cost n² polls
    // while n followers arrive).
    asio::post(poller_, [this, id] {
      std::shared_ptr<Parked> p = find(id);
      if (!p) return;
      auto r = run_poll(*p, false);
      if (r && take(id)) p->conn->send(std::move(*r));
    });
  }

  // The deadline of parked request `id` passed: answer it with poll(true).
  void expire(uint64_t id) {
    std::shared_ptr<Parked> p = take(id);
    if (!p) return;
    asio::post(poller_, [p] { p->conn->send(run_poll(*p, true).value()); });
  }

  // Runs `stream`'s producer on a thread of its own, or answers 503 past max_streams.
  void start_stream(const std::shared_ptr<Connection>& conn, Stream stream) {
    {
      std::lock_guard<std::mutex> lock(streams_mu_);
      if (!stopping_ && streams_ < options_.max_streams) {
        ++streams_;
      } else {
        Response r = router_.error(503, unavailable("the server is streaming its maximum of " +
                                                    std::to_string(options_.max_streams) + " answers; retry later"));
        r.close = true;
        return conn->send(std::move(r));
      }
    }
    std::thread([this, conn = conn, stream = std::move(stream)]() mutable {
      {
        std::unique_ptr<detail::ChunkedWriter> writer = conn->stream_writer(std::move(stream.head), options_.body_timeout);
        {
          std::lock_guard<std::mutex> lock(streams_mu_);
          writers_.insert(writer.get());
          if (stopping_) writer->cancel();
        }
        try {
          stream.produce(*writer);
        } catch (...) {  // the answer ends where it was
        }
        writer->finish();
        std::lock_guard<std::mutex> lock(streams_mu_);
        writers_.erase(writer.get());
      }
      stream = Stream{};
      conn.reset();
      std::lock_guard<std::mutex> lock(streams_mu_);
      --streams_;
      streams_done_.notify_all();
    }).detach();
  }

  void connection_closed(bool refused) {
    if (refused) {
      refusing_.fetch_sub(1);
    } else {
      connections_.fetch_sub(1);
    }
  }

 private:
  std::shared_ptr<Connection> make_connection(tcp::socket socket, bool refused) {
    if (tls_) return std::make_shared<ConnectionOn<TlsStream>>(*this, std::move(socket), refused, tls_.get());
    return std::make_shared<ConnectionOn<PlainStream>>(*this, std::move(socket), refused, nullptr);
  }

  struct Parked {
    std::shared_ptr<Connection> conn;
    std::function<std::optional<Response>(bool)> poll;
    std::string key;  // Park::key
  };

  static std::optional<Response> run_poll(const Parked& p, bool final) {
    try {
      auto r = p.poll(final);
      if (r || !final) return r;
      Response fallback;
      fallback.status = 500;
      fallback.body = "{\"error\":{\"code\":\"internal\",\"message\":\"a parked request ended without an answer\"}}\n";
      return fallback;
    } catch (...) {
      Response fallback;
      fallback.status = 500;
      fallback.body = "{\"error\":{\"code\":\"internal\",\"message\":\"unexpected error while waiting\"}}\n";
      return fallback;
    }
  }

  std::shared_ptr<Parked> find(uint64_t id) {
    std::lock_guard<std::mutex> lock(park_mu_);
    auto it = parked_.find(id);
    return it == parked_.end() ? nullptr : it->second;
  }

  std::shared_ptr<Parked> take(uint64_t id) {
    std::lock_guard<std::mutex> lock(park_mu_);
    auto it = parked_.find(id);
    if (it == parked_.end()) return nullptr;
    auto p = std::move(it->second);
    parked_.erase(it);
    return p;
  }

  void sweep() {
    sweep_pending_.store(false);
    std::vector<std::pair<uint64_t, std::shared_ptr<Parked>>> all;
    {
      std::lock_guard<std::mutex> lock(park_mu_);
      all.assign(parked_.begin(), parked_.end());
    }
    // Parked requests of one key share one poll's answer.
    std::map<std::string, std::optional<Response>> by_key;
    for (auto& [id, p] : all) {
      std::optional<Response> r;
      if (p->key.empty()) {
        r = run_poll(*p, false);
      } else {
        auto it = by_key.find(p->key);
        if (it == by_key.end()) it = by_key.emplace(p->key, run_poll(*p, false)).first;
        r = it->second;
      }
      if (!r) continue;
      if (take(id)) p->conn->send(std::move(*r));
    }
  }

  void accept() {
    acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        // Best effort: spawn() closes it in every child anyway.
        (void)mark_close_on_exec(socket.native_handle(), "an accepted connection");
        if (connections_.fetch_add(1) < options_.max_connections) {
          make_connection(std::move(socket), false)->start();
        } else {
          connections_.fetch_sub(1);
          if (refusing_.fetch_add(1) < kMaxRefusing) {
            make_connection(std::move(socket), true)->start();
          } else {
            refusing_.fetch_sub(1);
            socket.close(ignored);
          }
        }
      }
      accept();
    });
  }

  // Constant after construction.
  const ServerOptions options_;
  const Router& router_;
  int port_ = 0;
  std::unique_ptr<ssl::context> tls_;  // set by listen() when the options name a certificate

  std::atomic<size_t> connections_{0};  // open connections being served
  std::atomic<size_t> refusing_{0};     // connections being answered 503
  std::atomic<bool> sweep_pending_{false};
  std::mutex park_mu_;
  uint64_t next_park_id_ = 1;                                 // guarded by park_mu_
  std::map<uint64_t, std::shared_ptr<Parked>> parked_;       // guarded by park_mu_
  std::once_flag stopped_;
  // Streamed answers: their count and writers (to cancel when stopping); their threads are
  // detached and touch nothing of the server after the count drops.
  std::mutex streams_mu_;
  std::condition_variable streams_done_;
  size_t streams_ = 0;                               // guarded by streams_mu_
  bool stopping_ = false;                            // guarded by streams_mu_
  std::set<detail::ChunkedWriter*> writers_;         // guarded by streams_mu_

  // Destroyed before the counters above: pending handlers hold connections.
  asio::io_context ioc_;
  tcp::acceptor acceptor_{asio::make_strand(ioc_)};
  asio::thread_pool workers_;
  asio::thread_pool poller_;  // every poll of a parked request, one at a time
  std::vector<std::thread> io_threads_;
};

template <class AsyncStream>
ConnectionOn<AsyncStream>::ConnectionOn(ServerImpl& server, tcp::socket socket, bool refused, ssl::context* tls)
    : server_(server), stream_(make_stream<AsyncStream>(std::move(socket), tls)), refused_(refused), park_timer_(stream_.get_executor()) {}

template <class AsyncStream>
ConnectionOn<AsyncStream>::~ConnectionOn() { server_.connection_closed(refused_); }

template <class AsyncStream>
void ConnectionOn<AsyncStream>::start() {
  auto self = this->self();
  asio::dispatch(stream_.get_executor(), [self] {
    if constexpr (std::is_same_v<AsyncStream, TlsStream>) {
      // A client that does not finish its handshake within the header deadline (or speaks plain
      // HTTP) is closed without an answer: there is no channel to answer on.
      self->tcp().expires_after(self->server_.options().header_timeout);
      self->stream_.async_handshake(ssl::stream_base::server, [self](beast::error_code ec) {
        if (ec) return self->close();
        self->begin();
      });
    } else {
      self->begin();
    }
  });
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::begin() {
  if (refused_) {
    keep_alive_ = false;
    body_pending_ = true;  // the request was not read
    fail(503, unavailable("trainerd is serving its maximum of " + std::to_string(server_.options().max_connections) +
                          " connections; retry later"));
    return;
  }
  read_head();
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::read_head() {
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(server_.options().max_header_bytes));
  parser_->body_limit(server_.router().max_body_bytes());
  request_ = Request{};
  body_pending_ = false;
  tcp().expires_after(server_.options().header_timeout);
  bhttp::async_read_header(stream_, buffer_, *parser_,
                           [self = this->self()](beast::error_code ec, size_t) { self->on_head(ec); });
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::on_head(beast::error_code ec) {
  if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
      ec == asio::error::connection_reset || ec == asio::error::eof || ec == ssl::error::stream_truncated) {
    return close();
  }
  keep_alive_ = false;
  body_pending_ = true;
  if (ec == bhttp::error::header_limit) {
    return fail(431, invalid_field("headers", "the request line and headers are over the limit of " +
                                                 std::to_string(server_.options().max_header_bytes) + " bytes"));
  }
  if (ec == bhttp::error::body_limit) {
    return fail(413, Status(StatusCode::kResourceExhausted, "body",
                                "over the limit of " + std::to_string(server_.router().max_body_bytes()) + " bytes"));
  }
  if (ec) return fail(400, invalid_field("request", "not valid HTTP/1.1: " + ec.message()));

  const auto& head = parser_->get();
  beast::error_code peer_ec;
  const tcp::endpoint peer = tcp().socket().remote_endpoint(peer_ec);
  if (!peer_ec) request_.remote_address = peer.address().to_string();
  size_t count = 0;
  for (const auto& field : head) {
    ++count;
    request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  if (count > server_.options().max_header_count) {
    return fail(431, invalid_field("headers", std::to_string(count) + " header fields are over the limit of " +
                                                 std::to_string(server_.options().max_header_count)));
  }
  request_.method = std::string(head.method_string());
  std::string target(head.target());
  size_t q = target.find('?');
  request_.path = url_decode(target.substr(0, q), false);
  if (q != std::string::npos) {
    std::string query = target.substr(q + 1);
    size_t start = 0;
    while (start <= query.size()) {
      size_t amp = query.find('&', start);
      if (amp == std::string::npos) amp = query.size();
      std::string item = query.substr(start, amp - start);
      if (!item.empty()) {
        size_t eq = item.find('=');
        request_.query.emplace_back(url_decode(item.substr(0, eq), true),
                                    eq == std::string::npos ? "" : url_decode(item.substr(eq + 1), true));
      }
      start = amp + 1;
    }
  }

  // The route decides how large a body may be.
  auto match = server_.router().match(request_.method, request_.path);
  size_t limit = match.handler ? match.max_body_bytes : 0;
  auto length = parser_->content_length();
  if (length && *length > limit) {
    return fail(413, Status(StatusCode::kResourceExhausted, "body",
                                std::to_string(*length) + " bytes is over the limit of " + std::to_string(limit) +
                                    " bytes for " + request_.method + " " + request_.path));
  }
  if (!match.handler && !parser_->is_done()) {
    // Not worth reading: answer (404 or 405) and close.
    // (With no handler, dispatch answers the error at once.)
    Outcome answer = server_.router().dispatch(request_);
    Response r = std::holds_alternative<Response>(answer) ? std::get<Response>(std::move(answer))
                                                          : server_.router().error(500, internal_error("no route"));
    r.close = true;
    return write(std::move(r));
  }
  parser_->body_limit(limit);
  body_limit_ = limit;
  keep_alive_ = head.keep_alive();
  if (parser_->is_done()) {
    body_pending_ = false;
    return dispatch();
  }
  auto expect = head.find(bhttp::field::expect);
  if (expect != head.end() && beast::iequals(expect->value(), "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    tcp().expires_after(server_.options().body_timeout);
    asio::async_write(stream_, asio::buffer(kContinue), [self = this->self()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->read_body();
    });
    return;
  }
  read_body();
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::read_body() {
  tcp().expires_after(server_.options().body_timeout);
  bhttp::async_read(stream_, buffer_, *parser_,
                    [self = this->self()](beast::error_code ec, size_t) { self->on_body(ec); });
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::on_body(beast::error_code ec) {
  if (ec == bhttp::error::body_limit) {
    keep_alive_ = false;
    return fail(413, Status(StatusCode::kResourceExhausted, "body",
                                "over the limit of " + std::to_string(body_limit_) + " bytes for " + request_.method +
                                    " " + request_.path));
  }
  if (ec == beast::error::timeout || ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
      ec == asio::error::eof || ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
      ec == ssl::error::stream_truncated) {
    return close();
  }
  if (ec) {
    keep_alive_ = false;
    return fail(400, invalid_field("body", "could not be read: " + ec.message()));
  }
  body_pending_ = false;
  dispatch();
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::dispatch() {
  request_.body = std::move(parser_->get().body());
  asio::post(server_.workers(), [self = this->self()] {
    Outcome outcome = self->server_.router().dispatch(self->request_);
    if (auto* park = std::get_if<Park>(&outcome)) {
      self->server_.park(self, std::move(*park));
    } else if (auto* stream = std::get_if<Stream>(&outcome)) {
      self->server_.start_stream(self, std::move(*stream));
    } else {
      self->send(std::move(std::get<Response>(outcome)));
    }
  });
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::fail(int http_status, const Status& status) {
  Response r = server_.router().error(http_status, status);
  r.close = true;
  write(std::move(r));
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::send(Response response) {
  asio::post(stream_.get_executor(),
             [self = this->self(), response = std::move(response)]() mutable { self->write(std::move(response)); });
}

template <class AsyncStream>
std::unique_ptr<detail::ChunkedWriter> ConnectionOn<AsyncStream>::stream_writer(Response head,
                                                                           std::chrono::milliseconds timeout) {
  return std::make_unique<detail::ChunkedWriter>(stream_, this->self(), std::move(head), timeout,
                                                 [self = this->self()] { self->close_after_write(); });
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::arm_park(uint64_t id, std::chrono::steady_clock::time_point until) {
  asio::post(stream_.get_executor(), [self = this->self(), id, until] {
    self->park_timer_.expires_at(until);
    self->park_timer_.async_wait([self, id](beast::error_code ec) {
      if (!ec) self->server_.expire(id);
    });
  });
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::write(Response response) {
  bool keep = keep_alive_ && !response.close && !body_pending_;
  out_ = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(response.status), 11);
  if (!response.content_type.empty()) out_->set(bhttp::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) out_->set(name, value);
  out_->body() = std::move(response.body);
  out_->keep_alive(keep);
  out_->prepare_payload();
  tcp().expires_after(server_.options().body_timeout);
  bhttp::async_write(stream_, *out_, [self = this->self(), keep](beast::error_code ec, size_t) {
    self->out_.reset();
    if (ec) return self->close();
    if (keep) return self->read_head();
    self->close_after_write();
  });
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::close_after_write() {
  beast::error_code ec;
  tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  drained_ = 0;
  linger_until_ = std::chrono::steady_clock::now() + kLingerTime;
  drain();
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::drain() {
  auto now = std::chrono::steady_clock::now();
  if (now >= linger_until_) return close();
  tcp().expires_after(std::min<std::chrono::steady_clock::duration>(kLingerIdle, linger_until_ - now));
  stream_.async_read_some(asio::buffer(drain_buf_), [self = this->self()](beast::error_code ec, size_t n) {
    self->drained_ += n;
    if (ec || self->drained_ > kLingerBytes) return self->close();
    self->drain();
  });
}

template <class AsyncStream>
void ConnectionOn<AsyncStream>::close() {
  beast::error_code ec;
  park_timer_.cancel();
  tcp().socket().close(ec);
}

}  // namespace

// ---- serve

Result<std::unique_ptr<Server>> serve(const ServerOptions& options, const Router& router) {
  auto server = std::make_unique<ServerImpl>(options, router);
  Status st = server->listen();
  if (!st.is_ok()) return st;
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace trainer::http

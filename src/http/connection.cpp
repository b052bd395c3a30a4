// A connection of the server (server_impl.h): reads a request, finds its route, runs its handler
// on the server's workers, parks it or streams its answer through the server, and writes the
// answer; over TLS, it starts with the handshake.
//
// TLS: each connection's stream is an ssl_stream over the beast::tcp_stream (ConnectionOn<TlsStream>)
// and starts with the handshake, under the header deadline; a plain server's is the tcp_stream
// itself (ConnectionOn<PlainStream>). Deadlines, the socket and closing go to the lowest layer,
// the tcp_stream, either way.
#include <array>
#include <type_traits>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "http/server_impl.h"

namespace trainer::http::detail {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = asio::ssl;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// After an answer that closes the connection, the unread rest of the request is drained (read
// and dropped) for at most this long in all, this long without a byte, and this many bytes, so
// that a client still sending its body reads the answer instead of a reset.
constexpr std::chrono::milliseconds kLingerTime{5000};
constexpr std::chrono::milliseconds kLingerIdle{1000};
constexpr size_t kLingerBytes = 16 << 20;

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
  std::unique_ptr<ChunkedWriter> stream_writer(Response head, std::chrono::milliseconds timeout) override;
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
std::unique_ptr<ChunkedWriter> ConnectionOn<AsyncStream>::stream_writer(Response head,
                                                                           std::chrono::milliseconds timeout) {
  return std::make_unique<ChunkedWriter>(stream_, this->self(), std::move(head), timeout,
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

std::shared_ptr<Connection> make_connection(ServerImpl& server, tcp::socket socket, bool refused,
                                            asio::ssl::context* tls) {
  if (tls) return std::make_shared<ConnectionOn<TlsStream>>(server, std::move(socket), refused, tls);
  return std::make_shared<ConnectionOn<PlainStream>>(server, std::move(socket), refused, nullptr);
}

}  // namespace trainer::http::detail

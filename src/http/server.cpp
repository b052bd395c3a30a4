// The server of server.h (declared in server_impl.h) on Boost.Beast (HTTP/1.1 parsing) and
// Boost.Asio (sockets, timers, the worker pool): listening, accepting, parked requests and
// streamed answers. Each accepted socket becomes a connection (connection.cpp).
#include "http/server.h"

#include <boost/beast/core.hpp>

#include "common/subprocess.h"
#include "http/server_impl.h"
#include "http/tls_context.h"

namespace trainer::http {
namespace detail {
namespace {

namespace beast = boost::beast;

// Connections refused past max_connections that may be answering their 503 at once.
constexpr size_t kMaxRefusing = 256;

}  // namespace

ServerImpl::ServerImpl(const ServerOptions& options, const Router& router)
    : options_(options),
      router_(router),
      workers_(static_cast<size_t>(std::max(1, options.worker_threads))),
      poller_(1) {}

ServerImpl::~ServerImpl() { stop(); }

Status ServerImpl::listen() {
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

void ServerImpl::wake() {
  if (sweep_pending_.exchange(true)) return;
  asio::post(poller_, [this] { sweep(); });
}

void ServerImpl::stop() {
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

void ServerImpl::park(const std::shared_ptr<Connection>& conn, Park park) {
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

void ServerImpl::expire(uint64_t id) {
  std::shared_ptr<Parked> p = take(id);
  if (!p) return;
  asio::post(poller_, [p] { p->conn->send(run_poll(*p, true).value()); });
}

void ServerImpl::start_stream(const std::shared_ptr<Connection>& conn, Stream stream) {
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
      std::unique_ptr<ChunkedWriter> writer = conn->stream_writer(std::move(stream.head), options_.body_timeout);
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

void ServerImpl::connection_closed(bool refused) {
  if (refused) {
    refusing_.fetch_sub(1);
  } else {
    connections_.fetch_sub(1);
  }
}

std::optional<Response> ServerImpl::run_poll(const Parked& p, bool final) {
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

std::shared_ptr<ServerImpl::Parked> ServerImpl::find(uint64_t id) {
  std::lock_guard<std::mutex> lock(park_mu_);
  auto it = parked_.find(id);
  return it == parked_.end() ? nullptr : it->second;
}

std::shared_ptr<ServerImpl::Parked> ServerImpl::take(uint64_t id) {
  std::lock_guard<std::mutex> lock(park_mu_);
  auto it = parked_.find(id);
  if (it == parked_.end()) return nullptr;
  auto p = std::move(it->second);
  parked_.erase(it);
  return p;
}

void ServerImpl::sweep() {
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

void ServerImpl::accept() {
  acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      // Best effort: spawn() closes it in every child anyway.
      (void)mark_close_on_exec(socket.native_handle(), "an accepted connection");
      if (connections_.fetch_add(1) < options_.max_connections) {
        make_connection(*this, std::move(socket), false, tls_.get())->start();
      } else {
        connections_.fetch_sub(1);
        if (refusing_.fetch_add(1) < kMaxRefusing) {
          make_connection(*this, std::move(socket), true, tls_.get())->start();
        } else {
          refusing_.fetch_sub(1);
          socket.close(ignored);
        }
      }
    }
    accept();
  });
}

}  // namespace detail

// ---- serve

Result<std::unique_ptr<Server>> serve(const ServerOptions& options, const Router& router) {
  auto server = std::make_unique<detail::ServerImpl>(options, router);
  Status st = server->listen();
  if (!st.is_ok()) return st;
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace trainer::http

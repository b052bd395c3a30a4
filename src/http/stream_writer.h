// The StreamWriter a Stream's producer writes to (private to src/http; server.cpp makes one per
// streamed answer).
//
// Each write posts one chunk to the connection's strand and waits, on the producer's thread,
// until it is written. Meanwhile a read on the socket watches the client: when it ends (the client
// closed or reset the connection) or fails, the writer is `gone` and write() returns false at
// once, without waiting for a write to fail.
//
// The connection's stream is plain TCP or TLS over TCP (server.cpp): the writer reaches it
// through a Wire, the few operations it needs, made by the constructor template from either.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>

#include "http/server.h"

namespace trainer::http::detail {

// What a ChunkedWriter does with its connection's stream; every call on the connection's strand.
struct Wire {
  using Done = std::function<void(boost::beast::error_code)>;
  boost::asio::any_io_executor strand;  // the connection's
  boost::beast::tcp_stream* tcp = nullptr;  // the lowest layer: deadlines, cancel
  // Writes all of `*bytes` (kept alive until done) through the stream's top layer.
  std::function<void(std::shared_ptr<const std::string> bytes, Done done)> write;
  // Reads some bytes (dropped) through the stream's top layer.
  std::function<void(boost::asio::mutable_buffer into, Done done)> read_some;
};

class ChunkedWriter : public StreamWriter {
 public:
  // `stream` (a beast::tcp_stream, or an ssl_stream over one): the connection's, kept alive by
  // `owner` while an operation on it is pending. `close` runs on the connection's strand once the
  // answer is complete (or the client gone).
  template <class AsyncStream>
  ChunkedWriter(AsyncStream& stream, std::shared_ptr<void> owner, Response head,
                std::chrono::milliseconds write_timeout, std::function<void()> close)
      : ChunkedWriter(wire_of(stream), std::move(owner), std::move(head), write_timeout, std::move(close)) {}
  ChunkedWriter(Wire wire, std::shared_ptr<void> owner, Response head, std::chrono::milliseconds write_timeout,
                std::function<void()> close);
  ~ChunkedWriter() override;
  ChunkedWriter(const ChunkedWriter&) = delete;
  ChunkedWriter& operator=(const ChunkedWriter&) = delete;

  bool write(std::string_view bytes) override;
  void answer(Response response) override;
  bool alive() const override;

  // After the producer returned: the head if it was not sent, the last chunk, then `close`.
  void finish();
  // The server stops: pending waits end and write() returns false from now on. Any thread.
  void cancel();

 private:
  template <class AsyncStream>
  static Wire wire_of(AsyncStream& stream) {
    Wire w;
    w.strand = stream.get_executor();
    w.tcp = &boost::beast::get_lowest_layer(stream);
    w.write = [&stream](std::shared_ptr<const std::string> bytes, Wire::Done done) {
      boost::asio::async_write(stream, boost::asio::buffer(*bytes),
                               [bytes, done = std::move(done)](boost::beast::error_code ec, size_t) { done(ec); });
    };
    w.read_some = [&stream](boost::asio::mutable_buffer into, Wire::Done done) {
      stream.async_read_some(into, [done = std::move(done)](boost::beast::error_code ec, size_t) { done(ec); });
    };
    return w;
  }

  struct State;
  // Reads (and drops) whatever the client sends until its side ends: then it is gone.
  static void watch(const std::shared_ptr<State>& s);
  // Posts `bytes` (sent as they are) to the strand and waits until written; false when gone.
  bool send_raw(std::string bytes);

  std::shared_ptr<State> state_;
  Response head_;
  bool head_sent_ = false;
  bool answered_ = false;
};

}  // namespace trainer::http::detail

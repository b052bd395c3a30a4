// The StreamWriter a Stream's producer writes to (private to src/http; server.cpp makes one per
// streamed answer).
//
// Each write posts one chunk to the connection's strand and waits, on the producer's thread,
// until it is written. Meanwhile a read on the socket watches the client: when it ends (the client
// closed or reset the connection) or fails, the writer is `gone` and write() returns false at
// once, without waiting for a write to fail.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include <boost/beast/core.hpp>

#include "http/server.h"

namespace trainer::http::detail {

class ChunkedWriter : public StreamWriter {
 public:
  // `stream`: the connection's, kept alive by `owner` while an operation on it is pending.
  // `close` runs on the connection's strand once the answer is complete (or the client gone).
  ChunkedWriter(boost::beast::tcp_stream& stream, std::shared_ptr<void> owner, Response head,
                std::chrono::milliseconds write_timeout, std::function<void()> close);
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

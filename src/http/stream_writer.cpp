// ChunkedWriter (stream_writer.h): a streamed answer's head, chunks and end, written from the
// producer's thread through the connection's strand.
#include "http/stream_writer.h"

#include <array>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include <boost/asio.hpp>
#include <boost/beast/http.hpp>

namespace trainer::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

struct ChunkedWriter::State {
  Wire wire;
  std::shared_ptr<void> owner;  // keeps the wire's stream alive
  std::chrono::milliseconds write_timeout{0};
  std::function<void()> close;
  std::array<char, 4096> scratch{};  // what the watch reads (and drops)

  mutable std::mutex mu;
  std::condition_variable cv;
  bool gone = false;      // the client went, a write failed, or the server stops
  bool writing = false;   // a write is pending
  // On the strand only: the watch's read is pending; finish() waits for it to end before
  // `close` (a stream takes one read at a time).
  bool watching = false;
  bool close_when_watch_ends = false;
};

namespace {

// "HTTP/1.1 200 OK\r\nContent-Type: ...\r\n<extra headers><framing>\r\n".
std::string head_text(const Response& r, const std::string& framing) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " +
                    std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(r.status))) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
  return out + framing + "Connection: close\r\n\r\n";
}

}  // namespace

void ChunkedWriter::watch(const std::shared_ptr<State>& s) {
  s->watching = true;
  s->wire.read_some(asio::buffer(s->scratch), [s](beast::error_code ec) {
    if (!ec && !s->close_when_watch_ends) return watch(s);
    s->watching = false;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->gone = true;
      s->cv.notify_all();
    }
    if (s->close_when_watch_ends) s->close();
  });
}

ChunkedWriter::ChunkedWriter(Wire wire, std::shared_ptr<void> owner, Response head,
                             std::chrono::milliseconds write_timeout, std::function<void()> close)
    : state_(std::make_shared<State>()), head_(std::move(head)) {
  state_->wire = std::move(wire);
  state_->owner = std::move(owner);
  state_->write_timeout = write_timeout;
  state_->close = std::move(close);
  asio::post(state_->wire.strand, [s = state_] {
    // The watch waits as long as the answer lasts: no deadline on reads (each write sets its own).
    s->wire.tcp->expires_never();
    watch(s);
  });
}

ChunkedWriter::~ChunkedWriter() = default;

bool ChunkedWriter::send_raw(std::string bytes) {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (state_->gone) return false;
  state_->writing = true;
  lock.unlock();
  auto data = std::make_shared<const std::string>(std::move(bytes));
  asio::post(state_->wire.strand, [s = state_, data] {
    s->wire.tcp->expires_after(s->write_timeout);
    s->wire.write(data, [s](beast::error_code ec) {
      std::lock_guard<std::mutex> done(s->mu);
      s->writing = false;
      if (ec) s->gone = true;
      s->cv.notify_all();
    });
  });
  lock.lock();
  state_->cv.wait(lock, [this] { return !state_->writing || state_->gone; });
  return !state_->gone;
}

bool ChunkedWriter::write(std::string_view bytes) {
  if (answered_) return false;
  std::string out;
  if (!head_sent_) {
    out = head_text(head_, "Transfer-Encoding: chunked\r\n");
    head_sent_ = true;
  }
  if (!bytes.empty()) {  // an empty chunk would end the answer
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
    out += size;
    out.append(bytes.data(), bytes.size());
    out += "\r\n";
  }
  return send_raw(std::move(out));
}

void ChunkedWriter::answer(Response response) {
  if (head_sent_ || answered_) return;
  answered_ = true;
  std::string out = head_text(response, "Content-Length: " + std::to_string(response.body.size()) + "\r\n");
  out += response.body;
  send_raw(std::move(out));
}

bool ChunkedWriter::alive() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return !state_->gone;
}

void ChunkedWriter::finish() {
  if (!answered_) {
    std::string out = head_sent_ ? std::string() : head_text(head_, "Transfer-Encoding: chunked\r\n");
    head_sent_ = true;
    send_raw(out + "0\r\n\r\n");
  }
  // The watch's read is cancelled, and has ended, before `close` (which may read what is left)
  // takes over.
  asio::post(state_->wire.strand, [s = state_] {
    if (!s->watching) return s->close();
    s->close_when_watch_ends = true;
    beast::error_code ec;
    s->wire.tcp->socket().cancel(ec);
  });
}

void ChunkedWriter::cancel() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->gone = true;
  state_->cv.notify_all();
}

}  // namespace trainer::http::detail

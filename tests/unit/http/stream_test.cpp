// Streamed answers of the HTTP server, on loopback with a raw client socket: chunks reach the
// client as they are written (before the producer returns), a client that hangs up turns
// write() false, the bound on streams at once answers 503 past it, and relay() passes another
// server's stream through piece by piece and its errors whole.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "http/relay.h"
#include "http/server.h"
#include "loopback.h"

namespace trainer::http {
namespace {

using namespace std::chrono_literals;

// A one-shot flag threads wait on.
class Latch {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds limit = 20s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [this] { return open_; });
  }
  bool is_open() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

int connect_to(int port) { return test_support::connect_loopback(port); }

// Reads from `fd` into `got` until it holds `needle` (true) or the connection ends (false).
bool read_until(int fd, std::string& got, const std::string& needle) {
  char buf[4096];
  while (got.find(needle) == std::string::npos) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
  }
  return true;
}

std::string read_all(int fd) {
  std::string got;
  read_until(fd, got, std::string(1, '\0'));  // never sent: reads to the end
  return got;
}

void send_text(int fd, const std::string& text) { ASSERT_EQ(::write(fd, text.data(), text.size()), ssize_t(text.size())); }

TEST(Stream, ChunksReachTheClientAsTheyAreWritten) {
  Router router;
  Latch first_seen, produced;
  router.add("GET", "/events", 64, [&](const Request&) -> Outcome {
    Stream s;
    s.head.content_type = "text/event-stream";
    s.produce = [&](StreamWriter& w) {
      w.write("data: one\n\n");
      first_seen.wait();  // the client has the first chunk before this producer goes on
      w.write("data: two\n\n");
      produced.open();
    };
    return s;
  });
  auto server = serve(ServerOptions{}, router);
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  int fd = connect_to((*server)->port());
  ASSERT_GE(fd, 0);
  send_text(fd, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got;
  ASSERT_TRUE(read_until(fd, got, "data: one\n\n\r\n")) << got;
  EXPECT_FALSE(produced.is_open());
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("Content-Type: text/event-stream\r\n"), std::string::npos) << got;
  first_seen.open();
  got += read_all(fd);
  ::close(fd);
  EXPECT_NE(got.find("\r\n\r\nb\r\ndata: one\n\n\r\nb\r\ndata: two\n\n\r\n0\r\n\r\n"), std::string::npos) << got;
  (*server)->stop();
}

TEST(Stream, AClientThatHangsUpTurnsWriteFalseAndAnswerIsWholeBeforeAnyWrite) {
  Router router;
  Latch written, hung_up, stopped;
  std::atomic<bool> alive_after{true};
  router.add("GET", "/events", 64, [&](const Request&) -> Outcome {
    Stream s;
    s.produce = [&](StreamWriter& w) {
      w.write("first");
      written.open();
      hung_up.wait();
      const auto until = std::chrono::steady_clock::now() + 20s;
      while (w.write("more") && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
      alive_after = w.alive();
      stopped.open();
    };
    return s;
  });
  router.add("GET", "/refused", 64, [](const Request&) -> Outcome {
    Stream s;
    s.produce = [](StreamWriter& w) {
      Response r;
      r.status = 404;
      r.body = "{\"error\":\"none\"}";
      w.answer(std::move(r));
      EXPECT_FALSE(w.write("ignored"));
    };
    return s;
  });
  auto server = serve(ServerOptions{}, router);
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  int fd = connect_to((*server)->port());
  send_text(fd, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got;
  ASSERT_TRUE(read_until(fd, got, "first\r\n")) << got;
  ASSERT_TRUE(written.wait());
  ::close(fd);
  hung_up.open();
  ASSERT_TRUE(stopped.wait()) << "write() kept returning true after the client hung up";
  EXPECT_FALSE(alive_after.load());

  fd = connect_to((*server)->port());
  send_text(fd, "GET /refused HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string refused = read_all(fd);
  ::close(fd);
  EXPECT_EQ(refused.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << refused;
  EXPECT_NE(refused.find("Content-Length: 16\r\n"), std::string::npos) << refused;
  EXPECT_EQ(refused.substr(refused.size() - 16), "{\"error\":\"none\"}");
  (*server)->stop();
}

TEST(Stream, PastMaxStreamsAtOnceTheAnswerIs503) {
  Router router;
  Latch started, release;
  router.add("GET", "/events", 64, [&](const Request&) -> Outcome {
    Stream s;
    s.produce = [&](StreamWriter& w) {
      w.write("held");
      started.open();
      release.wait();
    };
    return s;
  });
  ServerOptions options;
  options.max_streams = 1;
  auto server = serve(options, router);
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  int held = connect_to((*server)->port());
  send_text(held, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(started.wait());
  int second = connect_to((*server)->port());
  send_text(second, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string refused = read_all(second);
  ::close(second);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  release.open();
  std::string first = read_all(held);
  ::close(held);
  EXPECT_NE(first.find("4\r\nheld\r\n0\r\n\r\n"), std::string::npos) << first;
  // The slot is free again once the first stream's thread is done (just after its last chunk).
  std::string again;
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
    int third = connect_to((*server)->port());
    send_text(third, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
    again = read_all(third);
    ::close(third);
    if (again.rfind("HTTP/1.1 503", 0) != 0) break;
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(again.rfind("HTTP/1.1 200", 0), 0u) << again;
  (*server)->stop();
}

// relay() through a second server: the upstream's pieces pass one by one while it still
// produces, its error answers pass whole, and a client that hangs up stops the upstream's stream.
TEST(Relay, PassesAStreamThroughAsItComesAndErrorsWhole) {
  Router upstream;
  Latch piece_seen, upstream_gone, hung_up;
  upstream.add("POST", "/events", 1024, [&](const Request& req) -> Outcome {
    if (req.body == "bad") {
      Response r;
      r.status = 400;
      r.body = "{\"error\":{\"message\":\"bad\"}}";
      return r;
    }
    Stream s;
    s.produce = [&, endless = req.body == "endless"](StreamWriter& w) {
      w.write("data: 1\n\n");
      if (!endless) {
        piece_seen.wait();
        w.write("data: [DONE]\n\n");
        return;
      }
      hung_up.wait();
      const auto until = std::chrono::steady_clock::now() + 20s;
      while (w.write("data: more\n\n") && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
      if (!w.alive()) upstream_gone.open();
    };
    return s;
  });
  auto up = serve(ServerOptions{}, upstream);
  ASSERT_TRUE(up.is_ok());
  Router front;
  const std::string url = "http://127.0.0.1:" + std::to_string((*up)->port()) + "/events";
  front.add("POST", "/relay", 1024, [url](const Request& req) -> Outcome {
    HttpRequest call;
    call.url = url;
    call.body = req.body;
    return relay(call, [](const HttpResponse&) { return Response{502, "text/plain", "unreachable", {}, false}; });
  });
  auto server = serve(ServerOptions{}, front);
  ASSERT_TRUE(server.is_ok());
  auto post = [&](const std::string& body) {
    int fd = connect_to((*server)->port());
    send_text(fd, "POST /relay HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    return fd;
  };

  int fd = post("ok");
  std::string got;
  ASSERT_TRUE(read_until(fd, got, "data: 1\n\n")) << got;
  piece_seen.open();
  got += read_all(fd);
  ::close(fd);
  EXPECT_NE(got.find("Content-Type: text/event-stream\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("data: [DONE]\n\n\r\n0\r\n\r\n"), std::string::npos) << got;

  fd = post("bad");
  std::string bad = read_all(fd);
  ::close(fd);
  EXPECT_EQ(bad.rfind("HTTP/1.1 400", 0), 0u) << bad;
  EXPECT_NE(bad.find("\r\n\r\n{\"error\":{\"message\":\"bad\"}}"), std::string::npos) << bad;

  fd = post("endless");
  got.clear();
  ASSERT_TRUE(read_until(fd, got, "data: 1\n\n")) << got;
  ::close(fd);
  hung_up.open();
  EXPECT_TRUE(upstream_gone.wait()) << "the upstream kept streaming after the client hung up";
  (*server)->stop();
  (*up)->stop();
}

}  // namespace
}  // namespace trainer::http

// The HTTP server part: routing by pattern, and a real server on loopback answering at once,
// answering a parked request when woken, and refusing an oversized body from its head.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "http/server.h"
#include "loopback.h"

namespace trainer::http {
namespace {

Handler answer(std::string text) {
  return [text](const Request& req) -> Outcome {
    Response r;
    r.body = text;
    for (const auto& p : req.params) r.body += "|" + p;
    return r;
  };
}

TEST(Router, MatchesPlaceholdersAndTheRestOfThePath) {
  Router router;
  router.add("GET", "/v1/runs/{id}/events", 10, answer("events"));
  router.add("GET", "/v1/runs/{id}", 10, answer("run"));
  router.add("GET", "/v1/base-models/{name...}", 10, answer("model"));
  Request req;
  req.method = "GET";
  req.path = "/v1/runs/abc/events";
  EXPECT_EQ(std::get<Response>(router.dispatch(req)).body, "events|abc");
  req.path = "/v1/base-models/tiny/qwen3";
  EXPECT_EQ(std::get<Response>(router.dispatch(req)).body, "model|tiny/qwen3");
  req.path = "/v1/runs/";
  EXPECT_EQ(std::get<Response>(router.dispatch(req)).status, 404);
  req.method = "DELETE";
  req.path = "/v1/runs/abc";
  EXPECT_EQ(std::get<Response>(router.dispatch(req)).status, 405);
}

TEST(Router, AThrowingHandlerBecomes500) {
  Router router;
  router.add("GET", "/boom", 10, [](const Request&) -> Outcome { throw std::runtime_error("boom"); });
  Request req;
  req.method = "GET";
  req.path = "/boom";
  EXPECT_EQ(std::get<Response>(router.dispatch(req)).status, 500);
}

TEST(UrlDecode, DecodesPercentAndPlusOnlyInQueries) {
  EXPECT_EQ(url_decode("tiny%2Fqwen3", false), "tiny/qwen3");
  EXPECT_EQ(url_decode("a+b", false), "a+b");
  EXPECT_EQ(url_decode("a+b", true), "a b");
  EXPECT_EQ(url_decode("bad%zz", false), "bad%zz");
}

// Sends `raw` to 127.0.0.1:port and returns everything read until the server closes or the
// first answer is complete (Content-Length framed).
std::string exchange(int port, const std::string& raw) {
  int fd = test_support::connect_loopback(port);
  if (fd < 0) return "connect failed";
  (void)!::write(fd, raw.data(), raw.size());
  std::string got;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
    size_t head = got.find("\r\n\r\n");
    size_t cl = got.find("Content-Length: ");
    if (head != std::string::npos && cl != std::string::npos &&
        got.size() >= head + 4 + std::stoul(got.substr(cl + 16))) {
      break;
    }
  }
  ::close(fd);
  return got;
}

TEST(Server, AnswersParksUntilWokenAndRefusesOversizedBodies) {
  Router router;
  std::atomic<bool> ready{false};
  router.add("GET", "/now", 64, answer("now"));
  router.add("GET", "/later", 64, [&ready](const Request&) -> Outcome {
    Park park;
    park.until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    park.poll = [&ready](bool final) -> std::optional<Response> {
      if (!ready.load() && !final) return std::nullopt;
      Response r;
      r.body = ready.load() ? "woken" : "timed out";
      return r;
    };
    return park;
  });
  router.add("POST", "/small", 64, answer("small"));
  auto server = serve(ServerOptions{}, router);
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  int port = (*server)->port();

  EXPECT_NE(exchange(port, "GET /now HTTP/1.1\r\nHost: x\r\n\r\n").find("\r\n\r\nnow"), std::string::npos);

  std::string later;
  std::thread follower([&] { later = exchange(port, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ready = true;
  (*server)->wake();
  follower.join();
  EXPECT_NE(later.find("\r\n\r\nwoken"), std::string::npos) << later;

  std::string refused = exchange(port, "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{");
  EXPECT_EQ(refused.rfind("HTTP/1.1 413", 0), 0u) << refused;
  (*server)->stop();
}

// Followers of one thing park under one key: each is looked at once when it parks, and a wake
// polls one of them for all (not one poll each, and not a sweep of everyone per new follower).
TEST(Server, ParkedRequestsOfOneKeyShareOnePollPerWake) {
  Router router;
  std::atomic<bool> ready{false};
  std::atomic<int> polls{0};
  router.add("GET", "/follow", 64, [&](const Request&) -> Outcome {
    Park park;
    park.until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    park.key = "one run";
    park.poll = [&](bool final) -> std::optional<Response> {
      polls.fetch_add(1);
      if (!ready.load() && !final) return std::nullopt;
      Response r;
      r.body = ready.load() ? "woken" : "timed out";
      return r;
    };
    return park;
  });
  auto server = serve(ServerOptions{}, router);
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  const int port = (*server)->port();
  constexpr int kFollowers = 20;
  std::vector<std::string> answers(kFollowers);
  std::vector<std::thread> followers;
  for (int i = 0; i < kFollowers; ++i) {
    followers.emplace_back([&, i] { answers[i] = exchange(port, "GET /follow HTTP/1.1\r\nHost: x\r\n\r\n"); });
  }
  while (polls.load() < kFollowers) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(polls.load(), kFollowers);  // one first look each
  ready = true;
  (*server)->wake();
  for (auto& f : followers) f.join();
  for (const auto& a : answers) EXPECT_NE(a.find("\r\n\r\nwoken"), std::string::npos) << a;
  EXPECT_EQ(polls.load(), kFollowers + 1);  // the wake's one poll answered all of them
  (*server)->stop();
}

// A poll that takes long holds the poller thread, never a handler's worker: with one worker,
// other requests are answered while it runs.
TEST(Server, ASlowParkedPollDoesNotHoldUpOtherRequests) {
  Router router;
  std::mutex mu;
  std::condition_variable cv;
  bool polling = false, release = false;
  router.add("GET", "/now", 64, answer("now"));
  router.add("GET", "/slow", 64, [&](const Request&) -> Outcome {
    Park park;
    park.until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    park.poll = [&](bool) -> std::optional<Response> {
      std::unique_lock<std::mutex> lock(mu);
      polling = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
      Response r;
      r.body = "slow";
      return r;
    };
    return park;
  });
  ServerOptions options;
  options.worker_threads = 1;
  auto server = serve(options, router);
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  const int port = (*server)->port();
  std::string slow;
  std::thread follower([&] { slow = exchange(port, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return polling; });
  }
  EXPECT_NE(exchange(port, "GET /now HTTP/1.1\r\nHost: x\r\n\r\n").find("\r\n\r\nnow"), std::string::npos);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  follower.join();
  EXPECT_NE(slow.find("\r\n\r\nslow"), std::string::npos) << slow;
  (*server)->stop();
}

// The TLS settings' refusals name the setting and the file (the certificates that work are
// made by tests/python/cli/test_cli_tls.py with the openssl tool).
TEST(ServerTls, RefusesUnusableCertificateAndKeyFilesByName) {
  char dir_template[] = "/tmp/server_tls_XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string garbage = dir + "/garbage.pem";
  { std::ofstream(garbage) << "not a certificate\n"; }
  Router router;

  ServerOptions options;
  options.tls_cert_file = garbage;
  options.tls_key_file = garbage;
  auto served = serve(options, router);
  ASSERT_FALSE(served.is_ok());
  EXPECT_EQ(served.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(served.status().field(), "tls_cert_file");
  EXPECT_NE(served.status().message().find("'" + garbage + "' is not a readable PEM certificate"), std::string::npos)
      << served.status().message();

  options.tls_key_file = "";
  served = serve(options, router);
  ASSERT_FALSE(served.is_ok());
  EXPECT_EQ(served.status().field(), "tls_key_file");
  EXPECT_NE(served.status().message().find("no key file: give both or neither"), std::string::npos);

  options.tls_cert_file = "";
  options.tls_key_file = dir + "/missing.pem";
  served = serve(options, router);
  ASSERT_FALSE(served.is_ok());
  EXPECT_EQ(served.status().field(), "tls_cert_file");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trainer::http

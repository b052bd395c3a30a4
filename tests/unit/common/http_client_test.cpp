// common/http_client.h against a real HTTP server on loopback (cpp-httplib): answers of any status
// come back with their body; the transport's failures are told apart, each naming the URL.
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "common/http_client.h"
#include "loopback_server.h"

namespace trainer {
namespace {

// The server the tests call: /echo answers the request's Content-Type and body (503 when asked
// with X-Want), /slow answers after 1.5 s.
class Server : public LoopbackServer {
 public:
  Server()
      : LoopbackServer([](httplib::Server& s) {
          s.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
            res.status = req.get_header_value("X-Want") == "503" ? 503 : 200;
            res.set_content(req.get_header_value("Content-Type") + "|" + req.body, "text/plain");
          });
          s.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1500));
            res.set_content("late", "text/plain");
          });
        }) {}
};

TEST(HttpClient, PostsJsonWithHeadersAndReturnsAnyStatusWithItsBody) {
  Server s;
  HttpResponse ok = http_call({.method = "POST", .url = s.url("/echo"), .body = R"({"a":1})", .timeout_seconds = 5});
  EXPECT_EQ(ok.failure, HttpFailure::kNone) << ok.detail;
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, R"(application/json|{"a":1})");
  HttpResponse down = http_call(
      {.method = "POST", .url = s.url("/echo"), .headers = {{"X-Want", "503"}}, .body = "{}", .timeout_seconds = 5});
  EXPECT_EQ(down.failure, HttpFailure::kNone);
  EXPECT_EQ(down.status, 503);
}

TEST(HttpClient, TellsTimeoutsRefusalsAndBadUrlsApartNamingTheUrl) {
  Server s;
  HttpResponse slow = http_call({.method = "GET", .url = s.url("/slow"), .timeout_seconds = 0.3});
  EXPECT_EQ(slow.failure, HttpFailure::kTimeout);
  EXPECT_EQ(slow.status, 0);
  EXPECT_NE(slow.detail.find("no answer from " + s.url("/slow")), std::string::npos) << slow.detail;

  // A port nobody listens on: bind one, then close it.
  std::string closed;
  {
    Server gone;
    closed = gone.url("/x");
  }
  HttpResponse refused = http_call({.method = "GET", .url = closed, .timeout_seconds = 5});
  EXPECT_EQ(refused.failure, HttpFailure::kRefused);
  EXPECT_NE(refused.detail.find(closed), std::string::npos) << refused.detail;

  HttpResponse bad = http_call({.method = "GET", .url = "ftp://127.0.0.1/x", .timeout_seconds = 5});
  EXPECT_EQ(bad.failure, HttpFailure::kBadUrl);
  EXPECT_EQ(bad.detail, "'ftp://127.0.0.1/x' is not an http:// or https:// URL");
}

TEST(HttpClient, AHandshakeThatFailsIsATlsFailure) {
  Server s;  // plain HTTP: an https:// call reaches it and its handshake fails
  std::string url = s.url("/echo");
  url.replace(0, 4, "https");
  HttpResponse r = http_call({.method = "GET", .url = url, .timeout_seconds = 5, .ca_file = "/no/such/ca.pem"});
  EXPECT_EQ(r.failure, HttpFailure::kTls) << r.detail;
  EXPECT_NE(r.detail.find("TLS failure with " + url), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("CA file /no/such/ca.pem"), std::string::npos) << r.detail;
}

}  // namespace
}  // namespace trainer

// The job's catalog client over HTTP (make_http_catalog, src/job/snapshot_publisher.h): every
// call carries the attempt's credentials (X-Trainer-Job, Authorization: Bearer), and trainerd's
// refusals (401, 403) are refusals the publisher does not retry, naming what trainerd said. The
// catalog is a real HTTP server.
#include <gtest/gtest.h>
#include <httplib.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "job/snapshot_publisher.h"

namespace trainer::job {
namespace {

using json = nlohmann::json;

// Answers the catalog's routes with `status` and an error body naming it (2xx: a snapshot), and
// records each request's path and credentials.
class CatalogServer {
 public:
  explicit CatalogServer(int status) : status_(status) {
    auto answer = [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard lock(mu_);
        seen_.push_back({req.method + " " + req.path, req.get_header_value("X-Trainer-Job"),
                         req.get_header_value("Authorization")});
      }
      res.status = status_;
      json body = status_ < 300 ? json{{"snapshotId", "abc"}, {"savedStep", 3}}
                                : json{{"error", {{"code", "unauthenticated"}, {"message", "no such attempt"}}}};
      res.set_content(body.dump(), "application/json");
    };
    server_.Post(R"(/v1/runs/([^/]+)/snapshots)", answer);
    server_.Post(R"(/v1/snapshots/([^/]+)/commit)", answer);
    server_.Get(R"(/v1/snapshots/([^/]+))", answer);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~CatalogServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }

  struct Seen {
    std::string call;
    std::string job;
    std::string authorization;
  };
  std::vector<Seen> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  int status_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Seen> seen_;
};

protocol::Reservation reservation() {
  protocol::Reservation r;
  r.snapshot_id = std::string(64, 'a');
  r.step = 3;
  r.kinds["weights"] = {std::string(64, 'b'), 10};
  return r;
}

TEST(HttpCatalog, EveryCallCarriesTheAttemptsCredentials) {
  CatalogServer trainerd(200);
  auto catalog = make_http_catalog({trainerd.url(), "run1-2", "s3cret"}, "run1");
  ASSERT_TRUE(catalog->reserve(reservation()).is_ok());
  ASSERT_TRUE(catalog->commit(std::string(64, 'a'), "weights").is_ok());
  auto described = catalog->describe(std::string(64, 'a'));
  ASSERT_TRUE(described.is_ok()) << described.status().to_string();
  EXPECT_EQ((*described)["savedStep"], 3);

  const auto seen = trainerd.seen();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].call, "POST /v1/runs/run1/snapshots");
  EXPECT_EQ(seen[1].call, "POST /v1/snapshots/" + std::string(64, 'a') + "/commit");
  EXPECT_EQ(seen[2].call, "GET /v1/snapshots/" + std::string(64, 'a'));
  for (const auto& s : seen) {
    EXPECT_EQ(s.job, "run1-2") << s.call;
    EXPECT_EQ(s.authorization, "Bearer s3cret") << s.call;
  }
}

TEST(HttpCatalog, ARefusedAttemptIsARefusalNamingTrainerdsAnswer) {
  for (int status : {401, 403}) {
    CatalogServer trainerd(status);
    auto catalog = make_http_catalog({trainerd.url(), "run1-1", "wrong"}, "run1");
    Status reserved = catalog->reserve(reservation());
    EXPECT_EQ(reserved.code(), StatusCode::kInvalidArgument) << status;  // not retried (not unavailable)
    EXPECT_NE(reserved.message().find("HTTP " + std::to_string(status) + ": no such attempt"), std::string::npos)
        << reserved.message();
    Status committed = catalog->commit(std::string(64, 'a'), "weights");
    EXPECT_EQ(committed.code(), StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(trainerd.seen().size(), 2u);  // one call each: the client itself does not retry
  }
}

}  // namespace
}  // namespace trainer::job

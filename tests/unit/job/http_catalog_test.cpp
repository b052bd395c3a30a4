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
  // `unavailable_first`: the first that many requests are answered 503 (trainerd starting).
  explicit CatalogServer(int status, int unavailable_first = 0) : status_(status), unavailable_first_(unavailable_first) {
    auto answer = [this](const httplib::Request& req, httplib::Response& res) {
      bool unavailable = false;
      {
        std::lock_guard lock(mu_);
        seen_.push_back({req.method + " " + req.path, req.get_header_value("X-Trainer-Job"),
                         req.get_header_value("Authorization")});
        unavailable = static_cast<int>(seen_.size()) <= unavailable_first_;
      }
      if (unavailable) {
        res.status = 503;
        res.set_content(R"({"error":{"code":"unavailable","message":"trainerd is starting"}})", "application/json");
        return;
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
  int unavailable_first_;
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

TEST(HttpCatalog, ACatalogUrlNamingSeveralReplicasUsesOneThatAnswersAndStaysWithIt) {
  CatalogServer starting(200, /*unavailable_first=*/1000);  // a replica that answers 503 only
  CatalogServer answering(200);
  auto catalog = make_http_catalog({starting.url() + "," + answering.url(), "run1-2", "s3cret"}, "run1");
  ASSERT_TRUE(catalog->reserve(reservation()).is_ok());
  ASSERT_TRUE(catalog->commit(std::string(64, 'a'), "weights").is_ok());
  EXPECT_EQ(starting.seen().size(), 1u) << "tried once, then the replica that answered is kept";
  const auto seen = answering.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].call, "POST /v1/runs/run1/snapshots");
  EXPECT_EQ(seen[1].authorization, "Bearer s3cret");
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

TEST(HttpCatalog, ARestoresReadRidesOutAnUnavailableTrainerdWithinItsDeadline) {
  CatalogServer trainerd(200, /*unavailable_first=*/2);
  auto catalog = make_http_catalog({trainerd.url(), "run1-2", "s3cret"}, "run1", std::chrono::seconds(5),
                                   std::chrono::seconds(30));
  auto described = catalog->describe(std::string(64, 'a'));
  ASSERT_TRUE(described.is_ok()) << described.status().to_string();
  EXPECT_EQ((*described)["savedStep"], 3);
  EXPECT_EQ(trainerd.seen().size(), 3u);  // two 503s, then the answer
}

TEST(HttpCatalog, ARestoresReadGivesUpAtItsDeadlineNamingTheTries) {
  CatalogServer trainerd(200, /*unavailable_first=*/1000);
  auto catalog = make_http_catalog({trainerd.url(), "run1-2", "s3cret"}, "run1", std::chrono::seconds(5),
                                   std::chrono::seconds(1));
  auto described = catalog->describe(std::string(64, 'a'));
  ASSERT_FALSE(described.is_ok());
  EXPECT_EQ(described.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(described.status().message().find("HTTP 503: trainerd is starting"), std::string::npos)
      << described.status().message();
  EXPECT_NE(described.status().message().find("tries within 1 s"), std::string::npos) << described.status().message();
  EXPECT_GE(trainerd.seen().size(), 2u);
}

TEST(HttpCatalog, ARefusedReadIsNotRetried) {
  CatalogServer trainerd(403);
  auto catalog = make_http_catalog({trainerd.url(), "run1-1", "wrong"}, "run1", std::chrono::seconds(5),
                                   std::chrono::seconds(30));
  EXPECT_EQ(catalog->describe(std::string(64, 'a')).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(trainerd.seen().size(), 1u);
}

}  // namespace
}  // namespace trainer::job

// A job's reports to trainerd (src/job/report_sender.h, job_events.h): the events are numbered
// 1, 2, ... as the file's lines, posted in order with the attempt's token, retried while the
// receiver fails, and not posted again after a refusal. The receiver is a real HTTP server.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "job/job_events.h"
#include "job/report_sender.h"

namespace trainer::job {
namespace {

using json = nlohmann::json;

// Answers POST /v1/jobs/{id}/{route}: `fail_first` posts with 503, then `status`.
class Trainerd {
 public:
  explicit Trainerd(int fail_first = 0, int status = 200) : fail_left_(fail_first), status_(status) {
    server_.Post(R"(/v1/jobs/([^/]+)/(events|logs))", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      auths_.push_back(req.get_header_value("Authorization"));
      if (fail_left_ > 0) {
        --fail_left_;
        res.status = 503;
      } else {
        res.status = status_;
        if (status_ == 200) bodies_.push_back(json::parse(req.body));
      }
      res.set_content("{}", "application/json");
      changed_.notify_all();
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~Trainerd() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The seqs of every item delivered so far, in the order they arrived.
  std::vector<int64_t> seqs(const char* list) {
    std::lock_guard lock(mu_);
    std::vector<int64_t> out;
    for (const json& b : bodies_) {
      for (const json& item : b[list]) out.push_back(item["seq"].get<int64_t>());
    }
    return out;
  }
  std::vector<json> items(const char* list) {
    std::lock_guard lock(mu_);
    std::vector<json> out;
    for (const json& b : bodies_) {
      for (const json& item : b[list]) out.push_back(item);
    }
    return out;
  }
  std::vector<std::string> auths() {
    std::lock_guard lock(mu_);
    return auths_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable changed_;
  int fail_left_;
  const int status_;
  std::vector<json> bodies_;
  std::vector<std::string> auths_;
};

SenderOptions quick() {
  SenderOptions o;
  o.backoff = std::chrono::milliseconds(10);
  o.max_backoff = std::chrono::milliseconds(40);
  o.max_batch = 2;
  o.request_timeout_seconds = 2;  // a post caught in a server's start is retried soon
  return o;
}

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string();
}

TEST(EventWriter, PostsEveryEventNumberedAsTheFileLinesThoseBeforePostingFirst) {
  Trainerd trainerd(/*fail_first=*/3);
  const std::string path = temp_file("events.jsonl");
  {
    EventWriter writer;
    ASSERT_TRUE(writer.open(path).is_ok());
    writer.write(protocol::Hello{.job_version = "trainer-job test"});
    writer.post_to({trainerd.url(), "run1-1", "secret"}, quick());
    writer.write(protocol::Phase{.phase = "PREPARING"});
    writer.write(protocol::Step{.step = 1, .total_steps = 1, .loss = 0.5});
    writer.write(protocol::Completed{.adapter_dir = "/out/adapter", .final_loss = 0.5, .steps = 1});
    EXPECT_TRUE(writer.flush(std::chrono::seconds(20)));  // three 503s first: retried
  }
  EXPECT_EQ(trainerd.seqs("events"), (std::vector<int64_t>{1, 2, 3, 4}));
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const auto items = trainerd.items("events");
  ASSERT_EQ(lines.size(), items.size());
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(json::parse(lines[i]), items[i]["event"]) << i;
  for (const std::string& auth : trainerd.auths()) EXPECT_EQ(auth, "Bearer secret");
  std::remove(path.c_str());
}

TEST(EventWriter, ARefusalStopsThePostingButNotTheFile) {
  Trainerd trainerd(0, /*status=*/403);
  const std::string path = temp_file("refused.jsonl");
  EventWriter writer;
  ASSERT_TRUE(writer.open(path).is_ok());
  writer.post_to({trainerd.url(), "run1-1", "wrong"}, quick());
  writer.write(protocol::Phase{.phase = "PREPARING"});
  EXPECT_FALSE(writer.flush(std::chrono::seconds(20)));  // refused: nothing more to wait for
  writer.write(protocol::Phase{.phase = "TRAINING"});
  EXPECT_FALSE(writer.flush(std::chrono::seconds(1)));
  EXPECT_EQ(trainerd.auths().size(), 1u);  // the refused post was not repeated
  std::ifstream in(path);
  std::string a, b;
  EXPECT_TRUE(std::getline(in, a) && std::getline(in, b));
  std::remove(path.c_str());
}

TEST(ReportSender, AnUnreachableTrainerdIsRetriedUntilItListens) {
  // A port nothing listens on yet: the sender retries; once a server binds it, everything arrives.
  int port = 0;
  {
    httplib::Server probe;
    port = probe.bind_to_any_port("127.0.0.1");
  }
  SenderOptions o = quick();
  ReportSender sender({"http://127.0.0.1:" + std::to_string(port), "run1-1", "t"}, "logs", "lines", "text", o);
  sender.add(1, "\"first line\"");
  sender.add(2, "\"second line\"");
  EXPECT_FALSE(sender.flush(std::chrono::milliseconds(200)));
  std::mutex mu;
  std::vector<json> got;
  httplib::Server late;
  late.Post(R"(/v1/jobs/run1-1/logs)", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    got.push_back(json::parse(req.body));
    res.set_content("{}", "application/json");
  });
  ASSERT_TRUE(late.bind_to_port("127.0.0.1", port));
  std::thread t([&] { late.listen_after_bind(); });
  EXPECT_TRUE(sender.flush(std::chrono::seconds(60)));  // a bound on a hang, not a speed check
  late.stop();
  t.join();
  std::vector<std::string> texts;
  for (const json& b : got) {
    for (const json& item : b["lines"]) texts.push_back(item["text"].get<std::string>());
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"first line", "second line"}));
}

TEST(ReportSender, ATargetNamingSeveralReplicasPostsToOneThatAnswers) {
  // The first replica named is down (nothing listens on its port); the second one gets everything,
  // once each, in order.
  int down = 0;
  {
    httplib::Server probe;
    down = probe.bind_to_any_port("127.0.0.1");
  }
  Trainerd replica;
  ReportSender sender({"http://127.0.0.1:" + std::to_string(down) + "/," + replica.url(), "run1-1", "t"}, "events",
                      "events", "event", quick());
  for (int64_t seq = 1; seq <= 3; ++seq) sender.add(seq, "{\"type\":\"step\"}");
  EXPECT_TRUE(sender.flush(std::chrono::seconds(60)));  // a bound on a hang, not a speed check
  EXPECT_EQ(replica.seqs("events"), (std::vector<int64_t>{1, 2, 3}));
}

TEST(CatalogBases, SplitsCommasAndDropsTrailingSlashes) {
  EXPECT_EQ(catalog_bases("http://a:1/,http://b:2"), (std::vector<std::string>{"http://a:1", "http://b:2"}));
  EXPECT_EQ(catalog_bases("http://a:1"), (std::vector<std::string>{"http://a:1"}));
  EXPECT_EQ(catalog_bases(""), (std::vector<std::string>{""}));
}

}  // namespace
}  // namespace trainer::job

// The job's spans: from the job-protocol events and the publisher's operations to a span tree
// under the run's root span, posted to a collector (an in-process OTLP/HTTP receiver here).
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "job/job_tracing.h"

namespace trainer::job {
namespace {

using json = nlohmann::json;
namespace tel = trainer::telemetry;

constexpr const char* kTraceId = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kRootSpan = "00f067aa0ba902b7";

// A collector on loopback keeping every span it is posted.
class Receiver {
 public:
  Receiver() {
    server_.Post("/v1/traces", [this](const httplib::Request& request, httplib::Response& response) {
      const json body = json::parse(request.body);
      std::lock_guard lock(mu_);
      for (const auto& rs : body["resourceSpans"]) {
        for (const auto& ss : rs["scopeSpans"]) {
          for (const auto& s : ss["spans"]) spans_.push_back(s);
        }
      }
      response.status = 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~Receiver() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<json> spans() {
    std::lock_guard lock(mu_);
    return spans_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<json> spans_;
};

protocol::JobRequest traced_request(const std::string& endpoint) {
  protocol::JobRequest r;
  r.run_id = "run1";
  r.attempt = 2;
  r.otlp_traces_endpoint = endpoint;
  r.traceparent = std::string("00-") + kTraceId + "-" + kRootSpan + "-01";
  return r;
}

std::map<std::string, std::vector<json>> by_name(const std::vector<json>& spans) {
  std::map<std::string, std::vector<json>> out;
  for (const auto& s : spans) out[s["name"].get<std::string>()].push_back(s);
  return out;
}

std::string attribute(const json& span, const std::string& key) {
  for (const auto& a : span["attributes"]) {
    if (a["key"] == key) return a["value"].begin().value().get<std::string>();
  }
  return "";
}

TEST(JobTracer, NoEndpointNoTracer) {
  EXPECT_EQ(JobTracer::open(protocol::JobRequest{}, tel::Resource{}), nullptr);
}

TEST(JobTracer, AMalformedTraceparentTrainsUntraced) {
  protocol::JobRequest r = traced_request("http://127.0.0.1:1");
  r.traceparent = "00-abc-def-01";
  EXPECT_EQ(JobTracer::open(r, tel::Resource{}), nullptr);
}

TEST(JobTracer, AnAttemptsSpansHangUnderTheRunsRootSpan) {
  Receiver receiver;
  {
    auto tracer = JobTracer::open(traced_request(receiver.url() + "/v1/traces"), tel::Resource{});
    ASSERT_NE(tracer, nullptr);
    tracer->on_event(protocol::Phase{.phase = "PREPARING"});
    tracer->on_event(protocol::Phase{.phase = "TRAINING", .total_steps = 2});
    tracer->on_event(protocol::Step{.step = 1, .total_steps = 2, .step_seconds = 0.3, .input_seconds = 0.1,
                                    .forward_backward_seconds = 0.2, .optimizer_seconds = 0.1});
    protocol::Step rl{.step = 2, .total_steps = 2, .step_seconds = 1.0};
    rl.rl = {{"generationSeconds", 0.5}, {"rewardSeconds", 0.1}, {"oldLogprobSeconds", 0.1},
             {"actorUpdateSeconds", 0.2}};
    tracer->on_event(rl);
    tracer->on_event(protocol::Checkpoint{.step = 2, .checkpoint_seconds = 0.05});
    const auto now = std::chrono::system_clock::now();
    for (auto op : {tel::CheckpointOperation::kReserve, tel::CheckpointOperation::kUpload,
                    tel::CheckpointOperation::kAcknowledge, tel::CheckpointOperation::kPublish}) {
      tracer->on_publication({.operation = op, .snapshot_id = "snap", .step = 2,
                              .kind = op == tel::CheckpointOperation::kUpload ? "weights" : "",
                              .start = now, .end = now, .status = Status::ok()});
    }
    tracer->on_event(protocol::Completed{.steps = 2, .export_seconds = 0.01});
  }  // the exit posts what is left
  const auto spans = receiver.spans();
  auto named = by_name(spans);
  for (const auto& s : spans) EXPECT_EQ(s["traceId"], kTraceId) << s["name"];
  ASSERT_EQ(named["attempt"].size(), 1u);
  const json& attempt = named["attempt"][0];
  EXPECT_EQ(attempt["parentSpanId"], kRootSpan);
  EXPECT_EQ(attribute(attempt, "trainer.attempt.outcome"), "completed");
  EXPECT_EQ(attempt["status"]["code"], 1);
  const std::string attempt_id = attempt["spanId"];
  for (const char* name : {"prepare", "step", "checkpoint.save", "publish", "export"}) {
    ASSERT_FALSE(named[name].empty()) << name;
    for (const auto& s : named[name]) EXPECT_EQ(s["parentSpanId"], attempt_id) << name;
  }
  ASSERT_EQ(named["step"].size(), 2u);
  std::map<std::string, std::string> step_ids;  // step number -> span id
  for (const auto& s : named["step"]) step_ids[attribute(s, "trainer.step")] = s["spanId"];
  for (const char* name : {"input", "forward_backward", "optimizer"}) {
    ASSERT_EQ(named[name].size(), 1u) << name;
    EXPECT_EQ(named[name][0]["parentSpanId"], step_ids["1"]) << name;
  }
  for (const char* name : {"generation", "reward", "old_log_probs", "actor_update"}) {
    ASSERT_EQ(named[name].size(), 1u) << name;
    EXPECT_EQ(named[name][0]["parentSpanId"], step_ids["2"]) << name;
  }
  // The RL phases, one after another from the step's start, as long as measured.
  const json& generation = named["generation"][0];
  const json& reward = named["reward"][0];
  EXPECT_EQ(generation["endTimeUnixNano"], reward["startTimeUnixNano"]);
  const auto ns = [](const json& s, const char* key) { return std::stoull(s[key].get<std::string>()); };
  EXPECT_NEAR(static_cast<double>(ns(generation, "endTimeUnixNano") - ns(generation, "startTimeUnixNano")), 0.5e9, 1e3);
  const std::string publish_id = named["publish"][0]["spanId"];
  for (const char* name : {"publish.reserve", "publish.upload", "publish.commit"}) {
    ASSERT_EQ(named[name].size(), 1u) << name;
    EXPECT_EQ(named[name][0]["parentSpanId"], publish_id) << name;
  }
  EXPECT_EQ(attribute(named["publish.upload"][0], "trainer.snapshot.kind"), "weights");
}

TEST(JobTracer, AFailedAttemptSaysWhy) {
  Receiver receiver;
  {
    auto tracer = JobTracer::open(traced_request(receiver.url()), tel::Resource{});
    ASSERT_NE(tracer, nullptr);
    tracer->end_attempt("failed", "out of memory");
    tracer->end_attempt("completed");  // once only
  }
  const auto named = by_name(receiver.spans());
  ASSERT_EQ(named.at("attempt").size(), 1u);
  EXPECT_EQ(named.at("attempt")[0]["status"], json({{"code", 2}, {"message", "out of memory"}}));
}

}  // namespace
}  // namespace trainer::job

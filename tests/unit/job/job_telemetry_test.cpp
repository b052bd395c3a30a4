// trainer-job's telemetry (src/job/job_telemetry.h): the run's identity from the job request the
// service gives it, where it pushes, and the metrics it records from the protocol's events.
#include <gtest/gtest.h>

#include <httplib.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "job/job_telemetry.h"

namespace trainer::job {
namespace {

plan::Plan local_plan() {
  plan::Plan p;
  p.workload = "support-triage";
  p.baseModel = "/var/cache/trainer/models/3f2a";
  p.config.dataset = "train.jsonl";
  p.config.lora.rank = 16;
  return p;
}

Getenv env_of(std::map<std::string, std::string> values) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(values));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

// What the job does: the request from the environment, then the identity or export options from it.
Result<RunIdentity> identity_from(const Getenv& env) {
  TRAINER_ASSIGN_OR_RETURN(protocol::JobRequest request, protocol::job_request_from_environment(env));
  return RunIdentity::of(request);
}

Result<std::optional<telemetry::OtlpOptions>> export_options_from(const Getenv& env) {
  TRAINER_ASSIGN_OR_RETURN(protocol::JobRequest request, protocol::job_request_from_environment(env));
  return export_options_for(request, env);
}

std::string scrape(JobTelemetry& t) { return telemetry::prometheus_exposition(t.provider()).body; }

// The value of the first sample line starting with `prefix` ("" when none).
std::string sample(const std::string& text, const std::string& prefix) {
  auto pos = text.find("\n" + prefix);
  if (pos == std::string::npos) return "";
  auto end = text.find('\n', pos + 1);
  std::string line = text.substr(pos + 1, end - pos - 1);
  return line.substr(line.rfind(' ') + 1);
}

TEST(RunIdentity, ReadsTheServicesEnvironment) {
  auto id = identity_from(env_of({{"TRAINER_RUN_ID", "run-7f3a"},
                                                  {"TRAINER_ATTEMPT", "2"},
                                                  {"TRAINER_WORKLOAD", "commit-messages"},
                                                  {"TRAINER_METHOD", "sft"},
                                                  {"TRAINER_BASE_MODEL", "Qwen/Qwen3-0.6B"},
                                                  {"TRAINER_BASE_MODEL_SHA", "3f2a9c"},
                                                  {"TRAINER_PROFILE", "cpu"}}));
  ASSERT_TRUE(id.is_ok()) << id.status().describe();
  EXPECT_EQ(id->run_id, "run-7f3a");
  EXPECT_EQ(id->attempt, 2);
  EXPECT_EQ(id->workload, "commit-messages");
  EXPECT_EQ(id->base_model, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(id->base_model_sha, "3f2a9c");
  EXPECT_EQ(id->profile, "cpu");
}

TEST(RunIdentity, ALocalRunIsLocal) {
  auto id = identity_from(env_of({}));
  ASSERT_TRUE(id.is_ok());
  EXPECT_EQ(id->run_id, "local");
  EXPECT_EQ(id->attempt, 1);
  EXPECT_EQ(id->profile, "local");
}

TEST(RunIdentity, AMalformedAttemptNamesTheVariable) {
  auto id = identity_from(env_of({{"TRAINER_ATTEMPT", "first"}}));
  ASSERT_FALSE(id.is_ok());
  EXPECT_EQ(id.status().field(), "TRAINER_ATTEMPT");
}

TEST(ExportOptions, TheServicesEndpointWinsOverOtel) {
  auto o = export_options_from(env_of({{"TRAINER_OTLP_ENDPOINT", "http://127.0.0.1:9001/otlp/"},
                                                   {"TRAINER_OTLP_INTERVAL_MS", "250"},
                                                   {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}}));
  ASSERT_TRUE(o.is_ok()) << o.status().describe();
  ASSERT_TRUE(o->has_value());
  EXPECT_EQ((*o)->endpoint, "http://127.0.0.1:9001/otlp/v1/metrics");
  EXPECT_EQ((*o)->interval.count(), 250);
}

TEST(ExportOptions, DefaultIntervalIsFiveSeconds) {
  auto o = export_options_from(env_of({{"TRAINER_OTLP_ENDPOINT", "http://127.0.0.1:9001/otlp"}}));
  ASSERT_TRUE(o.is_ok() && o->has_value());
  EXPECT_EQ((*o)->interval.count(), 5000);
}

TEST(ExportOptions, WithoutTheServicesEndpointOtelDecides) {
  auto off = export_options_from(env_of({}));
  ASSERT_TRUE(off.is_ok());
  EXPECT_FALSE(off->has_value());
  auto otel = export_options_from(env_of({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}}));
  ASSERT_TRUE(otel.is_ok() && otel->has_value());
  EXPECT_EQ((*otel)->endpoint, "http://collector:4318/v1/metrics");
}

TEST(ExportOptions, BadValuesNameTheVariable) {
  auto interval = export_options_from(
      env_of({{"TRAINER_OTLP_ENDPOINT", "http://x:1"}, {"TRAINER_OTLP_INTERVAL_MS", "-5"}}));
  ASSERT_FALSE(interval.is_ok());
  EXPECT_EQ(interval.status().field(), "TRAINER_OTLP_INTERVAL_MS");
  auto scheme = export_options_from(env_of({{"TRAINER_OTLP_ENDPOINT", "ftp://x:1"}}));
  ASSERT_FALSE(scheme.is_ok());
  EXPECT_EQ(scheme.status().field(), "TRAINER_OTLP_ENDPOINT");
  // A trainerd serving TLS hands its jobs an https:// relay address.
  auto tls = export_options_from(env_of({{"TRAINER_OTLP_ENDPOINT", "https://127.0.0.1:1/otlp"}}));
  ASSERT_TRUE(tls.is_ok() && tls->has_value());
  EXPECT_EQ((*tls)->endpoint, "https://127.0.0.1:1/otlp/v1/metrics");
}

TEST(JobTelemetry, TheResourceNamesTheRunAndTheUserFacingBaseModel) {
  RunIdentity id;
  id.run_id = "run-7f3a";
  id.attempt = 2;
  id.base_model = "Qwen/Qwen3-0.6B";
  id.base_model_sha = "3f2a9c";
  id.profile = "cpu";
  JobTelemetry t(local_plan(), id, "abc123", std::nullopt);
  const std::string text = scrape(t);
  EXPECT_NE(text.find("akka_optimize_training_run_id=\"run-7f3a\""), std::string::npos) << text;
  EXPECT_NE(text.find("akka_optimize_training_run_attempt=\"2\""), std::string::npos);
  EXPECT_NE(text.find("akka_optimize_training_run_base_model=\"Qwen/Qwen3-0.6B\""), std::string::npos);
  EXPECT_NE(text.find("akka_optimize_training_run_base_model_sha=\"3f2a9c\""), std::string::npos);
  EXPECT_NE(text.find("akka_optimize_training_run_settings_sha=\"abc123\""), std::string::npos);
  EXPECT_NE(text.find("akka_optimize_training_run_method=\"SFT\""), std::string::npos);
  EXPECT_NE(text.find("akka_optimize_training_profile=\"cpu\""), std::string::npos);
  EXPECT_EQ(text.find("/var/cache"), std::string::npos) << "the cache path is not the base model's name";
}

TEST(JobTelemetry, RecordsStepMetricsFromEvents) {
  JobTelemetry t(local_plan(), RunIdentity{}, "abc123", std::nullopt);
  t.on_event(protocol::DataFit{.rows = 10, .truncated = 2, .exact = 1, .dropped = 1});
  t.on_event(protocol::DataSplit{.train_rows = 8, .validation_rows = 1, .held_out = true});
  protocol::Step step{.step = 1, .loss = 1.5, .learning_rate = 0.0001, .grad_norm = 0.75, .token_accuracy = 0.25,
                      .tokens_per_second = 1234.0, .batch_tokens = 96, .step_seconds = 0.5, .input_seconds = 0.01,
                      .forward_backward_seconds = 0.4, .optimizer_seconds = 0.1};
  step.padding_share = 0.125;
  protocol::StepMemory mem;
  mem.allocated_peak_bytes = 1048576;
  mem.usage.weights = 4096;
  mem.usage.activations = 2048;
  step.memory = mem;
  t.on_event(step);
  t.on_event(step);  // reported twice: counts once
  t.on_event(protocol::Validation{.step = 1, .validation_loss = 1.25, .evaluation_seconds = 0.2});
  t.on_event(protocol::Completed{.adapter_dir = "/out/adapter", .steps = 1, .export_seconds = 0.3});
  const std::string text = scrape(t);
  EXPECT_EQ(sample(text, "akka_optimize_training_sft_step_count_total"), "1") << text;
  EXPECT_EQ(sample(text, "akka_optimize_training_sft_loss"), "1.5");
  EXPECT_EQ(sample(text, "akka_optimize_training_sft_validation_loss"), "1.25");
  EXPECT_EQ(sample(text, "akka_optimize_training_sft_memory_allocated_peak_bytes"), "1048576");
  EXPECT_NE(text.find("sft_data_fit=\"all\"} 8"), std::string::npos) << text;
  EXPECT_NE(text.find("sft_data_fit=\"held_out\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("sft_data_fit=\"truncated\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("sft_step_phase=\"forward_backward\"} 0.4"), std::string::npos) << text;
  EXPECT_NE(text.find("sft_step_phase=\"export\"} 0.3"), std::string::npos) << text;
  EXPECT_EQ(text.find("sft_step_phase=\"checkpoint\""), std::string::npos) << "the final adapter is not a checkpoint";
  EXPECT_NE(text.find("memory_component=\"weights\"} 4096"), std::string::npos) << text;
  EXPECT_NE(text.find("memory_component=\"activations\"} 2048"), std::string::npos) << text;
  EXPECT_EQ(text.find("memory_component=\"free\""), std::string::npos) << "not measured: not reported";
  EXPECT_EQ(text.find("akka_optimize_training_sft_mfu"), std::string::npos);  // no known peak
  EXPECT_EQ(text.find("akka_optimize_training_sft_memory_reserved_peak"), std::string::npos);
}

TEST(JobTelemetry, OneWorkerSeriesPerDeviceWhileTheJobRuns) {
  JobTelemetry t(local_plan(), RunIdentity{}, "abc", std::nullopt);
  t.on_event(protocol::Devices{{protocol::Device{.index = 0, .kind = "cuda", .name = "NVIDIA H20", .uuid = "GPU-aa"},
                                protocol::Device{.index = 1, .kind = "cuda", .name = "NVIDIA H20", .uuid = "GPU-bb"}}});
  std::string text = scrape(t);
  EXPECT_EQ(sample(text, "akka_optimize_training_job_devices"), "2") << text;
  EXPECT_NE(text.find("job_rank=\"0\",akka_optimize_training_job_role=\"trainer\",hw_id=\"GPU-aa\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("job_rank=\"1\",akka_optimize_training_job_role=\"trainer\",hw_id=\"GPU-bb\"} 1"),
            std::string::npos)
      << text;
  t.on_event(protocol::Cancelled{.steps = 3});
  text = scrape(t);
  EXPECT_EQ(text.find("akka_optimize_training_job_worker_info"), std::string::npos) << text;
  EXPECT_EQ(sample(text, "akka_optimize_training_job_devices"), "0");
}

TEST(JobTelemetry, ACpuJobHoldsNoAcceleratorAndOneWorker) {
  JobTelemetry t(local_plan(), RunIdentity{}, "abc", std::nullopt);
  t.on_event(protocol::Devices{{protocol::Device{.index = 0, .kind = "cpu"}}});
  const std::string text = scrape(t);
  EXPECT_EQ(sample(text, "akka_optimize_training_job_devices"), "0") << text;
  EXPECT_NE(text.find("akka_optimize_training_job_worker_info{akka_optimize_training_job_rank=\"0\","
                      "akka_optimize_training_job_role=\"trainer\"} 1"),
            std::string::npos)
      << text;
}

// An OTLP receiver on a loopback port: counts the pushes it is sent.
class Receiver {
 public:
  Receiver() {
    server_.Post("/v1/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard lock(mu_);
        bodies_.push_back(req.body);
      }
      changed_.notify_all();
      res.set_content("{}", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // A push made before the server listens is retried by the next one; the socket is bound,
    // so the connection waits in the backlog meanwhile.
  }
  ~Receiver() {
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1/metrics"; }
  // Waits (without a deadline: the test's own timeout bounds it) for `n` pushes.
  std::vector<std::string> wait_for(size_t n) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return bodies_.size() >= n; });
    return bodies_;
  }
  size_t count() {
    std::lock_guard lock(mu_);
    return bodies_.size();
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> bodies_;
};

TEST(JobTelemetry, APhaseChangePushesAtOnceAndTheEndPushesAgain) {
  Receiver receiver;
  telemetry::OtlpOptions options;
  options.endpoint = receiver.endpoint();
  options.interval = std::chrono::hours(1);  // never by the clock in this test
  RunIdentity id;
  id.run_id = "run-early";
  {
    JobTelemetry t(local_plan(), id, "abc", options);
    t.on_event(protocol::Phase{.phase = "PREPARING"});
    auto bodies = receiver.wait_for(1);
    EXPECT_NE(bodies[0].find("run-early"), std::string::npos);
    t.on_event(protocol::Phase{.phase = "TRAINING", .total_steps = 3});
    t.on_event(protocol::Step{.step = 1, .loss = 2.5});
    receiver.wait_for(2);
  }
  auto bodies = receiver.wait_for(3);  // the final push at destruction
  EXPECT_NE(bodies.back().find("akka.optimize.training.sft.loss"), std::string::npos) << bodies.back();
}

TEST(JobTelemetry, RequestExportPushesWithoutWaitingForTheInterval) {
  Receiver receiver;
  telemetry::OtlpOptions options;
  options.endpoint = receiver.endpoint();
  options.interval = std::chrono::hours(1);
  JobTelemetry t(local_plan(), RunIdentity{}, "abc", options);
  t.request_export();
  EXPECT_EQ(receiver.wait_for(1).size(), 1u);
}

}  // namespace
}  // namespace trainer::job

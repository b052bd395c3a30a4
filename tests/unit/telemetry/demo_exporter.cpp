// telemetry-demo-exporter: a small process that records known values through the generated
// instruments and exposes them, for the tests against real Prometheus and an OTLP receiver.
//
//   telemetry-demo-exporter --port N                  serve /metrics on 127.0.0.1:N
//   telemetry-demo-exporter --otlp URL [--interval-ms N] [--duration-ms N]
//                                                     push OTLP JSON every N ms, exit after
//
// Recorded (tests/python/telemetry mirror these numbers):
// - sft.step.count: +1 every 100 ms (10 per second) from start;
// - pool.claims: GRANTED 3 and QUEUED 2 on instance demo-0, accelerator nvidia-l4, training;
// - sft.step.duration (explicit): i/1000 s for i = 1..1000;
// - rl.completion.length (exponential): 1..1000 tokens;
// - rl.grader.tokens: 1234 input and 567 output tokens for term model:judge-4b;
// - cost.gpu.time: 12.5 s for workload support-triage on nvidia-l4, not derived;
// - sft.loss 1.25, sft.validation.loss NaN;
// - demo.signed (exponential, not in the registry): -3.5, -1, 0, 0, 0.25, 2, 1e6.
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "telemetry/instruments.h"

namespace tel = trainer::telemetry;

int main(int argc, char** argv) {
  int port = 0;
  std::string otlp;
  int interval_ms = 200;
  int duration_ms = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--port") port = std::atoi(argv[i + 1]);
    else if (flag == "--otlp") otlp = argv[i + 1];
    else if (flag == "--interval-ms") interval_ms = std::atoi(argv[i + 1]);
    else if (flag == "--duration-ms") duration_ms = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "telemetry-demo-exporter: unknown flag %s\n", argv[i]);
      return 2;
    }
  }

  tel::TrainingJobResource identity{
      .run_id = "commit-router-7f3a", .run_attempt = 2, .workload = "commit-messages", .run_method = "SFT",
      .run_engine = "native", .run_base_model = "Qwen/Qwen3-0.6B", .run_settings_sha = "57c93d025d0260af",
      .run_lora_rank = 16, .run_learning_rate = 0.0002, .job_submission_id = "commit-router-7f3a-2",
      .profile = "local", .pipeline_id = "support-triage-2026-09-01"};
  tel::MeterProvider provider(identity.to_resource("trainer-job"), {.scope_version = "0.1.0"});
  tel::JobMetrics job(provider);
  tel::ServiceMetrics service(provider);

  for (auto [state, n] : {std::pair{tel::ClaimState::kGranted, 3}, std::pair{tel::ClaimState::kQueued, 2}}) {
    service.pool_claims.set(n, {.claim_state = state, .instance = "demo-0", .pool_accelerator = "nvidia-l4",
                                .pool_serving = false});
  }
  for (int i = 1; i <= 1000; ++i) job.sft_step_duration.record(i / 1000.0);
  for (int i = 1; i <= 1000; ++i) job.rl_completion_length.record(i);
  job.rl_grader_tokens.add(1234, {.rl_term = "model:judge-4b", .rl_grader_token_type = tel::RlGraderTokenType::kInput});
  job.rl_grader_tokens.add(567, {.rl_term = "model:judge-4b", .rl_grader_token_type = tel::RlGraderTokenType::kOutput});
  service.cost_gpu_time.add(12.5, {.workload = "support-triage", .pool_accelerator = "nvidia-l4", .gpu_derived = false});
  job.sft_loss.set(1.25);
  job.sft_validation_loss.set(std::nan(""));  // a diverged run: NaN must survive export
  auto& signed_values = provider.instrument({.name = "demo.signed", .description = "Signed test values.", .unit = "1",
                                             .kind = tel::InstrumentKind::kExponentialHistogram});
  for (double v : {-3.5, -1.0, 0.0, 0.0, 0.25, 2.0, 1e6}) signed_values.record(v, tel::AttributeSet{});

  auto steps = job.sft_step_count.bind();
  std::atomic<bool> running{true};
  std::thread ticker([&] {
    auto next = std::chrono::steady_clock::now();
    while (running.load()) {
      next += std::chrono::milliseconds(100);
      std::this_thread::sleep_until(next);
      steps.add(1);
    }
  });

  int rc = 0;
  if (!otlp.empty()) {
    tel::OtlpPusher pusher(provider, {.endpoint = otlp, .interval = std::chrono::milliseconds(interval_ms)});
    std::this_thread::sleep_for(std::chrono::milliseconds(duration_ms));
    pusher.stop();
    std::printf("pushes ok %llu failed %llu\n", static_cast<unsigned long long>(pusher.pushes_ok()),
                static_cast<unsigned long long>(pusher.pushes_failed()));
    rc = pusher.pushes_failed() == 0 ? 0 : 1;
  } else {
    httplib::Server server;
    server.Get("/metrics", [&](const httplib::Request& request, httplib::Response& response) {
      auto exposition = tel::prometheus_exposition(provider, request.get_header_value("Accept"));
      response.set_content(exposition.body, exposition.content_type);
    });
    if (!server.bind_to_port("127.0.0.1", port)) {
      std::fprintf(stderr, "telemetry-demo-exporter: cannot listen on 127.0.0.1:%d\n", port);
      rc = 1;
    } else {
      std::printf("listening on 127.0.0.1:%d\n", port);
      std::fflush(stdout);
      server.listen_after_bind();
    }
  }
  running.store(false);
  ticker.join();
  return rc;
}

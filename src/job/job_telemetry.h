// The job's SFT metrics (telemetry/registry.yaml), recorded from the engine's job-protocol
// events, so the events and the metrics always carry the same measurements.
//
// The resource (run id, settings hash, ...) is known once the engine reports the resolved
// configuration; the provider is created then, and values seen before it are replayed.
// Export: OTLP push when OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT is set (final push at exit).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "plan/plan.h"
#include "telemetry/instruments.h"

namespace trainer::job {

// Identity of the run as the service passes it (TRAINER_RUN_ID, TRAINER_RUN_ATTEMPT,
// TRAINER_PROFILE); local runs get "local", 1, "local".
struct RunIdentity {
  std::string run_id = "local";
  int64_t attempt = 1;
  std::string profile = "local";
  static RunIdentity from_environment();
};

class JobTelemetry {
 public:
  JobTelemetry(const plan::Plan& plan, RunIdentity identity);
  ~JobTelemetry();
  JobTelemetry(const JobTelemetry&) = delete;
  JobTelemetry& operator=(const JobTelemetry&) = delete;

  // Records what `event` measured. Not thread-safe: called on the training thread.
  void on_event(const nlohmann::json& event);

  // Null until the "resolved" event.
  telemetry::MeterProvider* provider() { return provider_.get(); }

 private:
  void start(const std::string& settings_sha);
  void record(const nlohmann::json& event);

  // Constant after construction.
  plan::Plan plan_;
  RunIdentity identity_;
  // Set by start(): strings the resource refers to, the provider, its metrics, the exporter.
  std::string settings_sha_, base_model_, submission_id_;
  std::unique_ptr<telemetry::MeterProvider> provider_;
  std::unique_ptr<telemetry::JobMetrics> metrics_;
  std::unique_ptr<telemetry::OtlpPusher> pusher_;  // destroyed before the provider
  std::vector<nlohmann::json> pending_;            // events before the provider existed
  int64_t last_step_ = 0;                          // a step reported twice counts once
};

}  // namespace trainer::job

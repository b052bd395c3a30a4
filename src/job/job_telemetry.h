// The job's metrics (telemetry/registry.yaml), recorded from the engine's job-protocol events,
// so the events and the metrics always carry the same measurements.
//
// Identity: the resource names the run as the service's job request names it (RunIdentity::of;
// protocol/job_request.h). Export: OTLP/HTTP JSON push to ${TRAINER_OTLP_ENDPOINT}/v1/metrics
// every TRAINER_OTLP_INTERVAL_MS (default 5000) when the request gives an endpoint, else as the
// OTEL_* variables say (off when they name none). Besides the interval, a push goes out at every
// phase change, when request_export() is called (the job calls it on SIGTERM/SIGINT) and when
// the object is destroyed (the job's exit), so a job stopped early has delivered what it measured.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "job/device_watch.h"
#include "plan/plan.h"
#include "protocol/job_protocol.h"
#include "protocol/job_request.h"
#include "telemetry/instruments.h"

namespace trainer::job {

using Getenv = protocol::Getenv;

// Who the job trains for, from the service's job request. What the request leaves empty keeps
// the defaults of a local run: run id "local", attempt 1, profile "local", and the plan's
// workload, method and base model.
struct RunIdentity {
  std::string run_id = "local";  // TRAINER_RUN_ID
  int64_t attempt = 1;           // TRAINER_ATTEMPT (1-based)
  std::string workload;          // TRAINER_WORKLOAD; empty: the plan's
  std::string method;            // TRAINER_METHOD (sft | grpo | gspo); empty: the plan's
  std::string base_model;        // TRAINER_BASE_MODEL, the user-facing name; empty: the plan's
  std::string base_model_sha;    // TRAINER_BASE_MODEL_SHA; empty: not reported
  std::string profile = "local"; // TRAINER_PROFILE
  std::string pipeline_id;       // TRAINER_PIPELINE_ID; empty: not a pipeline stage's run
  std::string pipeline_stage;    // TRAINER_PIPELINE_STAGE
  static RunIdentity of(const protocol::JobRequest& request);
};

// NVML's library, TRAINER_NVML_LIBRARY overriding the default (libnvidia-ml.so.1).
inline constexpr const char* kNvmlLibraryVar = "TRAINER_NVML_LIBRARY";

// Where and how often to push: the request's OTLP endpoint (+ "/v1/metrics") every
// otlp_interval_ms; without one, the OTEL_* variables `getenv` gives; nullopt: no export.
// InvalidArgument names TRAINER_OTLP_ENDPOINT when it is not an http:// URL.
Result<std::optional<telemetry::OtlpOptions>> export_options_for(const protocol::JobRequest& request,
                                                                 const Getenv& getenv);

class JobTelemetry {
 public:
  // `settings_sha`: the run's settings hash (plan::settings_sha over the config and dataset).
  JobTelemetry(const plan::Plan& plan, const RunIdentity& identity, const std::string& settings_sha,
               std::optional<telemetry::OtlpOptions> export_options);
  ~JobTelemetry();  // final push
  JobTelemetry(const JobTelemetry&) = delete;
  JobTelemetry& operator=(const JobTelemetry&) = delete;

  // Records what `event` measured. Called on one thread at a time (the training thread).
  void on_event(const protocol::Event& event);
  // Pushes at once on the exporter's thread, without waiting. Thread-safe; no-op without export.
  void request_export();
  // Pushes now and waits for the answer (bounded by the export timeout): called before the job
  // reports how it ended, so a run that trainerd shows ended has every series it measured there.
  void flush();

  telemetry::MeterProvider& provider() { return *provider_; }
  // Where the job's one-line notices go (stderr by default): "device health: NVML not available".
  void set_log(std::function<void(const std::string&)> log) { log_ = std::move(log); }

 private:
  void record_devices(const protocol::Devices& devices);
  // At the first devices event: the device watch over the job's CUDA devices, or one notice
  // saying why there is none.
  void watch_devices(const protocol::Devices& devices);
  void record_rl_step(const protocol::Step& step);
  void end_workers();

  // Constant after construction: strings the resource refers to, the provider, its metrics.
  std::string run_id_, workload_, method_, base_model_, base_model_sha_, settings_sha_, submission_id_, profile_;
  std::string pipeline_id_, pipeline_stage_;
  std::unique_ptr<telemetry::MeterProvider> provider_;
  std::unique_ptr<telemetry::JobMetrics> metrics_;
  std::unique_ptr<telemetry::OtlpPusher> pusher_;  // destroyed before the provider
  std::chrono::milliseconds export_interval_{5000};  // the device watch's averaging window
  std::function<void(const std::string&)> log_;
  // Training thread only.
  protocol::Devices devices_;  // the devices the worker series name
  int64_t last_step_ = 0;      // a step reported twice counts once
  bool devices_watched_ = false;  // the device watch was started, or its absence said
  std::unique_ptr<DeviceWatch> watch_;  // records into metrics_: destroyed before it
};

}  // namespace trainer::job

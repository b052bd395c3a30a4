#include "service/metrics.h"

#include <unistd.h>

#include "common/version.h"
#include "telemetry/instruments.h"

namespace trainer::service {

namespace tel = trainer::telemetry;

namespace {

tel::RunPhase run_phase(Phase p) { return static_cast<tel::RunPhase>(static_cast<int>(p)); }

tel::RunOutcome outcome_of(Phase p) {
  return p == Phase::kCompleted ? tel::RunOutcome::kCompleted
         : p == Phase::kFailed  ? tel::RunOutcome::kFailed
                                : tel::RunOutcome::kCancelled;
}

}  // namespace

struct ServiceTelemetry::Impl {
  explicit Impl(const std::string& instance)
      : provider(tel::Resource{tel::AttributeSet({{"service.name", std::string("trainerd")},
                                                  {"service.instance.id", instance}})},
                 {.scope_version = version_string()}),
        metrics(provider) {}

  tel::MeterProvider provider;
  tel::ServiceMetrics metrics;

  std::mutex mu;  // guards the sets below: series published at the previous scrape
  std::set<std::pair<std::string, bool>> pools;
  std::set<std::string> workloads;
};

ServiceTelemetry::ServiceTelemetry(std::string instance)
    : instance_(std::move(instance)), impl_(std::make_unique<Impl>(instance_)) {}

ServiceTelemetry::~ServiceTelemetry() = default;

void ServiceTelemetry::phase_entered(Phase phase) {
  impl_->metrics.run_phase_entries.add(1, {.run_phase = run_phase(phase)});
}

void ServiceTelemetry::phase_left(Phase phase, double seconds) {
  impl_->metrics.run_phase_duration.record(seconds, {.run_phase = run_phase(phase)});
}

void ServiceTelemetry::run_failed(Phase failed_in) {
  impl_->metrics.run_failures.add(1, {.run_phase = run_phase(failed_in)});
}

void ServiceTelemetry::run_ended(Phase terminal, const std::string& method, double seconds) {
  impl_->metrics.run_duration.record(seconds, {.run_outcome = outcome_of(terminal), .run_method = method});
}

void ServiceTelemetry::operation_attempt(const OperationAttempt& a) {
  impl_->metrics.service_operation_attempts.add(1, {.service_operation = a.operation,
                                                    .service_stage = a.stage,
                                                    .service_outcome = a.outcome,
                                                    .service_failure_reason = a.reason,
                                                    .pause_policy = a.pause_policy});
}

void ServiceTelemetry::operation_ended(tel::ServiceOperation operation, tel::ServiceOutcome outcome, double seconds,
                                       std::optional<tel::ServiceFailureReason> reason,
                                       std::optional<tel::PausePolicy> pause_policy) {
  impl_->metrics.service_operation_duration.record(seconds, {.service_operation = operation,
                                                             .service_outcome = outcome,
                                                             .service_failure_reason = reason,
                                                             .pause_policy = pause_policy});
}

void ServiceTelemetry::gpu_time(const std::string& workload, const std::string& accelerator, double seconds) {
  // Wall time of the job's process times its devices: derived, not a hardware reading.
  impl_->metrics.cost_gpu_time.add(seconds,
                                   {.workload = workload, .pool_accelerator = accelerator, .gpu_derived = true});
}

void ServiceTelemetry::set_pools(const std::vector<PoolGauge>& pools) {
  // Pools of one accelerator and role share their series (the registry names no pool key).
  std::map<std::pair<std::string, bool>, PoolGauge> merged;
  for (const auto& p : pools) {
    PoolGauge& m = merged[{p.accelerator, p.serving}];
    m.declared += p.declared;
    if (p.observed) m.observed = m.observed.value_or(0) + *p.observed;
    m.granted_claims += p.granted_claims;
    m.queued_claims += p.queued_claims;
    m.granted_devices += p.granted_devices;
    m.queued_devices += p.queued_devices;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& m = impl_->metrics;
  for (const auto& [key, p] : merged) {
    const std::string_view acc = key.first;
    const bool serving = key.second;
    m.pool_claims.set(p.granted_claims, {.claim_state = tel::ClaimState::kGranted, .instance = instance_,
                                         .pool_accelerator = acc, .pool_serving = serving});
    m.pool_claims.set(p.queued_claims, {.claim_state = tel::ClaimState::kQueued, .instance = instance_,
                                        .pool_accelerator = acc, .pool_serving = serving});
    m.pool_devices_claimed.set(p.granted_devices, {.claim_state = tel::ClaimState::kGranted, .instance = instance_,
                                                   .pool_accelerator = acc, .pool_serving = serving});
    m.pool_devices_claimed.set(p.queued_devices, {.claim_state = tel::ClaimState::kQueued, .instance = instance_,
                                                  .pool_accelerator = acc, .pool_serving = serving});
    m.pool_devices_declared.set(p.declared, {.instance = instance_, .pool_accelerator = acc, .pool_serving = serving});
    if (p.observed) {
      m.pool_devices_observed.set(*p.observed,
                                  {.instance = instance_, .pool_accelerator = acc, .pool_serving = serving});
    }
    impl_->pools.insert(key);
  }
}

void ServiceTelemetry::set_workloads(const std::vector<WorkloadGauge>& workloads) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& m = impl_->metrics;
  std::set<std::string> now;
  for (const auto& w : workloads) {
    m.workload_devices_claimed.set(w.granted_devices,
                                   {.workload = w.name, .claim_state = tel::ClaimState::kGranted, .instance = instance_});
    m.workload_devices_claimed.set(w.queued_devices,
                                   {.workload = w.name, .claim_state = tel::ClaimState::kQueued, .instance = instance_});
    m.workload_devices_quota.set(w.quota, {.workload = w.name, .instance = instance_});
    now.insert(w.name);
  }
  // A renamed workload's old name stops being a series.
  for (const auto& gone : impl_->workloads) {
    if (now.count(gone)) continue;
    m.workload_devices_claimed.clear({.workload = gone, .claim_state = tel::ClaimState::kGranted, .instance = instance_});
    m.workload_devices_claimed.clear({.workload = gone, .claim_state = tel::ClaimState::kQueued, .instance = instance_});
    m.workload_devices_quota.clear({.workload = gone, .instance = instance_});
  }
  impl_->workloads = std::move(now);
}

void ServiceTelemetry::set_runs_active(const std::map<Phase, int>& by_phase) {
  for (const auto& [phase, n] : by_phase) {
    impl_->metrics.run_active.set(n, {.run_phase = run_phase(phase), .instance = instance_});
  }
}

void ServiceTelemetry::set_pipelines_active(int n) {
  impl_->metrics.pipeline_active.set(n, {.instance = instance_});
}

void ServiceTelemetry::pipeline_stage_ended(tel::PipelineStageType type, bool success, double seconds) {
  impl_->metrics.pipeline_stage_duration.record(
      seconds, {.pipeline_stage_type = type,
                .pipeline_stage_outcome = success ? tel::PipelineStageOutcome::kSuccess : tel::PipelineStageOutcome::kFailure});
}

std::string ServiceTelemetry::render() const { return tel::prometheus_exposition(impl_->provider).body; }

std::string ServiceTelemetry::content_type() const { return tel::kPrometheusTextContentType; }

}  // namespace trainer::service

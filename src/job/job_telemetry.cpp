#include "job/job_telemetry.h"

#include <cstdio>
#include <cstdlib>

namespace trainer::job {
namespace tel = trainer::telemetry;

RunIdentity RunIdentity::from_environment() {
  RunIdentity id;
  if (const char* v = std::getenv("TRAINER_RUN_ID"); v != nullptr && *v) id.run_id = v;
  if (const char* v = std::getenv("TRAINER_RUN_ATTEMPT"); v != nullptr && *v) id.attempt = std::atoll(v);
  if (const char* v = std::getenv("TRAINER_PROFILE"); v != nullptr && *v) id.profile = v;
  return id;
}

JobTelemetry::JobTelemetry(const plan::Plan& plan, RunIdentity identity) : plan_(plan), identity_(std::move(identity)) {}

JobTelemetry::~JobTelemetry() {
  if (pusher_) pusher_->stop();
  pusher_.reset();
}

void JobTelemetry::start(const std::string& settings_sha) {
  settings_sha_ = settings_sha;
  base_model_ = plan_.baseModel.value_or("");
  submission_id_ = plan_.submissionId.value_or(identity_.run_id + "-" + std::to_string(identity_.attempt));
  tel::TrainingJobResource resource{.run_id = identity_.run_id,
                                    .run_attempt = identity_.attempt,
                                    .workload = plan_.workload,
                                    .run_method = "SFT",
                                    .run_engine = "native",
                                    .run_base_model = base_model_,
                                    .run_settings_sha = settings_sha_,
                                    .run_lora_rank = plan_.config.lora.rank,
                                    .run_learning_rate = plan_.config.optimizer.learningRate,
                                    .job_submission_id = submission_id_,
                                    .profile = identity_.profile};
  provider_ = std::make_unique<tel::MeterProvider>(resource.to_resource("trainer-job"));
  metrics_ = std::make_unique<tel::JobMetrics>(*provider_);
  auto options = tel::otlp_options_from_environment(std::getenv);
  if (!options.is_ok()) {
    std::fprintf(stderr, "trainer-job: telemetry export off: %s\n", options.status().message().c_str());
  } else if (*options) {
    pusher_ = std::make_unique<tel::OtlpPusher>(*provider_, **options);
  }
}

void JobTelemetry::on_event(const nlohmann::json& event) {
  const std::string type = event.value("type", "");
  if (type == "resolved" && !provider_) {
    start(event.value("settingsSha", ""));
    for (const auto& e : pending_) record(e);
    pending_.clear();
  }
  if (!provider_) {
    pending_.push_back(event);
    return;
  }
  record(event);
}

void JobTelemetry::record(const nlohmann::json& e) {
  const std::string type = e.value("type", "");
  tel::JobMetrics& m = *metrics_;
  auto phase = [&](tel::SftStepPhase p, const char* field) {
    if (e.contains(field)) m.sft_step_phase_duration.set(e[field].get<double>(), {.sft_step_phase = p});
  };
  if (type == "data_fit") {
    m.sft_data_rows.set(e.value("rows", int64_t{0}), {.sft_data_fit = tel::SftDataFit::kAll});
    m.sft_data_rows.set(e.value("truncated", int64_t{0}), {.sft_data_fit = tel::SftDataFit::kTruncated});
    m.sft_data_rows.set(e.value("exact", int64_t{0}), {.sft_data_fit = tel::SftDataFit::kAtLimit});
    m.sft_data_rows.set(e.value("dropped", int64_t{0}), {.sft_data_fit = tel::SftDataFit::kDropped});
  } else if (type == "phase" && e.value("phase", "") == "TRAINING") {
    m.sft_step_count.add(0);  // published from zero, so a stalled loop is visible
  } else if (type == "step") {
    const int64_t step = e.value("step", int64_t{0});
    if (step > last_step_) {
      m.sft_step_count.add(1);
      last_step_ = step;
    }
    m.sft_step_duration.record(e.value("stepSeconds", 0.0));
    m.sft_loss.set(e.value("loss", 0.0));
    m.sft_learning_rate.set(e.value("learningRate", 0.0));
    m.sft_grad_norm.set(e.value("gradNorm", 0.0));
    m.sft_token_accuracy.set(e.value("tokenAccuracy", 0.0));
    m.sft_throughput.set(e.value("tokensPerSecond", 0.0));
    m.sft_batch_tokens.set(e.value("batchTokens", int64_t{0}));
    if (e.contains("paddingShare")) m.sft_padding_ratio.set(e["paddingShare"].get<double>());
    if (e.contains("mfu")) m.sft_mfu.set(e["mfu"].get<double>());
    if (e.contains("memory")) {
      const auto& mem = e["memory"];
      if (mem.contains("deviceAllocatedPeakBytes")) {
        m.sft_memory_allocated_peak.set(mem["deviceAllocatedPeakBytes"].get<int64_t>());
        m.sft_memory_reserved_peak.set(mem.value("deviceReservedPeakBytes", int64_t{0}));
      } else if (mem.contains("rssPeakBytes")) {
        m.sft_memory_allocated_peak.set(mem["rssPeakBytes"].get<int64_t>());  // CPU: the process's RSS high-water mark
      }
    }
    phase(tel::SftStepPhase::kInput, "inputSeconds");
    phase(tel::SftStepPhase::kForwardBackward, "forwardBackwardSeconds");
    phase(tel::SftStepPhase::kOptimizer, "optimizerSeconds");
    phase(tel::SftStepPhase::kStep, "stepSeconds");
  } else if (type == "validation") {
    m.sft_validation_loss.set(e.value("validationLoss", 0.0));
    phase(tel::SftStepPhase::kEvaluation, "evaluationSeconds");
  } else if (type == "checkpoint" || type == "completed") {
    phase(tel::SftStepPhase::kCheckpoint, "checkpointSeconds");
  }
}

}  // namespace trainer::job

#include "job/job_telemetry.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "job/job_events.h"
#include "job/report_sender.h"

namespace trainer::job {
namespace tel = trainer::telemetry;

namespace {

constexpr int64_t kMaxPushTimeoutMs = 5000;

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

RunIdentity RunIdentity::of(const protocol::JobRequest& request) {
  RunIdentity id;
  if (!request.run_id.empty()) id.run_id = request.run_id;
  id.attempt = request.attempt;
  id.workload = request.identity.workload;
  id.method = request.identity.method;
  id.base_model = request.identity.base_model;
  id.base_model_sha = request.identity.base_model_sha;
  if (!request.identity.profile.empty()) id.profile = request.identity.profile;
  id.pipeline_id = request.identity.pipeline_id;
  id.pipeline_stage = request.identity.pipeline_stage;
  return id;
}

Result<std::optional<tel::OtlpOptions>> export_options_for(const protocol::JobRequest& request,
                                                           const Getenv& getenv) {
  std::string base = request.otlp_endpoint;
  if (base.empty()) return tel::otlp_options_from_environment(getenv);
  while (!base.empty() && base.back() == '/') base.pop_back();
  tel::OtlpOptions options;
  options.endpoint = base + "/v1/metrics";
  const int64_t interval = request.otlp_interval_ms;
  options.interval = std::chrono::milliseconds(interval);
  options.timeout = std::chrono::milliseconds(std::min(interval, kMaxPushTimeoutMs));
  // trainerd restarting as the job ends still gets its last figures (as it gets its last events).
  options.final_push_deadline = EventWriter::kFlushWait;
  if (base.rfind("http://", 0) != 0 && base.rfind("https://", 0) != 0) {
    return invalid_field("TRAINER_OTLP_ENDPOINT", "'" + base + "' must start with http:// or https://");
  }
  // trainerd's own relay (BASE/otlp of a catalog base) takes the attempt's credentials and is
  // verified with the CA trainerd hands its jobs; an operator's collector gets neither.
  bool own_relay = false;
  for (const std::string& catalog : catalog_bases(request.catalog_url)) own_relay |= !catalog.empty() && base == catalog + "/otlp";
  if (own_relay) {
    options.ca_file = request.catalog_ca_file;
    if (!request.job_id.empty() && !request.job_token.empty()) {
      options.headers = {{"X-Trainer-Job", request.job_id}, {"Authorization", "Bearer " + request.job_token}};
    }
  }
  return std::optional<tel::OtlpOptions>(std::move(options));
}

JobTelemetry::JobTelemetry(const plan::Plan& plan, const RunIdentity& identity, const std::string& settings_sha,
                           std::optional<tel::OtlpOptions> export_options)
    : run_id_(identity.run_id),
      workload_(identity.workload.empty() ? plan.workload : identity.workload),
      method_(upper(identity.method.empty() ? plan::method_name(plan.config.method) : identity.method)),
      base_model_(identity.base_model.empty() ? plan.baseModel.value_or("") : identity.base_model),
      base_model_sha_(identity.base_model_sha),
      settings_sha_(settings_sha),
      // One per attempt, as the specification's job.submission_id is: the run id and attempt
      // (the plan's submissionId is the API's idempotency key, the same for every attempt).
      submission_id_(identity.run_id + "-" + std::to_string(identity.attempt)),
      profile_(identity.profile),
      pipeline_id_(identity.pipeline_id),
      pipeline_stage_(identity.pipeline_stage) {
  tel::TrainingJobResource resource{.run_id = run_id_,
                                    .run_attempt = identity.attempt,
                                    .workload = workload_,
                                    .run_method = method_,
                                    .run_engine = plan::engine_name(plan.config.engine),
                                    .run_base_model = base_model_,
                                    .run_settings_sha = settings_sha_,
                                    .run_lora_rank = plan.config.lora.rank,
                                    .run_learning_rate = plan.config.active_optimizer().learningRate,
                                    .job_submission_id = submission_id_,
                                    .profile = profile_};
  if (!base_model_sha_.empty()) resource.run_base_model_sha = base_model_sha_;
  if (!pipeline_id_.empty()) {
    resource.pipeline_id = pipeline_id_;
    resource.pipeline_stage_name = pipeline_stage_;
  }
  provider_ = std::make_unique<tel::MeterProvider>(resource.to_resource("trainer-job"));
  metrics_ = std::make_unique<tel::JobMetrics>(*provider_);
  if (export_options) {
    export_interval_ = export_options->interval;
    pusher_ = std::make_unique<tel::OtlpPusher>(*provider_, std::move(*export_options));
  }
  log_ = [](const std::string& line) { std::fprintf(stderr, "trainer-job: %s\n", line.c_str()); };
}

JobTelemetry::~JobTelemetry() {
  watch_.reset();
  if (pusher_) pusher_->stop();
  pusher_.reset();
}

void JobTelemetry::request_export() {
  if (pusher_) pusher_->request_push();
}

void JobTelemetry::flush() {
  if (pusher_) (void)pusher_->push_now();  // a failed push warned on stderr; the exit retries it
}

void JobTelemetry::record_devices(const protocol::Devices& devices) {
  tel::JobMetrics& m = *metrics_;
  devices_ = devices;
  int64_t accelerators = 0;
  for (const auto& d : devices_.devices) {
    if (d.kind != "cpu") ++accelerators;
    tel::metrics::JobWorkerInfoAttributes a{.job_rank = d.index, .job_role = tel::JobRole::kTrainer};
    if (!d.uuid.empty()) a.hw_id = d.uuid;
    m.job_worker_info.set(1, a);
  }
  m.job_devices.set(accelerators);
  watch_devices(devices);
}

void JobTelemetry::watch_devices(const protocol::Devices& devices) {
  if (devices_watched_) return;
  devices_watched_ = true;
  const char* library = std::getenv(kNvmlLibraryVar);
  auto nvml = Nvml::load(library != nullptr && *library != '\0' ? library : kNvmlLibrary);
  if (!nvml.is_ok()) {
    log_("device health: " + nvml.status().message() + "; no gpu.* metrics are recorded");
    return;
  }
  std::vector<std::string> gpus;
  for (const auto& d : devices.devices) {
    if (d.kind == "cuda") gpus.push_back(d.uuid.empty() ? std::to_string(d.index) : d.uuid);
  }
  if (gpus.empty()) return;  // a CPU job on a machine with NVML: nothing to watch
  auto watch = DeviceWatch::start(std::move(*nvml), gpus, *metrics_,
                                  DeviceWatchOptions{.interval = std::chrono::seconds(1), .window = export_interval_});
  if (!watch.is_ok()) {
    log_("device health: " + watch.status().message() + "; no gpu.* metrics are recorded");
    return;
  }
  watch_ = std::move(*watch);
}

// The job is ending: its workers' series end and it holds no device.
void JobTelemetry::end_workers() {
  tel::JobMetrics& m = *metrics_;
  for (const auto& d : devices_.devices) {
    tel::metrics::JobWorkerInfoAttributes a{.job_rank = d.index, .job_role = tel::JobRole::kTrainer};
    if (!d.uuid.empty()) a.hw_id = d.uuid;
    m.job_worker_info.clear(a);
  }
  if (!devices_.devices.empty()) m.job_devices.set(0);
  watch_.reset();
}

// A GRPO/GSPO step: the rl.* series from the step's `rl` object (engine/rl/grpo.cpp).
void JobTelemetry::record_rl_step(const protocol::Step& e) {
  tel::JobMetrics& m = *metrics_;
  const nlohmann::json& rl = e.rl;
  auto num = [&](const char* key) { return rl.value(key, 0.0); };
  if (e.step > last_step_) {
    m.rl_step_count.add(e.step - std::max<int64_t>(last_step_, 0));
    last_step_ = e.step;
  }
  m.rl_step_duration.record(e.step_seconds);
  m.rl_loss_policy.set(e.loss);
  m.rl_learning_rate.set(e.learning_rate);
  m.rl_grad_norm.set(e.grad_norm);
  m.rl_batch_tokens.set(e.batch_tokens);
  m.rl_throughput.set(e.tokens_per_second);
  if (e.mfu) m.rl_mfu.set(*e.mfu);
  if (e.memory) {
    if (e.memory->allocated_peak_bytes) m.rl_memory_allocated_peak.set(*e.memory->allocated_peak_bytes);
    if (e.memory->reserved_peak_bytes) m.rl_memory_reserved_peak.set(*e.memory->reserved_peak_bytes);
  }
  m.rl_reward_mean.set(num("rewardMean"));
  m.rl_reward_std.set(num("rewardStd"));
  m.rl_reward_zero_ratio.set(num("rewardZeroShare"));
  m.rl_group_zero_std_ratio.set(num("zeroStdGroupShare"));
  m.rl_kl.set(num("kl"));
  m.rl_clip_ratio.set(num("clipRatio"));
  m.rl_clip_ratio_low.set(num("clipRatioLow"));
  m.rl_clip_ratio_high.set(num("clipRatioHigh"));
  m.rl_entropy.set(num("entropy"));
  m.rl_completion_scored.set(rl.value("completionsScored", int64_t{0}));
  m.rl_completion_length_mean.set(num("completionLengthMean"));
  m.rl_completion_length_min.set(rl.value("completionLengthMin", int64_t{0}));
  m.rl_completion_length_max.set(rl.value("completionLengthMax", int64_t{0}));
  m.rl_completion_length_terminated_mean.set(num("completionLengthTerminatedMean"));
  m.rl_completion_truncated_ratio.set(num("truncatedShare"));
  if (const auto it = rl.find("completionLengths"); it != rl.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_number_integer()) m.rl_completion_length.record(v.get<int64_t>());
    }
  }
  if (const auto it = rl.find("rewards"); it != rl.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_number()) m.rl_rollout_reward.record(v.get<double>(), {.rl_term = "total"});
    }
  }
  if (const auto it = rl.find("terms"); it != rl.end() && it->is_array()) {
    for (const auto& t : *it) {
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) continue;
      const std::string name = t["name"].get<std::string>();
      m.rl_reward_term_mean.set(t.value("mean", 0.0), {.rl_term = name});
      m.rl_reward_term_std.set(t.value("std", 0.0), {.rl_term = name});
      // One duration per rollout scored (callSeconds); a step without them records the term's.
      if (const auto calls = t.find("callSeconds"); calls != t.end() && calls->is_array()) {
        for (const auto& s : *calls) {
          if (s.is_number()) m.rl_reward_term_duration.record(s.get<double>(), {.rl_term = name});
        }
      } else {
        m.rl_reward_term_duration.record(t.value("seconds", 0.0), {.rl_term = name});
      }
      if (const auto causes = t.find("failuresByCause"); causes != t.end() && causes->is_object()) {
        for (const tel::RlGraderFailureCause cause :
             {tel::RlGraderFailureCause::kTimeout, tel::RlGraderFailureCause::kUnreachable,
              tel::RlGraderFailureCause::kNoVerdict, tel::RlGraderFailureCause::kGoldNotLabel}) {
          const int64_t n = causes->value(std::string(tel::to_string(cause)), int64_t{0});
          if (n > 0) m.rl_grader_failures.add(n, {.rl_term = name, .rl_grader_failure_cause = cause});
        }
      }
      if (const auto tokens = t.find("judgeTokens"); tokens != t.end() && tokens->is_object()) {
        const int64_t in = tokens->value("input", int64_t{0}), out = tokens->value("output", int64_t{0});
        if (in > 0) m.rl_grader_tokens.add(in, {.rl_term = name, .rl_grader_token_type = tel::RlGraderTokenType::kInput});
        if (out > 0) m.rl_grader_tokens.add(out, {.rl_term = name, .rl_grader_token_type = tel::RlGraderTokenType::kOutput});
      }
    }
  }
  auto phase = [&](std::string_view name, double seconds) {
    m.rl_step_phase_duration.set(seconds, {.rl_step_phase = name});
  };
  phase("gen", num("generationSeconds"));
  phase("reward", num("rewardSeconds"));
  phase("old_log_prob", num("oldLogprobSeconds"));
  phase("update_actor", num("actorUpdateSeconds"));
  phase("step", e.step_seconds);
  if (rl.contains("toolCallsMean")) {  // only runs with tools record them
    m.rl_tool_calls_mean.set(num("toolCallsMean"));
    m.rl_tool_calls_failure_ratio.set(num("toolCallFailureShare"));
  }
  m.rl_role_idle_ratio.set(num("trainerIdle"), {.rl_role = tel::RlRole::kTrainer});
  m.rl_role_idle_ratio.set(num("rolloutIdle"), {.rl_role = tel::RlRole::kRollout});
}

void JobTelemetry::on_event(const protocol::Event& event) {
  tel::JobMetrics& m = *metrics_;
  auto phase = [&](tel::SftStepPhase p, double seconds) { m.sft_step_phase_duration.set(seconds, {.sft_step_phase = p}); };
  if (const auto* e = std::get_if<protocol::Phase>(&event)) {
    if (e->phase == "TRAINING") {  // published from zero, so a stalled loop is visible
      if (method_ == "SFT") m.sft_step_count.add(0);
      else m.rl_step_count.add(0);
    }
    request_export();
  } else if (const auto* e = std::get_if<protocol::Devices>(&event)) {
    record_devices(*e);
  } else if (const auto* e = std::get_if<protocol::DataFit>(&event)) {
    m.sft_data_rows.set(e->truncated, {.sft_data_fit = tel::SftDataFit::kTruncated});
    m.sft_data_rows.set(e->exact, {.sft_data_fit = tel::SftDataFit::kAtLimit});
    m.sft_data_rows.set(e->dropped, {.sft_data_fit = tel::SftDataFit::kDropped});
  } else if (const auto* e = std::get_if<protocol::DataSplit>(&event)) {
    m.sft_data_rows.set(e->train_rows, {.sft_data_fit = tel::SftDataFit::kAll});
    m.sft_data_rows.set(e->held_out ? e->validation_rows : 0, {.sft_data_fit = tel::SftDataFit::kHeldOut});
  } else if (const auto* e = std::get_if<protocol::Step>(&event); e != nullptr && e->rl.is_object()) {
    record_rl_step(*e);
  } else if (const auto* e = std::get_if<protocol::Step>(&event)) {
    if (e->step > last_step_) {
      m.sft_step_count.add(1);
      last_step_ = e->step;
    }
    m.sft_step_duration.record(e->step_seconds);
    m.sft_loss.set(e->loss);
    m.sft_learning_rate.set(e->learning_rate);
    m.sft_grad_norm.set(e->grad_norm);
    m.sft_token_accuracy.set(e->token_accuracy);
    m.sft_throughput.set(e->tokens_per_second);
    m.sft_batch_tokens.set(e->batch_tokens);
    if (e->padding_share) m.sft_padding_ratio.set(*e->padding_share);
    if (e->mfu) m.sft_mfu.set(*e->mfu);
    if (e->memory) {
      const protocol::StepMemory& mem = *e->memory;
      if (mem.allocated_peak_bytes) m.sft_memory_allocated_peak.set(*mem.allocated_peak_bytes);
      if (mem.reserved_peak_bytes) m.sft_memory_reserved_peak.set(*mem.reserved_peak_bytes);
      const protocol::MemoryUsage& u = mem.usage;
      auto part = [&](tel::MemoryComponent c, const std::optional<int64_t>& bytes) {
        if (bytes) m.memory_usage.set(*bytes, {.memory_component = c});
      };
      part(tel::MemoryComponent::kWeights, u.weights);
      part(tel::MemoryComponent::kAdapter, u.adapter);
      part(tel::MemoryComponent::kGradients, u.gradients);
      part(tel::MemoryComponent::kOptimizerState, u.optimizer_state);
      part(tel::MemoryComponent::kActivations, u.activations);
      part(tel::MemoryComponent::kOtherTensors, u.other_tensors);
      part(tel::MemoryComponent::kAllocatorCache, u.allocator_cache);
      part(tel::MemoryComponent::kOutsideAllocator, u.outside_allocator);
      part(tel::MemoryComponent::kFree, u.free);
    }
    phase(tel::SftStepPhase::kInput, e->input_seconds);
    phase(tel::SftStepPhase::kForwardBackward, e->forward_backward_seconds);
    phase(tel::SftStepPhase::kOptimizer, e->optimizer_seconds);
    phase(tel::SftStepPhase::kStep, e->step_seconds);
  } else if (const auto* e = std::get_if<protocol::Validation>(&event)) {
    m.sft_validation_loss.set(e->validation_loss);
    phase(tel::SftStepPhase::kEvaluation, e->evaluation_seconds);
  } else if (const auto* e = std::get_if<protocol::Checkpoint>(&event)) {
    phase(tel::SftStepPhase::kCheckpoint, e->checkpoint_seconds);
  } else if (const auto* e = std::get_if<protocol::Completed>(&event)) {
    phase(tel::SftStepPhase::kExport, e->export_seconds);
    end_workers();
  } else if (std::holds_alternative<protocol::Failed>(event) || std::holds_alternative<protocol::Cancelled>(event)) {
    end_workers();
  }
}

}  // namespace trainer::job

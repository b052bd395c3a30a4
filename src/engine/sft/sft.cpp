// The LoRA SFT loop: data, model, adapters, AdamW, schedule, metrics, adapter output.
#include "engine/sft/sft.h"

#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/sha256.h"
#include "engine/data/dataset.h"
#include "engine/device/gpu_info.h"
#include "engine/device/peak_flops.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/lora/lora.h"
#include "engine/memory.h"
#include "engine/sft/batch_tensors.h"
#include "engine/sft/schedule.h"
#include "storage/storage.h"

namespace trainer::engine {
namespace sft {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void synchronize(const at::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
}

// The job's devices as the protocol names them; `gpu` is the CUDA device's NVML record.
protocol::Devices devices_of(const at::Device& device, const std::optional<device::GpuInfo>& gpu) {
  protocol::Device d;
  d.index = 0;
  d.kind = device.is_cuda() ? "cuda" : "cpu";
  if (gpu) {
    d.name = gpu->name;
    d.uuid = gpu->uuid;
  }
  return protocol::Devices{{d}};
}

int64_t gradient_bytes(const std::vector<at::Tensor>& params) {
  int64_t total = 0;
  for (const auto& p : params) {
    if (p.grad().defined()) total += static_cast<int64_t>(p.grad().nbytes());
  }
  return total;
}

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Sha256 h;
  std::vector<char> buf(1 << 16);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    h.update(std::string_view(buf.data(), static_cast<size_t>(in.gcount())));
  }
  return h.hex_digest();
}

struct Evaluation {
  double loss = 0;
  int64_t tokens = 0;
};

Evaluation evaluate(model::CausalLM& model, const std::vector<data::TokenizedRow>& rows, int batch_size, int max_seq_length,
                    int32_t pad) {
  at::NoGradGuard no_grad;
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  data::SequenceOptions so;
  so.max_seq_length = max_seq_length;
  auto seqs = data::plan_sequences(rows, order, so);
  at::Tensor sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(model.device()));
  Evaluation e;
  for (size_t b = 0; b < seqs.size(); b += static_cast<size_t>(batch_size)) {
    data::Batch batch = data::make_batch(rows, seqs, b, static_cast<size_t>(batch_size), pad);
    BatchTensors t = to_tensors(batch, model.device(), false);
    at::Tensor hidden = model.hidden_states(t.input, false);
    auto parts = model::next_token_loss(model, hidden, t.labels);
    sum += parts.loss_sum.to(at::kDouble);
    e.tokens += parts.tokens;
  }
  e.loss = e.tokens > 0 ? sum.item<double>() / static_cast<double>(e.tokens) : 0.0;
  return e;
}

TrainResult run(const TrainRequest& request, const EventSink& emit) {
  const auto start = Clock::now();
  const plan::Plan& plan = request.plan;
  const plan::RunConfig& cfg = plan.config;
  const plan::TrainingSettings& tr = cfg.training;
  if (cfg.method != plan::Method::kSft) {
    throw EngineError(StatusCode::kInvalidArgument, std::string("config.method: the native engine trains \"sft\"; got \"") +
                                                        plan::method_name(cfg.method) + "\"");
  }
  if (!plan.baseModel || plan.baseModel->empty()) {
    throw EngineError(StatusCode::kInvalidArgument, "baseModel: required: the model folder to adapt");
  }
  emit(protocol::Phase{.phase = "PREPARING"});
  at::manual_seed(tr.seed);
  const at::Device device = pick_device(plan.execution.gpus);
  if (!device.is_cuda()) memory::install_cpu_meter();  // before the model: its tensors are counted
  const std::optional<device::GpuInfo> gpu =
      device.is_cuda() ? device::gpu_info(device.index()) : std::nullopt;
  emit(devices_of(device, gpu));
  auto model = model::CausalLM::load(*plan.baseModel, dtype_of(cfg.precision), device);
  text::Tokenizer tok = load_tokenizer_for(*plan.baseModel, model->config());

  data::LoadOptions lo;
  lo.max_seq_length = cfg.maxSeqLength;
  int64_t last_reported = -1;
  lo.progress = [&](int64_t done, int64_t total) {
    const int64_t every = std::max<int64_t>(1, total / 20);
    if (done == total || done - last_reported >= every) {
      emit(protocol::Preparing{.rows_done = done, .rows_total = total});
      last_reported = done;
    }
  };
  data::Dataset ds = value_or_throw(data::load_dataset(cfg.dataset, tok, lo));
  emit(protocol::DataFit{
      .rows = ds.fit.rows, .truncated = ds.fit.truncated, .exact = ds.fit.exact, .dropped = ds.fit.dropped});
  std::vector<data::TokenizedRow> train_rows, validation_rows;
  if (cfg.validationDataset) {
    data::LoadOptions vo;
    vo.max_seq_length = cfg.maxSeqLength;
    validation_rows = value_or_throw(data::load_dataset(*cfg.validationDataset, tok, vo)).rows;
    train_rows = std::move(ds.rows);
  } else {
    data::Split split = data::split_validation(std::move(ds.rows), tr.validationSplit, tr.seed);
    train_rows = std::move(split.train);
    validation_rows = std::move(split.validation);
  }
  if (train_rows.empty()) {
    throw EngineError(StatusCode::kInvalidArgument,
                      "config.dataset: " + cfg.dataset + ": no row left to train on (" + std::to_string(ds.fit.rows) +
                          " read, " + std::to_string(ds.fit.dropped) + " with nothing to train within maxSeqLength)");
  }
  emit(protocol::DataSplit{.train_rows = static_cast<int64_t>(train_rows.size()),
                           .validation_rows = static_cast<int64_t>(validation_rows.size()),
                           .held_out = !cfg.validationDataset && !validation_rows.empty()});
  emit(protocol::Resolved{.config = plan::config_to_json(cfg),
                          .settings_sha = plan::settings_sha(cfg, file_sha256(cfg.dataset))});

  data::SequenceOptions so;
  so.packing = tr.packing;
  so.max_seq_length = cfg.maxSeqLength;
  auto plan_epoch = [&](int64_t epoch) {
    return data::plan_sequences(train_rows, data::shuffled_order(train_rows.size(), tr.seed, epoch), so);
  };
  std::vector<data::Sequence> seqs = plan_epoch(0);
  const int64_t total = plan::total_steps(cfg, static_cast<int64_t>(seqs.size()));
  const int64_t warmup = warmup_steps(cfg.optimizer, total);

  lora::attach(*model, cfg.lora, tr.seed);
  std::vector<at::Tensor> params;
  for (auto& [name, p] : lora::named_parameters(*model)) params.push_back(p);
  AdamW optimizer(params, cfg.optimizer);
  const int32_t pad = tok.pad_id().value_or(0);
  // MFU against the device's dense bf16 peak, as the specification's sft.mfu defines it.
  std::optional<double> peak_flops;
  if (gpu) {
    if (auto peak = device::peak_flops(gpu->name)) peak_flops = peak->bf16;
  }
  const double flops_per_token =
      device::training_flops_per_token(static_cast<double>(model->config().linear_parameters()));
  memory::StaticParts parts;
  parts.weights = model->weight_bytes();
  for (const auto& p : params) parts.adapter += static_cast<int64_t>(p.nbytes());
  parts.optimizer_state = optimizer.state_bytes();
  if (!device.is_cuda()) {
    parts.uncounted = model->weight_bytes([](const at::Tensor& t) { return !memory::counted_by_cpu_meter(t); });
  }
  memory::StepMeter meter(device, parts);
  const std::string base_model_name = *plan.baseModel;

  emit(protocol::Phase{.phase = "TRAINING",
                       .total_steps = total,
                       .device = device.str(),
                       .startup_seconds = seconds_since(start)});
  TrainResult result;
  result.total_steps = total;
  int64_t epoch = 0;
  size_t cursor = 0;  // next sequence of the epoch
  const size_t bs = static_cast<size_t>(tr.batchSize);
  std::vector<data::Batch> batches;
  std::vector<BatchTensors> tensors;

  auto run_validation = [&](int64_t step) {
    if (validation_rows.empty()) return;
    const auto t0 = Clock::now();
    Evaluation e = evaluate(*model, validation_rows, tr.batchSize, cfg.maxSeqLength, pad);
    result.final_validation_loss = e.loss;
    emit(protocol::Validation{.step = step,
                              .validation_loss = e.loss,
                              .tokens = e.tokens,
                              .evaluation_seconds = seconds_since(t0)});
  };
  auto save_checkpoint = [&](int64_t step) {
    const auto t0 = Clock::now();
    const fs::path root = fs::path(request.output_dir) / "checkpoints";
    fs::create_directories(root);
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
    const std::string dir = (root / name / "adapter").string();
    fs::create_directories(root / name);
    lora::save_peft_folder(*model, cfg.lora, base_model_name, dir);
    std::vector<fs::path> existing;
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0) existing.push_back(e.path());
    }
    std::sort(existing.begin(), existing.end());
    const size_t keep = static_cast<size_t>(std::max(1, plan.execution.keepAdapters));
    for (size_t i = 0; i + keep < existing.size(); ++i) fs::remove_all(existing[i]);
    emit(protocol::Checkpoint{.step = step, .adapter_dir = dir, .checkpoint_seconds = seconds_since(t0)});
  };

  for (int64_t step = 0; step < total; ++step) {
    if (request.stop != nullptr && request.stop->load()) {
      result.cancelled = true;
      return result;
    }
    // Input: the micro-batches of this update, on the device.
    const auto t_input = Clock::now();
    batches.clear();
    tensors.clear();
    for (int m = 0; m < tr.gradientAccumulation; ++m) {
      if (cursor >= seqs.size()) {
        if (m > 0) break;  // the epoch's last update takes the micro-batches that are left
        seqs = plan_epoch(++epoch);
        cursor = 0;
      }
      batches.push_back(data::make_batch(train_rows, seqs, cursor, bs, pad));
      cursor += bs;
      tensors.push_back(to_tensors(batches.back(), device, tr.packing));
    }
    int64_t trained = 0, real = 0, padding = 0, positions = 0;
    for (const auto& b : batches) {
      trained += b.trained_tokens;
      real += b.real_tokens;
      padding += b.padding_tokens;
      positions += b.rows * b.seq_len;
    }
    synchronize(device);
    const double input_seconds = seconds_since(t_input);

    // Forward and backward, loss normalised over the update's trained tokens (as transformers
    // does with num_items_in_batch), then clipping.
    meter.begin_step();
    const auto t_step = Clock::now();
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
    at::Tensor correct = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(device));
    const double norm = static_cast<double>(std::max<int64_t>(trained, 1));
    for (auto& t : tensors) {
      at::Tensor hidden = model->hidden_states(t.input, true);
      model::LossParts parts = model::next_token_loss(*model, hidden, t.labels);
      (parts.loss_sum / norm).backward();
      loss_sum += parts.loss_sum.detach().to(at::kDouble);
      correct += parts.correct;
    }
    const double grad_norm = clip_grad_norm(params, cfg.optimizer.maxGradNorm);
    const int64_t grads_held = gradient_bytes(params);
    const double fb_seconds = seconds_since(t_step);

    const auto t_opt = Clock::now();
    const double lr = cfg.optimizer.learningRate * lr_multiplier(cfg.optimizer.schedule, step, warmup, total);
    optimizer.step(lr);
    optimizer.zero_grad();
    synchronize(device);
    const double opt_seconds = seconds_since(t_opt);
    const double step_seconds = seconds_since(t_step);

    const double loss = loss_sum.item<double>() / norm;
    const double accuracy = static_cast<double>(correct.item<int64_t>()) / norm;
    result.steps = step + 1;
    result.final_loss = loss;
    protocol::Step ev{.step = step + 1,
                      .total_steps = total,
                      .epoch = epoch,
                      .loss = loss,
                      .learning_rate = lr,
                      .grad_norm = grad_norm,
                      .token_accuracy = accuracy,
                      .tokens_per_second = static_cast<double>(real) / step_seconds,
                      .batch_tokens = real,
                      .trained_tokens = trained,
                      .step_seconds = step_seconds,
                      .input_seconds = input_seconds,
                      .forward_backward_seconds = fb_seconds,
                      .optimizer_seconds = opt_seconds};
    if (!tr.packing && positions > 0) ev.padding_share = static_cast<double>(padding) / static_cast<double>(positions);
    ev.memory = meter.end_step(grads_held);
    if (peak_flops) ev.mfu = flops_per_token * static_cast<double>(real) / step_seconds / *peak_flops;
    emit(ev);

    const bool last = step + 1 == total;
    if (!last && tr.validationFrequencySteps > 0 && (step + 1) % tr.validationFrequencySteps == 0) run_validation(step + 1);
    if (!last && plan.execution.saveEvery && *plan.execution.saveEvery > 0 && (step + 1) % *plan.execution.saveEvery == 0) {
      save_checkpoint(step + 1);
    }
  }
  run_validation(result.steps);
  // The final adapter: its own phase, not a checkpoint.
  emit(protocol::Phase{.phase = "EXPORTING"});
  const auto t_save = Clock::now();
  fs::create_directories(request.output_dir);
  result.adapter_dir = (fs::path(request.output_dir) / "adapter").string();
  lora::save_peft_folder(*model, cfg.lora, base_model_name, result.adapter_dir);
  protocol::Completed done{.adapter_dir = result.adapter_dir,
                           .final_loss = result.final_loss,
                           .steps = result.steps,
                           .export_seconds = seconds_since(t_save)};
  if (result.final_validation_loss >= 0) done.final_validation_loss = result.final_validation_loss;
  emit(done);
  return result;
}

}  // namespace
}  // namespace sft

Result<TrainResult> train_sft(const TrainRequest& request, const EventSink& events) {
  TrainResult result;
  Status st = guard([&] { result = sft::run(request, events); }, "");
  if (!st.is_ok()) return st;
  return result;
}

}  // namespace trainer::engine

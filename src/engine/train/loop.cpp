// The training loop shared by the methods (declared in train/loop.h).
#include "engine/train/loop.h"

#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include "common/files.h"
#include "common/sha256.h"
#include "engine/device/peak_flops.h"
#include "engine/train/step_profile.h"
#include "engine/engine_internal.h"
#include "engine/engine_reports.h"
#include "engine/lora/lora.h"
#include "engine/train/state.h"
#include "engine/optim/schedule.h"
#include "storage/storage.h"

namespace trainer::engine::train {
namespace fs = std::filesystem;

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

void synchronize(const at::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
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

namespace {

// Writes a checkpoint in `work` with `write`; a write that meets a full disk (ENOSPC, EDQUOT, in
// our writers or in std::filesystem's) is thrown again as resource_exhausted naming the folder
// ("no space left on the disk of the job's checkpoint folder ..."), which the job takes for a
// pause, not a failure; the half-written folder is removed whatever the error.
void write_checkpoint_or_name_a_full_disk(const fs::path& work, int64_t step, const std::function<void()>& write) {
  auto full = [&](const std::string& why) {
    return EngineError(StatusCode::kResourceExhausted,
                       "no space left on the disk of the job's checkpoint folder " + work.parent_path().string() +
                           ": saving the checkpoint of step " + std::to_string(step) + ": " + why);
  };
  std::error_code gone;
  try {
    write();
  } catch (const EngineError& e) {
    fs::remove_all(work, gone);
    if (e.code() == StatusCode::kResourceExhausted) throw full(e.what());
    throw;
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(work, gone);
    if (is_disk_full(e.code().value())) throw full(e.what());
    throw;
  } catch (...) {
    fs::remove_all(work, gone);
    throw;
  }
}

// Removes all but the newest `keep` checkpoint folders (keys step-NNNNNNNN) of `checkpoints`.
void prune_checkpoints(storage::Storage& checkpoints, size_t keep) {
  std::vector<std::string> steps;
  for (const std::string& file : value_or_throw(checkpoints.list(""))) {
    const std::string top = file.substr(0, file.find('/'));
    if (top.rfind("step-", 0) == 0 && (steps.empty() || steps.back() != top)) steps.push_back(top);
  }
  for (size_t i = 0; i + keep < steps.size(); ++i) throw_if_error(checkpoints.remove(steps[i]));
}

// The job's devices as the protocol names them, one per rank (the rank's index); a CUDA device's
// name and UUID from NVML where it answers.
protocol::Devices devices_of(const at::Device& device, int ranks) {
  protocol::Devices out;
  for (int r = 0; r < ranks; ++r) {
    protocol::Device d;
    d.index = r;
    d.kind = device.is_cuda() ? "cuda" : "cpu";
    if (device.is_cuda()) {
      if (auto gpu = device::gpu_info(r)) {
        d.name = gpu->name;
        d.uuid = gpu->uuid;
      }
    }
    out.devices.push_back(std::move(d));
  }
  return out;
}

std::vector<at::Tensor> attach_adapter(model::CausalLM& model, const plan::LoraSettings& lora, uint64_t seed) {
  lora::attach(model, lora, seed);
  std::vector<at::Tensor> params;
  for (auto& [name, p] : lora::named_parameters(model)) params.push_back(p);
  return params;
}

}  // namespace

Setup prepare(const plan::Plan& plan, const EventSink& emit, const dist::World& world,
              std::shared_ptr<dist::Rendezvous> rendezvous) {
  Setup s;
  s.start = SteadyClock::now();
  s.world = world;
  if (!plan.baseModel || plan.baseModel->empty()) {
    throw EngineError(StatusCode::kInvalidArgument, "baseModel: required: the model folder to adapt");
  }
  emit(protocol::Phase{.phase = "PREPARING"});
  at::manual_seed(plan.config.training.seed);
  s.device = pick_device(plan.execution.gpus);
  if (world.distributed()) {
    if (s.device.is_cuda()) {
      if (world.rank >= at::accelerator::deviceCount()) {
        throw EngineError(StatusCode::kFailedPrecondition,
                          "execution.gpus: rank " + std::to_string(world.rank) + " of " + std::to_string(world.size) +
                              " trains on CUDA device " + std::to_string(world.rank) + ", but this process sees " +
                              std::to_string(at::accelerator::deviceCount()) + " (CUDA_VISIBLE_DEVICES)");
      }
      s.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(world.rank));
    } else {
      // The ranks share the host's cores.
      at::set_num_threads(std::max(1, at::get_num_threads() / world.size));
    }
    s.group = dist::Group::join(world, std::move(rendezvous));
  }
  if (!s.device.is_cuda()) memory::install_cpu_meter();  // before the model: its tensors are counted
  if (s.device.is_cuda()) s.gpu = device::gpu_info(s.device.index());
  emit(devices_of(s.device, world.size));
  s.model = model::CausalLM::load(*plan.baseModel, dtype_of(plan.config.precision), s.device);
  s.tokenizer = std::make_unique<text::Tokenizer>(load_tokenizer_for(*plan.baseModel, s.model->config()));
  return s;
}

Updater::Updater(model::CausalLM& model, const plan::LoraSettings& lora, const plan::OptimizerSettings& optimizer,
                 uint64_t seed, int64_t total_steps)
    : params_(attach_adapter(model, lora, seed)),
      settings_(optimizer),
      optimizer_(params_, optimizer),
      total_(total_steps),
      warmup_(optim::warmup_steps(optimizer, total_steps)) {}

double Updater::clip() {
  if (group_ != nullptr) {
    // A rank whose share of the update was empty holds no gradient: it adds zeros.
    std::vector<at::Tensor> grads;
    for (auto& p : params_) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    group_->sum(grads);
  }
  const double norm = optim::clip_grad_norm(params_, settings_.maxGradNorm);
  gradient_bytes_ = 0;
  for (const auto& p : params_) {
    if (p.grad().defined()) gradient_bytes_ += static_cast<int64_t>(p.grad().nbytes());
  }
  return norm;
}

double Updater::learning_rate(int64_t step) const {
  return settings_.learningRate * optim::lr_multiplier(settings_.schedule, step, warmup_, total_);
}

double Updater::apply(int64_t step) {
  const double lr = learning_rate(step);
  optimizer_.step(lr);
  optimizer_.zero_grad();
  return lr;
}

LoopOptions loop_options(const TrainRequest& request) {
  const plan::Plan& plan = request.plan;
  LoopOptions options;
  options.output_dir = request.output_dir;
  options.stop = request.stop;
  options.pause = request.pause;
  options.resume_weights_dir = request.resume_weights_dir;
  options.resume_state_dir = request.resume_state_dir;
  options.branch = request.branch;
  options.save_every = plan.execution.saveEvery.value_or(0);
  options.pause_at_step = plan.pauseAtStep.value_or(0);
  options.resumable_cadence = plan.execution.resumable_cadence();
  options.resumable_save_every = plan.execution.resumableSaveEvery.value_or(0);
  options.resumable_save_seconds = plan.execution.resumableSaveMinutes.value_or(0) * 60.0;
  options.keep_checkpoints = plan.execution.keepAdapters;
  options.lora = plan.config.lora;
  options.base_model = *plan.baseModel;
  options.plan = &plan;
  return options;
}

nlohmann::json memory_moment(const at::Device& device, const model::CausalLM& model) {
  const int64_t uncounted =
      device.is_cuda() ? 0 : model.weight_bytes([](const at::Tensor& t) { return !memory::counted_by_cpu_meter(t); });
  return memory::held_now(device, uncounted);
}

namespace {

// The engine's reports before the first step: its resolved configuration, and its runtime
// report with the model loaded (rollout engine, setup changes, parameter counts, memory).
void report_engine_setup(const plan::Plan& plan, const SetupFacts& facts, const model::CausalLM& model,
                         const Updater& updater, const at::Device& device, const EventSink& emit) {
  emit(protocol::EngineConfig{.engine = "native", .config = native_engine_config(plan, facts)});
  int64_t trainable = 0;
  for (const auto& p : updater.params()) trainable += p.numel();
  const int64_t base = model.parameter_count();
  const int64_t total = base + trainable;
  nlohmann::json report = {
      {"rolloutEngine", native_rollout_engine(plan, facts)},
      {"trainer", {{"changedBySetup", native_setup_changes(plan, facts)}}},
      {"model",
       {{"totalParameters", total},
        {"trainableParameters", trainable},
        {"frozenParameters", base},
        {"trainableShare", total > 0 ? static_cast<double>(trainable) / static_cast<double>(total) : 0.0},
        {"dtype", plan.config.precision == plan::Precision::kBf16 ? "bfloat16" : "float32"}}},
      {"memory", {{"afterLoad", memory_moment(device, model)}}}};
  emit(protocol::EngineRuntime{.engine = "native", .report = std::move(report)});
}

}  // namespace

TrainResult run(Method& method, Setup& setup, Updater& updater, const LoopOptions& options, const EventSink& emit,
                const CheckpointHook& on_checkpoint) {
  model::CausalLM& model = *setup.model;
  const at::Device device = setup.device;
  // MFU against the device's dense bf16 peak, as the specification's sft.mfu defines it.
  std::optional<double> peak_flops;
  if (setup.gpu) {
    if (auto peak = device::peak_flops(setup.gpu->name)) peak_flops = peak->bf16 * setup.world.size;
  }
  memory::StaticParts parts;
  parts.weights = model.weight_bytes();
  for (const auto& p : updater.params()) parts.adapter += static_cast<int64_t>(p.nbytes());
  parts.optimizer_state = updater.optimizer().state_bytes();
  if (!device.is_cuda()) {
    parts.uncounted = model.weight_bytes([](const at::Tensor& t) { return !memory::counted_by_cpu_meter(t); });
  }
  memory::StepMeter meter(device, parts);
  const int64_t total = updater.total_steps();
  const bool reports = options.plan != nullptr && setup.writes();
  if (reports) {
    const SetupFacts facts{.device = device.str(),
                           .cuda = device.is_cuda(),
                           .ranks = setup.world.size,
                           .total_steps = total,
                           .warmup_steps = updater.warmup_steps()};
    report_engine_setup(*options.plan, facts, model, updater, device, emit);
  }

  emit(protocol::Phase{.phase = "TRAINING",
                       .total_steps = total,
                       .device = device.str(),
                       .startup_seconds = seconds_since(setup.start)});
  TrainResult result;
  result.total_steps = total;

  auto run_validation = [&](int64_t step) {
    if (!setup.writes()) return;
    std::optional<protocol::Validation> v = method.validate(step);
    if (!v) return;
    result.final_validation_loss = v->validation_loss;
    emit(*v);
  };
  // Checkpoints are artifacts of a storage rooted at DIR/checkpoints, one folder per save under
  // the key step-NNNNNNNN: written in a working folder, published whole, the oldest removed by key.
  const fs::path checkpoint_root = fs::path(options.output_dir) / "checkpoints";
  std::unique_ptr<storage::Storage> checkpoints;
  // A checkpoint: the adapter and the training state; returns its folder.
  auto last_state_save = SteadyClock::now();  // the attempt's start counts as one
  auto save_checkpoint = [&](int64_t step, bool with_state) {
    const auto t0 = SteadyClock::now();
    if (!checkpoints) checkpoints = value_or_throw(storage::make_folder_storage(checkpoint_root.string()));
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
    const fs::path work = checkpoint_root / (std::string(".writing-") + name);
    fs::remove_all(work);
    write_checkpoint_or_name_a_full_disk(work, step, [&] {
      lora::save_peft_folder(model, options.lora, options.base_model, (work / "adapter").string());
      if (with_state) save_training_state((work / kTrainingStateDir).string(), updater, step, method.data_state(), device);
      throw_if_error(checkpoints->publish(work.string(), name));
    });
    fs::remove_all(work);
    const fs::path folder = checkpoint_root / name;
    const std::string dir = (folder / "adapter").string();
    std::optional<std::string> state_dir;
    if (with_state) {
      state_dir = (folder / kTrainingStateDir).string();
      last_state_save = SteadyClock::now();
    }
    if (on_checkpoint) on_checkpoint(step, folder.string());
    prune_checkpoints(*checkpoints, static_cast<size_t>(std::max(1, options.keep_checkpoints)));
    emit(protocol::Checkpoint{
        .step = step, .adapter_dir = dir, .checkpoint_seconds = seconds_since(t0), .state_dir = state_dir});
  };
  // After optimizer step `done`: whether the training state is due on the resumable cadence.
  auto state_due = [&](int64_t done) {
    return (options.resumable_save_every > 0 && done % options.resumable_save_every == 0) ||
           (options.resumable_save_seconds > 0 && seconds_since(last_state_save) >= options.resumable_save_seconds);
  };

  // A resumed run: the adapter, the optimizer, the RNG and the data position as saved. A child
  // run takes the weights (and, restoring training state, the rest) but counts from zero.
  int64_t first = 0;
  if (options.branch && !options.resume_weights_dir.empty()) load_adapter_weights(options.resume_weights_dir, model);
  if (!options.resume_state_dir.empty()) {
    if (!options.branch) load_adapter_weights(options.resume_weights_dir, model);
    LoadedState loaded = load_training_state(options.resume_state_dir, updater, device);
    if (!options.branch && (loaded.engine_step < 0 || loaded.engine_step > total)) {
      throw EngineError(StatusCode::kInvalidArgument, options.resume_state_dir + ": engine step " +
                                                          std::to_string(loaded.engine_step) + " is outside the run's " +
                                                          std::to_string(total) + " steps");
    }
    method.restore_data_state(loaded.data);
    if (!options.branch) {
      first = loaded.engine_step;
      result.steps = first;
    }
  }

  // Pause and stop as requested of this rank, or of any rank where there are several.
  auto requests = [&] {
    std::vector<bool> flags{options.pause != nullptr && options.pause->load(),
                            options.stop != nullptr && options.stop->load()};
    if (setup.group) flags = setup.group->any(flags);
    return flags;
  };
  const double flops_per_token = method.flops_per_token();
  StepProfile profile = StepProfile::from_environment();
  for (int64_t step = first; step < total; ++step) {
    const std::vector<bool> requested = requests();
    // The plan's pause, once: an attempt that resumes from that step trains on.
    const bool planned = options.pause_at_step > 0 && step == options.pause_at_step && step > first;
    if (requested[0] || planned) {
      if ((step > first || first > 0) && setup.writes()) save_checkpoint(step, /*with_state=*/true);
      result.paused = step > first || first > 0;
      result.paused_by_plan = planned && !requested[0];
      result.cancelled = !result.paused;  // nothing trained yet: nothing to save
      return result;
    }
    if (requested[1]) {
      result.cancelled = true;
      return result;
    }
    meter.begin_step();
    profile.begin(step);
    protocol::Step ev = method.step(step, updater);
    profile.end(step, ev.step_seconds);
    ev.step = step + 1;
    ev.total_steps = total;
    ev.memory = meter.end_step(updater.gradient_bytes());
    const double mfu_seconds = method.mfu_seconds(ev);
    if (peak_flops && flops_per_token > 0 && mfu_seconds > 0) {
      ev.mfu = flops_per_token * static_cast<double>(ev.batch_tokens) / mfu_seconds / *peak_flops;
    }
    if (peak_flops && ev.useful_flops && mfu_seconds > 0) ev.useful_mfu = *ev.useful_flops / mfu_seconds / *peak_flops;
    result.steps = step + 1;
    result.final_loss = ev.loss;
    const std::optional<protocol::StepMemory> step_memory = ev.memory;
    emit(ev);
    if (reports && step == first) {
      nlohmann::json after = memory_moment(device, model);
      if (step_memory && step_memory->allocated_peak_bytes) after["peakAllocatedBytes"] = *step_memory->allocated_peak_bytes;
      if (step_memory && step_memory->reserved_peak_bytes) after["peakReservedBytes"] = *step_memory->reserved_peak_bytes;
      emit(protocol::EngineRuntime{.engine = "native", .report = {{"memory", {{"afterFirstStep", std::move(after)}}}}});
    }

    const bool last = step + 1 == total;
    if (!last && options.validation_every > 0 && (step + 1) % options.validation_every == 0) run_validation(step + 1);
    const bool weights_due = options.save_every > 0 && (step + 1) % options.save_every == 0;
    const bool resumable_due = options.resumable_cadence && state_due(step + 1);
    if (!last && (weights_due || resumable_due) && setup.writes()) {
      save_checkpoint(step + 1, /*with_state=*/!options.resumable_cadence || resumable_due);
    }
  }
  if (!setup.writes()) return result;  // rank 0 validates and exports
  run_validation(result.steps);
  // The final adapter: its own phase, not a checkpoint.
  emit(protocol::Phase{.phase = "EXPORTING"});
  const auto t_save = SteadyClock::now();
  fs::create_directories(options.output_dir);
  result.adapter_dir = (fs::path(options.output_dir) / "adapter").string();
  lora::save_peft_folder(model, options.lora, options.base_model, result.adapter_dir);
  const std::string state_dir = (fs::path(options.output_dir) / kTrainingStateDir).string();
  save_training_state(state_dir, updater, result.steps, method.data_state(), device);
  protocol::Completed done{.adapter_dir = result.adapter_dir,
                           .final_loss = result.final_loss,
                           .steps = result.steps,
                           .export_seconds = seconds_since(t_save),
                           .state_dir = state_dir};
  if (result.final_validation_loss >= 0) done.final_validation_loss = result.final_validation_loss;
  emit(done);
  return result;
}

}  // namespace trainer::engine::train

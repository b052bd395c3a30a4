// The plan's smoke check (engine.h, smoke_check): two short trainings of the run's own plan on
// its dataset's first rows, through the same entry as the run (run_training), so it checks what
// the run will do. Torch-free: it only writes files and calls the engine's entries.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <variant>

#include "engine/engine.h"

namespace trainer::engine {
namespace {

namespace fs = std::filesystem;

// The restored step's loss may differ from the first by this much, relatively (a GPU's
// reductions need not add in the same order twice); on the CPU the two are equal.
constexpr double kRestoredLossTolerance = 1e-3;

struct Failure {
  const char* check;
  std::string reason;
};

// The first `rows` non-blank lines of `dataset`, written to `out`; the number written. A dataset
// that cannot be read is the load check's failure.
Result<int64_t> copy_first_rows(const std::string& dataset, int rows, const fs::path& out) {
  std::ifstream in(dataset, std::ios::binary);
  if (!in) return invalid_argument("config.dataset: " + dataset + " cannot be read");
  std::ofstream dst(out, std::ios::binary | std::ios::trunc);
  if (!dst) return internal_error("smoke check: cannot write " + out.string());
  int64_t written = 0;
  std::string line;
  while (written < rows && std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    dst << line << '\n';
    ++written;
  }
  dst.flush();
  if (!dst) return internal_error("smoke check: cannot write " + out.string());
  return written;
}

// The run's plan cut down to the check: `steps` steps on `rows_path`, one device, no validation,
// no saves but the one at `save_at` (0: none), no pause.
plan::Plan check_plan(const plan::Plan& run, const std::string& rows_path, int steps, int save_at) {
  plan::Plan p = run;
  p.smoke.reset();
  p.pauseAtStep.reset();
  p.config.dataset = rows_path;
  p.config.validationDataset.reset();
  p.config.training.validationSplit = 0;
  p.config.training.validationFrequencySteps = 0;
  p.config.training.maxSteps = steps;
  p.execution.gpus = std::min(run.execution.gpus, 1);
  p.execution.saveEvery.reset();
  if (save_at > 0) p.execution.saveEvery = save_at;
  p.execution.resumableSaveEvery.reset();
  p.execution.resumableSaveMinutes.reset();
  p.execution.keepAdapters = 1;
  return p;
}

bool finite(double x) {
  return std::isfinite(x);
}

}  // namespace

Result<SmokeResult> smoke_check(const TrainRequest& request, const plan::SmokeSettings& smoke) {
  const auto start = std::chrono::steady_clock::now();
  SmokeResult result;
  protocol::Smoke& verdict = result.verdict;
  const fs::path dir = fs::path(request.output_dir) / "smoke";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return internal_error("smoke check: creating " + dir.string() + ": " + ec.message());
  auto finish = [&](std::optional<Failure> failure) -> Result<SmokeResult> {
    verdict.passed = !failure.has_value();
    if (failure) {
      verdict.check = failure->check;
      verdict.reason = failure->reason;
    }
    verdict.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::error_code gone;
    fs::remove_all(dir, gone);  // the check leaves nothing behind
    return result;
  };

  const fs::path rows_path = dir / "rows.jsonl";
  auto rows = copy_first_rows(request.plan.config.dataset, smoke.rows, rows_path);
  if (!rows.is_ok()) {
    if (rows.status().code() == StatusCode::kInternal) return rows.status();
    return finish(Failure{"load", rows.status().message()});
  }
  if (*rows == 0)
    return finish(Failure{"load", "config.dataset: " + request.plan.config.dataset + " has no row"});
  verdict.rows = *rows;

  // The first training: every step but the last, a checkpoint with its training state, then the last.
  TrainRequest first;
  first.plan = check_plan(request.plan, rows_path.string(), smoke.steps, smoke.steps - 1);
  first.output_dir = (dir / "train").string();
  first.stop = request.stop;
  first.resume_weights_dir = request.resume_weights_dir;  // a warm start or a branch's weights
  first.resume_state_dir = request.resume_state_dir;
  first.branch = request.branch;
  std::optional<Failure> bad_step;
  std::string checkpoint_dir;
  auto trained = run_training(first, [&](const protocol::Event& ev) {
    if (const auto* s = std::get_if<protocol::Step>(&ev)) {
      verdict.steps = s->step;
      verdict.loss = s->loss;
      if (!bad_step && (!finite(s->loss) || !finite(s->grad_norm))) {
        bad_step =
            Failure{"loss", "step " + std::to_string(s->step) + " of " + std::to_string(smoke.steps) +
                                ": the loss is " + std::to_string(s->loss) + " and the gradient norm " +
                                std::to_string(s->grad_norm) +
                                "; the run would train on numbers that are not finite (lower the learning "
                                "rate, weight decay or lora.alpha, or keep maxGradNorm on)"};
      }
    } else if (const auto* c = std::get_if<protocol::Checkpoint>(&ev)) {
      if (c->state_dir) checkpoint_dir = fs::path(c->adapter_dir).parent_path().string();
    }
  });
  if (!trained.is_ok()) {
    const Status& st = trained.status();
    if (st.code() == StatusCode::kResourceExhausted) return st;
    return finish(Failure{verdict.steps == 0 ? "load" : "train", st.describe()});
  }
  if (trained->cancelled) {
    result.cancelled = true;
    std::error_code gone;
    fs::remove_all(dir, gone);
    return result;
  }
  if (bad_step) return finish(bad_step);
  if (checkpoint_dir.empty()) {
    return finish(Failure{"checkpoint", "no checkpoint with its training state was saved at step " +
                                            std::to_string(smoke.steps - 1)});
  }

  // The second: the same plan resumed from that checkpoint, its last step trained again.
  TrainRequest again;
  again.plan = check_plan(request.plan, rows_path.string(), smoke.steps, 0);
  again.output_dir = (dir / "restore").string();
  again.stop = request.stop;
  again.resume_weights_dir = (fs::path(checkpoint_dir) / "adapter").string();
  again.resume_state_dir = (fs::path(checkpoint_dir) / "training_state").string();
  std::optional<double> restored;
  auto resumed = run_training(again, [&](const protocol::Event& ev) {
    if (const auto* s = std::get_if<protocol::Step>(&ev)) restored = s->loss;
  });
  if (!resumed.is_ok()) {
    const Status& st = resumed.status();
    if (st.code() == StatusCode::kResourceExhausted) return st;
    return finish(Failure{"checkpoint", "restoring the checkpoint of step " +
                                            std::to_string(smoke.steps - 1) +
                                            " and training on: " + st.describe()});
  }
  if (resumed->cancelled) {
    result.cancelled = true;
    std::error_code gone;
    fs::remove_all(dir, gone);
    return result;
  }
  verdict.restored_loss = restored;
  const double loss = verdict.loss.value_or(0);
  if (!restored || !finite(*restored)) {
    return finish(Failure{"checkpoint", "step " + std::to_string(smoke.steps) +
                                            " trained from the restored checkpoint has no finite loss"});
  }
  if (!request.plan.config.is_rl() &&
      std::fabs(*restored - loss) > kRestoredLossTolerance * std::max(1.0, std::fabs(loss))) {
    return finish(Failure{"checkpoint",
                          "step " + std::to_string(smoke.steps) + " trained from the restored checkpoint " +
                              "has loss " + std::to_string(*restored) + ", and " + std::to_string(loss) +
                              " before the save: the checkpoint does not restore the training state"});
  }
  return finish(std::nullopt);
}

}  // namespace trainer::engine

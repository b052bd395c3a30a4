// The verl engine's bridge (verl_engine.h): the worker's input, then the peer engines' bridge.
#include "job/verl_engine.h"

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "job/peer_worker.h"

namespace trainer::job {

Result<engine::TrainResult> run_verl_training(const engine::TrainRequest& request, const std::string& settings_sha,
                                              const engine::EventSink& events) {
  const plan::Plan& plan = request.plan;
  if (!request.resume_weights_dir.empty()) {
    return failed_precondition(
        "engine verl: a verl run cannot start from a snapshot (a resume, runs branch or runs continue): its "
        "snapshots hold the adapter alone (weights), and the verl worker loads no starting adapter; start a new run");
  }
  auto rows = count_rows(plan.config.dataset);
  if (!rows.is_ok()) return rows.status();
  const int64_t total = plan::total_steps(plan.config, static_cast<int64_t>(*rows));
  const std::filesystem::path dir = std::filesystem::path(request.output_dir) / "verl";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("creating " + dir.string() + ": " + ec.message());
  const nlohmann::json input =
      worker_input(plan, settings_sha, native_row_order(plan.config, *rows, total), *rows, total, dir.string());
  const std::string input_path = (dir / "input.json").string();
  TRAINER_RETURN_IF_ERROR(write_file_atomic(input_path, input.dump()));

  const PeerWorker worker{
      .engine = "verl",
      .command = {env_or("TRAINER_VERL_PYTHON", TRAINER_VERL_PYTHON_DEFAULT),
                  env_or("TRAINER_VERL_WORKER", TRAINER_VERL_WORKER_DEFAULT), "--input", input_path},
      .silence_variable = "TRAINER_VERL_SILENCE_SECONDS",
      .start_hint = "set TRAINER_VERL_PYTHON to the Python holding verl (.venv-verl, made by tools/setup) and "
                    "TRAINER_VERL_WORKER to engines/verl/verl_worker.py",
      .can_pause = false,
      .cannot_pause = "its snapshots hold the adapter alone (verl's checkpoints are not taken as a training state, "
                      "docs/engines.md); cancel the run instead"};
  return run_peer_worker(worker, request, total, events);
}

}  // namespace trainer::job

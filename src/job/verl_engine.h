// The verl engine (config.engine: verl): trainer-job trains a GRPO/GSPO plan in verl's worker
// (engines/verl/verl_worker.py, its launcher mode: verl's main_ppo with the plan's overrides, FSDP
// actor, vLLM rollouts on CUDA; docs/engines.md "verl") through the peer engines' bridge
// (peer_worker.h), as the TRL engine does: every line validated, reward requests scored by the job's
// graders, verl's logged steps arriving as `step` events, and verl's saved LoRA adapter (at its save
// points and at the end) arriving as `checkpoint` / `completed` events whose adapter the job
// publishes as a `weights` snapshot. verl's checkpoints are not taken as a `trainingState`, so a verl
// run cannot pause or resume, nor start from a snapshot: a pause request ends the run failed, naming
// why, and a start from a snapshot is refused before the worker starts.
//
// The worker: TRAINER_VERL_PYTHON runs TRAINER_VERL_WORKER (defaults: .venv-verl's Python, made by
// tools/setup, and the source tree's engines/verl/verl_worker.py) with OUTPUT/verl/input.json; silence
// longer than TRAINER_VERL_SILENCE_SECONDS (default 600) is a hang. Failure reasons start "engine verl:".
#pragma once

#include <string>

#include "common/status.h"
#include "engine/engine.h"

namespace trainer::job {

// Trains `request` in the verl worker; events go to `events` as from engine::run_training, and the
// result says how it ended. `settings_sha` is what the worker reports in `resolved`.
Result<engine::TrainResult> run_verl_training(const engine::TrainRequest& request, const std::string& settings_sha,
                                              const engine::EventSink& events);

}  // namespace trainer::job

// The TRL engine (config.engine: trl): trainer-job trains the plan in a Python worker running
// TRL's SFTTrainer or GRPOTrainer with PEFT LoRA (engines/trl/trl_worker.py; docs/engines.md), and relays what
// the worker reports as this job's own events, so the run's publication, pause, resume,
// telemetry and outcome are those of a native run (job/cmd_run.cpp drives both the same way).
//
// The worker: TRAINER_TRL_PYTHON runs TRAINER_TRL_WORKER (defaults: .venv-trl's Python, the TRL
// worker's own environment made by tools/setup, and the source tree's engines/trl/trl_worker.py). It
// reads OUTPUT/trl/input.json (the resolved plan, the settings hash, the native engine's row order,
// the resume snapshot, a continued child's snapshot, and a chat dataset tokenized and loss-masked as
// the native engine does). The bridge is the peer engines' (peer_worker.h): events validated and
// relayed, reward requests scored by the job's graders, pause and stop forwarded, silence longer
// than TRAINER_TRL_SILENCE_SECONDS (default 600) a hang; every failure reason starts "engine trl:".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "job/peer_worker.h"  // native_row_order

namespace trainer::job {

// Trains `request` in the TRL worker; events go to `events` as from engine::run_training (the
// worker's completed among them), and the result says how it ended. `settings_sha` is what the
// worker reports in `resolved`.
Result<engine::TrainResult> run_trl_training(const engine::TrainRequest& request, const std::string& settings_sha,
                                             const engine::EventSink& events);

}  // namespace trainer::job

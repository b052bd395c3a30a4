// The TRL engine (config.engine: trl): trainer-job trains the plan in a Python worker running
// TRL's SFTTrainer or GRPOTrainer with PEFT LoRA (engines/trl/trl_worker.py; docs/engines.md), and relays what
// the worker reports as this job's own events, so the run's publication, pause, resume,
// telemetry and outcome are those of a native run (job/cmd_run.cpp drives both the same way).
//
// The worker: TRAINER_TRL_PYTHON runs TRAINER_TRL_WORKER (defaults: the build's Python,
// TRAINER_PYTHON, and the source tree's engines/trl/trl_worker.py). It reads OUTPUT/trl/input.json
// (the resolved plan, the settings hash, the native engine's row order, the resume snapshot, a
// continued child's snapshot, and a chat dataset tokenized and loss-masked as the native engine does),
// writes job-protocol events on stdout and reads commands on stdin ({"type":"pause"},
// {"type":"stop"}). Every line it writes must be an event (protocol::decode_event): a malformed
// line, an exit before its last event, a non-zero exit, or silence longer than
// TRAINER_TRL_SILENCE_SECONDS (default 600) ends the run failed, naming which, and the worker's
// process group is killed. A GRPO/GSPO worker's reward_request lines are not events: the job
// scores them with its own graders (engine::rl::Scorer) and replies on the worker's stdin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"

namespace trainer::job {

// The dataset rows in the order the native engine trains on them (data::shuffled_order of each
// epoch, epoch after epoch) for as many epochs as `total_steps` optimizer steps of
// batchSize x gradientAccumulation rows reach into. `rows` is the dataset's row count.
std::vector<size_t> native_row_order(const plan::RunConfig& config, size_t rows, int64_t total_steps);

// Trains `request` in the TRL worker; events go to `events` as from engine::run_training (the
// worker's completed among them), and the result says how it ended. `settings_sha` is what the
// worker reports in `resolved`.
Result<engine::TrainResult> run_trl_training(const engine::TrainRequest& request, const std::string& settings_sha,
                                             const engine::EventSink& events);

}  // namespace trainer::job

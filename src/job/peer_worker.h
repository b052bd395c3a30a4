// A peer engine's worker (config.engine trl or verl; docs/engines.md): a Python process that trains
// the plan and speaks the job protocol with trainer-job. The bridge both engines share: the worker
// started in its own process group, every line it writes validated (protocol::decode_event) and
// relayed to the job's event sink, its reward_request lines scored by the job's own graders
// (engine::rl::Scorer) and answered on its stdin, trainer-job's pause and stop forwarded to it
// ({"type":"pause"}, {"type":"stop"}), and its end turned into a TrainResult.
//
// Every failure's reason starts "engine NAME:": a line that is not an event, an exit before the
// last event or a non-zero one after it, the worker's own `failed` event, and silence longer than
// the engine's limit (a hang: the worker is killed). Every end kills the worker's process group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/engine.h"

namespace trainer::job {

// How one engine's worker is started and watched.
struct PeerWorker {
  std::string engine;                // "trl", "verl": names the engine in every failure reason
  std::vector<std::string> command;  // the worker's argv: its Python, its script, --input FILE
  std::string silence_variable;      // the environment variable for the hang limit (whole seconds; default 600)
  std::string start_hint;            // said when the worker does not start: which variables point at it
  bool can_pause = true;  // false: a pause request ends the run failed, naming why (the engine cannot save one)
  std::string cannot_pause;  // with can_pause false: why, completing "engine NAME cannot pause: "
};

// The dataset rows in the order the native engine trains on them (data::shuffled_order of each
// epoch, epoch after epoch) for as many epochs as `total_steps` optimizer steps of
// batchSize x gradientAccumulation rows (an RL plan: promptsPerStep prompts) reach into. `rows` is
// the dataset's row count.
std::vector<size_t> native_row_order(const plan::RunConfig& config, size_t rows, int64_t total_steps);

// Rows per optimizer step: batchSize x gradientAccumulation, or an RL step's promptsPerStep prompts.
size_t rows_per_step(const plan::RunConfig& config);

// The dataset's rows: its non-empty lines, as the native engine's reader counts them.
Result<size_t> count_rows(const std::string& path);

// The environment variable `name`, or `fallback` when it is unset or empty.
std::string env_or(const char* name, const std::string& fallback);

// What every worker's input file holds: plan (plan::to_json), settingsSha, order, rows, totalSteps
// and outputDir. Each engine adds its own keys.
nlohmann::json worker_input(const plan::Plan& plan, const std::string& settings_sha, const std::vector<size_t>& order,
                            size_t rows, int64_t total_steps, const std::string& output_dir);

// Runs `worker` to its end: events go to `events` as from engine::run_training (the worker's
// `completed` and `checkpoint` among them, which the job stages as snapshots); the result says how
// it ended. `total_steps` is the run's, for the result until the worker reports its own.
Result<engine::TrainResult> run_peer_worker(const PeerWorker& worker, const engine::TrainRequest& request,
                                            int64_t total_steps, const engine::EventSink& events);

}  // namespace trainer::job

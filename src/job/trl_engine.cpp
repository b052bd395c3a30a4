// The TRL engine's bridge (trl_engine.h): the worker's input (the row order, where a resumed or
// continued run starts, the native tokenization of chat rows), then the shared peer-worker bridge
// (peer_worker.h) runs it.
#include "job/trl_engine.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "engine/data/dataset.h"
#include "engine/text/tokenizer.h"
#include "job/peer_worker.h"

namespace trainer::job {
namespace {

// The optimizer steps a TRL training state (a checkpoint's trainer_state.json) had trained: where a
// continued run's data picks up. An error naming the snapshot's kind when it is not TRL's.
Result<int64_t> trl_state_steps(const std::string& state_dir) {
  auto text = read_file((std::filesystem::path(state_dir) / "trainer_state.json").string());
  if (!text.is_ok()) {
    return invalid_argument("engine trl: the snapshot's training state is not a TRL one (no trainer_state.json in " +
                            state_dir + "): a native run's training state continues on engine native; branch with "
                            "--restore weights to train its adapter on trl");
  }
  auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("global_step") || !doc["global_step"].is_number_integer()) {
    return invalid_argument("engine trl: " + state_dir + "/trainer_state.json has no integer global_step");
  }
  return doc["global_step"].get<int64_t>();
}

// An SFT dataset with chat rows tokenized as the native engine tokenizes it (its chat template
// rendering and its loss mask: the assistant's tokens), one entry per row in file order:
// {"input_ids", "assistant_masks"}, which TRL's SFTTrainer takes as a processed dataset and trains
// on the masked tokens only. Null for a dataset without chat rows (TRL's own prompt/completion
// handling already trains the completion alone), and for RL plans.
Result<nlohmann::json> native_tokens(const plan::Plan& plan) {
  if (plan.config.is_rl() || !plan.baseModel) return nlohmann::json(nullptr);
  auto examples = engine::data::read_jsonl(plan.config.dataset);
  if (!examples.is_ok()) return examples.status();
  const bool chat = std::any_of(examples->begin(), examples->end(), [](const engine::data::Example& e) {
    return e.kind == engine::data::Example::Kind::kChat;
  });
  if (!chat) return nlohmann::json(nullptr);
  auto tokenizer = engine::text::Tokenizer::load(*plan.baseModel);
  if (!tokenizer.is_ok()) return tokenizer.status();
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& example : *examples) {
    auto row = engine::data::tokenize_example(example, *tokenizer, plan.config.dataset);
    if (!row.is_ok()) return row.status();
    rows.push_back({{"input_ids", row->input_ids}, {"assistant_masks", row->trained}});
  }
  return rows;
}

}  // namespace

Result<engine::TrainResult> run_trl_training(const engine::TrainRequest& request, const std::string& settings_sha,
                                             const engine::EventSink& events) {
  const plan::Plan& plan = request.plan;
  // A child that restores trainingState (runs continue): its data picks up where the parent's
  // snapshot left it, as the native engine's data position does.
  const bool continuing = request.branch && !request.resume_state_dir.empty();
  int64_t parent_steps = 0;
  if (continuing) {
    auto steps = trl_state_steps(request.resume_state_dir);
    if (!steps.is_ok()) return steps.status();
    parent_steps = *steps;
  }
  auto rows = count_rows(plan.config.dataset);
  if (!rows.is_ok()) return rows.status();
  const int64_t total = plan::total_steps(plan.config, static_cast<int64_t>(*rows));

  const std::filesystem::path dir = std::filesystem::path(request.output_dir) / "trl";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("creating " + dir.string() + ": " + ec.message());
  std::vector<size_t> order = native_row_order(plan.config, *rows, parent_steps + total);
  order.erase(order.begin(),
              order.begin() + static_cast<std::ptrdiff_t>(std::min(
                                  order.size(), static_cast<size_t>(parent_steps) * rows_per_step(plan.config))));
  nlohmann::json input = worker_input(plan, settings_sha, order, *rows, total, dir.string());
  input["rolloutsPath"] = (std::filesystem::path(request.output_dir) / "rollouts.jsonl").string();
  for (const char* start : {"resume", "startFrom", "continueFrom"}) input[start] = nullptr;
  if (continuing) {  // the adapter, optimizer moments and RNG carry on; steps and schedule are the child's own
    input["continueFrom"] = {{"weightsDir", request.resume_weights_dir}, {"stateDir", request.resume_state_dir}};
  } else if (request.branch) {  // a child run's or a warm start's weights: steps, optimizer and schedule start afresh
    input["startFrom"] = {{"weightsDir", request.resume_weights_dir}};
  } else if (!request.resume_weights_dir.empty()) {
    input["resume"] = {{"weightsDir", request.resume_weights_dir}, {"stateDir", request.resume_state_dir}};
  }
  auto tokens = native_tokens(plan);
  if (!tokens.is_ok()) return tokens.status();
  input["tokenized"] = std::move(*tokens);
  const std::string input_path = (dir / "input.json").string();
  TRAINER_RETURN_IF_ERROR(write_file_atomic(input_path, input.dump()));

  const PeerWorker worker{
      .engine = "trl",
      .command = {env_or("TRAINER_TRL_PYTHON", TRAINER_TRL_PYTHON_DEFAULT),
                  env_or("TRAINER_TRL_WORKER", TRAINER_TRL_WORKER_DEFAULT), "--input", input_path},
      .silence_variable = "TRAINER_TRL_SILENCE_SECONDS",
      .start_hint = "set TRAINER_TRL_PYTHON to the Python holding TRL (.venv-trl, made by tools/setup) and "
                    "TRAINER_TRL_WORKER to engines/trl/trl_worker.py",
      .can_pause = true,  // TRL's checkpoint is a whole training state: a paused run resumes from it
      .cannot_pause = ""};
  return run_peer_worker(worker, request, total, events);
}

}  // namespace trainer::job

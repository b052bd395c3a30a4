// Generation with tool calls (config.rlHyperparams.tools; docs/rl.md, "Tools"): completions are
// sampled until they close a tool call (rl/tools.h); the call is run, its answer is appended in
// the chat template's tool role, and sampling continues after it, all within the completion
// budget (maxCompletionLength tokens, tool turns included). Internal to the engine (torch).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/generate/generate.h"
#include "engine/model/model.h"

namespace trainer::engine::rl {

struct ToolLoop {
  std::string command;           // the tool executable (rl/tools.h's protocol)
  double timeout_seconds = 10;   // per call
  bool network = false;          // the tool declared network access (config.rlHyperparams.tools.network)
  int64_t max_calls = 4;         // per completion; a call past them ends the completion
  // Per prompt (the order of `prompts`): the tool names its row declares.
  std::vector<std::vector<std::string>> declared;
  // The tokens that end prompt `prompt`'s assistant turn after its tool call, show `answer` in
  // the template's tool role and open the assistant's next turn.
  std::function<std::vector<int64_t>(size_t prompt, const std::string& answer)> tool_turn;
};

struct ToolGeneration {
  // Completions hold the sampled tokens and the tool turns between them; `terminated` is false
  // for a completion the budget cut (also inside a tool turn).
  generate::Generation gen;
  at::Tensor tool_mask;                  // [N, C] bool: tokens of tool turns (not sampled)
  std::vector<int64_t> calls, failures;  // per completion: tool calls made, and failed
  std::vector<int64_t> answer_start;     // per completion: where its text after the last tool turn begins
};

// Samples `prompts` as generate::generate does (`options.decode` must be set), running tool calls.
ToolGeneration generate_with_tools(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                   const generate::SamplingOptions& options, const ToolLoop& loop);

}  // namespace trainer::engine::rl

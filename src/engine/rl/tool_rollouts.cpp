// Generation with tool calls (declared in rl/tool_rollouts.h).
#include "engine/rl/tool_rollouts.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/engine_error.h"
#include "engine/rl/tools.h"

namespace trainer::engine::rl {
namespace {

// Seeds of the rounds after the first (sampling after tool answers) step by this.
constexpr uint64_t kRoundSeedStride = 1000003ULL;

struct RowState {
  std::vector<int64_t> tokens;
  std::vector<bool> tool;       // per token: written by a tool turn
  bool terminated = false;
  int64_t calls = 0, failures = 0, answer_start = 0;
  std::optional<ParsedToolCall> pending;  // the call its last segment closed, to be run
};

std::vector<int64_t> row_tokens(const generate::Generation& g, int64_t i) {
  at::Tensor row = g.completion_ids[i].narrow(0, 0, g.lengths[static_cast<size_t>(i)]).contiguous();
  return {row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()};
}

}  // namespace

ToolGeneration generate_with_tools(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                   const generate::SamplingOptions& options, const ToolLoop& loop) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!options.decode) throw EngineError(StatusCode::kInternal, "tool calls need a decoder");
  generate::SamplingOptions o = options;
  o.stop_strings.emplace_back(kToolCallClose);
  o.logprobs = false;
  const int64_t G = o.group_size, budget = o.max_new_tokens;
  ToolGeneration out;
  generate::Generation first = generate::generate(model, prompts, o);
  const int64_t N = first.completion_ids.size(0);
  std::vector<RowState> rows(static_cast<size_t>(N));

  // Appends a sampled segment; true when it closed a tool call that is to be run.
  auto settle = [&](RowState& row, std::vector<int64_t> seg, bool terminated) {
    const int64_t room = budget - static_cast<int64_t>(row.tokens.size());
    if (static_cast<int64_t>(seg.size()) > room) {
      seg.resize(static_cast<size_t>(room));
      terminated = false;
    }
    row.tokens.insert(row.tokens.end(), seg.begin(), seg.end());
    row.tool.insert(row.tool.end(), seg.size(), false);
    row.terminated = terminated;
    if (!terminated || seg.empty()) return false;
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), seg.back()) != o.stop_ids.end()) return false;
    row.pending = find_tool_call(o.decode(seg));
    // A call past max_calls is not run: the completion ends with it.
    return row.pending.has_value() && row.calls < loop.max_calls;
  };

  std::vector<size_t> pending;
  for (int64_t i = 0; i < N; ++i) {
    if (settle(rows[static_cast<size_t>(i)], row_tokens(first, i), first.terminated[static_cast<size_t>(i)])) {
      pending.push_back(static_cast<size_t>(i));
    }
  }
  for (uint64_t round = 1; !pending.empty(); ++round) {
    std::vector<std::vector<int64_t>> next_prompts;
    std::vector<size_t> next_rows;
    int64_t room_max = 0;
    for (size_t i : pending) {
      RowState& row = rows[i];
      const size_t prompt = i / static_cast<size_t>(G);
      ToolAnswer answer;
      if (!row.pending->call) {
        answer = failed_call(row.pending->error);
      } else {
        const auto& names = loop.declared[prompt];
        const std::string& name = row.pending->call->name;
        if (std::find(names.begin(), names.end(), name) == names.end()) {
          std::string list;
          for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
          answer = failed_call("no tool named \"" + name + "\"" +
                               (list.empty() ? std::string("; this conversation declares none") : "; declared: " + list));
        } else {
          answer = run_tool(loop.command, *row.pending->call, loop.timeout_seconds, loop.network);
        }
      }
      row.pending.reset();
      ++row.calls;
      if (answer.failed) ++row.failures;
      std::vector<int64_t> turn = loop.tool_turn(prompt, answer.content);
      const int64_t room = budget - static_cast<int64_t>(row.tokens.size());
      if (static_cast<int64_t>(turn.size()) >= room) {  // no room left to answer after it
        turn.resize(static_cast<size_t>(std::max<int64_t>(room, 0)));
        row.terminated = false;
      }
      row.tokens.insert(row.tokens.end(), turn.begin(), turn.end());
      row.tool.insert(row.tool.end(), turn.size(), true);
      row.answer_start = static_cast<int64_t>(row.tokens.size());
      if (row.answer_start >= budget) continue;
      std::vector<int64_t> p(prompts[prompt].begin(), prompts[prompt].end());
      p.insert(p.end(), row.tokens.begin(), row.tokens.end());
      next_prompts.push_back(std::move(p));
      next_rows.push_back(i);
      room_max = std::max(room_max, budget - row.answer_start);
    }
    pending.clear();
    if (next_rows.empty()) break;
    generate::SamplingOptions next = o;
    next.group_size = 1;
    next.max_new_tokens = room_max;
    next.seed = o.seed + round * kRoundSeedStride;
    generate::Generation g = generate::generate(model, next_prompts, next);
    for (size_t k = 0; k < next_rows.size(); ++k) {
      const int64_t gi = static_cast<int64_t>(k);
      if (settle(rows[next_rows[k]], row_tokens(g, gi), g.terminated[k])) pending.push_back(next_rows[k]);
    }
  }

  // The batch: the first round's prompts, the completions with their tool turns.
  generate::Generation& gen = out.gen;
  gen.prompt_ids = first.prompt_ids;
  gen.prompt_mask = first.prompt_mask;
  int64_t width = 1;
  for (const auto& r : rows) width = std::max<int64_t>(width, static_cast<int64_t>(r.tokens.size()));
  gen.completion_ids = at::full({N, width}, o.pad_id, at::kLong);
  gen.completion_mask = at::zeros({N, width}, at::kBool);
  out.tool_mask = at::zeros({N, width}, at::kBool);
  auto ci = gen.completion_ids.accessor<int64_t, 2>();
  auto cm = gen.completion_mask.accessor<bool, 2>();
  auto tm = out.tool_mask.accessor<bool, 2>();
  for (int64_t i = 0; i < N; ++i) {
    const RowState& r = rows[static_cast<size_t>(i)];
    int64_t sampled = 0;
    for (size_t j = 0; j < r.tokens.size(); ++j) {
      ci[i][static_cast<int64_t>(j)] = r.tokens[j];
      cm[i][static_cast<int64_t>(j)] = true;
      tm[i][static_cast<int64_t>(j)] = r.tool[j];
      if (!r.tool[j]) ++sampled;
    }
    gen.lengths.push_back(static_cast<int64_t>(r.tokens.size()));
    gen.terminated.push_back(r.terminated);
    gen.generated_tokens += sampled;
    out.calls.push_back(r.calls);
    out.failures.push_back(r.failures);
    out.answer_start.push_back(r.answer_start);
  }
  gen.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace trainer::engine::rl

// evaluate(): answers generated for a dataset's prompts, graded against the rows' expected
// answers (declared in engine.h; docs/evaluations.md).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/eval/answers.h"
#include "engine/generate/generate.h"
#include "engine/lora/lora.h"
#include "engine/rl/graders/scorer.h"
#include "engine/rl/rewards.h"

namespace trainer::engine {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Result<EvaluateResult> evaluate(const EvaluateRequest& request, const EvaluateProgress& progress) {
  EvaluateResult result;
  Status st = guard([&] {
    at::NoGradGuard no_grad;
    std::vector<rl::RlRow> rows = value_or_throw(rl::read_rl_rows(request.data_path, request.field));
    const rl::GraderContext graders = value_or_throw(rl::grader_context_from_environment(request.data_path));
    auto scorer = value_or_throw(rl::Scorer::create({request.grader}, graders));

    auto model = model::CausalLM::load(request.model_dir, dtype_of(request.precision), pick_device(request.gpus));
    if (!request.adapter_dir.empty()) lora::load_peft(*model, request.adapter_dir);
    text::Tokenizer tok = load_tokenizer_for(request.model_dir, model->config());

    const int64_t budget = request.max_seq_length - request.max_new_tokens;
    std::vector<eval::RowResult> out(rows.size());
    std::vector<std::vector<int64_t>> prompt_ids(rows.size());
    std::vector<size_t> answerable;
    for (size_t i = 0; i < rows.size(); ++i) {
      const rl::RlRow& r = rows[i];
      eval::RowResult& o = out[i];
      o.line = r.line;
      o.prompt = r.messages;
      o.input = rl::last_user_text(r.messages);
      o.expected = r.gold;
      text::RenderOptions ro;
      ro.add_generation_prompt = true;
      auto ids = tok.encode_chat(r.chat_messages, r.chat_tools, ro);
      if (!ids.is_ok()) {
        throw EngineError(StatusCode::kInvalidArgument,
                          request.field + ": " + request.data_path + ":" + std::to_string(r.line) + ": " + ids.status().message());
      }
      if (static_cast<int64_t>(ids->size()) > budget) {
        o.unscored_cause = "prompt_too_long";
        o.detail = "the prompt has " + std::to_string(ids->size()) + " tokens; at most " + std::to_string(budget) +
                   " leave room for " + std::to_string(request.max_new_tokens) + " new tokens within " +
                   std::to_string(request.max_seq_length);
        continue;
      }
      prompt_ids[i].assign(ids->begin(), ids->end());
      answerable.push_back(i);
    }
    // Prompts of similar length together: less padding. Greedy answers do not depend on the
    // batch they are generated in.
    std::stable_sort(answerable.begin(), answerable.end(),
                     [&](size_t a, size_t b) { return prompt_ids[a].size() < prompt_ids[b].size(); });

    generate::SamplingOptions so;
    so.max_new_tokens = request.max_new_tokens;
    so.greedy = request.greedy;
    so.temperature = request.temperature;
    so.seed = request.seed;
    so.stop_ids = stop_ids_of(request.model_dir, tok);
    so.pad_id = tok.pad_id().value_or(0);
    const int64_t total = static_cast<int64_t>(rows.size());
    int64_t done = total - static_cast<int64_t>(answerable.size());
    const size_t batch = static_cast<size_t>(std::max(1, request.batch_size));
    for (size_t b = 0; b < answerable.size(); b += batch) {
      if (request.stop != nullptr && request.stop->load()) {
        result.cancelled = true;
        return;
      }
      const size_t n = std::min(batch, answerable.size() - b);
      std::vector<std::vector<int64_t>> prompts;
      for (size_t k = 0; k < n; ++k) prompts.push_back(prompt_ids[answerable[b + k]]);
      so.seed = request.seed + b;
      const generate::Generation gen = generate::generate(*model, prompts, so);
      result.generation_seconds += gen.seconds;
      std::vector<rl::GradeItem> items;
      for (size_t k = 0; k < n; ++k) {
        eval::RowResult& o = out[answerable[b + k]];
        at::Tensor ids = gen.completion_ids[static_cast<int64_t>(k)].narrow(0, 0, gen.lengths[k]).contiguous();
        std::vector<int32_t> answer(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
        o.output = value_or_throw(tok.decode(answer, /*skip_special_tokens=*/true));
        o.output_tokens = gen.lengths[k];
        o.truncated = !gen.terminated[k];
        o.match = eval::match_answer(o.output, o.expected);
        items.push_back({.input = o.input, .output = o.output, .expected = o.expected, .row = o.line});
      }
      const auto t_grade = Clock::now();
      const rl::TermScores s = value_or_throw(scorer->score(0, items));
      result.grading_seconds += seconds_since(t_grade);
      for (size_t k = 0; k < n; ++k) {
        eval::RowResult& o = out[answerable[b + k]];
        if (s.failures[k] == rl::FailureCause::kNone) {
          o.score = s.raw[k];
        } else {
          o.unscored_cause = rl::failure_cause_name(s.failures[k]);
        }
      }
      done += static_cast<int64_t>(n);
      if (progress) progress(done, total);
    }
    for (const auto& o : out) result.rows.push_back(eval::row_json(o));
    result.report = eval::report_json(out);
  }, request.model_dir);
  if (!st.is_ok()) return st;
  return result;
}

}  // namespace trainer::engine

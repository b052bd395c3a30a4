// The reward terms of a job (declared in graders/scorer.h).
#include "engine/rl/graders/scorer.h"

#include <cstdio>

namespace trainer::engine::rl {

Result<std::unique_ptr<Scorer>> Scorer::create(const std::vector<plan::RewardTermSpec>& terms,
                                               const GraderContext& ctx) {
  auto s = std::unique_ptr<Scorer>(new Scorer());
  for (size_t i = 0; i < terms.size(); ++i) {
    Term t;
    t.at = "config.reward.terms[" + std::to_string(i) + "]";
    t.label = plan::term_label(terms[i]);
    t.kind = terms[i].kind;
    t.weight = terms[i].weight;
    const bool built_in = plan::term_kind(terms[i].kind) == plan::TermKind::kLabelMatch;
    t.max_consecutive = built_in ? 0 : terms[i].maxConsecutiveFailures;
    auto g = make_grader(terms[i], t.at, ctx);
    if (!g.is_ok()) return g.status();
    t.grader = std::move(*g);
    s->terms_.push_back(std::move(t));
  }
  return s;
}

Result<TermScores> Scorer::score(size_t term, const std::vector<GradeItem>& items) {
  Term& t = terms_[term];
  auto verdicts = t.grader->grade(items);
  if (!verdicts.is_ok()) return verdicts.status();
  TermScores out;
  out.raw.reserve(items.size());
  for (const Verdict& v : *verdicts) {
    out.raw.push_back(v.failure == FailureCause::kNone ? v.score : 0.0);
    out.failures.push_back(v.failure);
    out.call_seconds.push_back(v.seconds);
    out.input_tokens += v.input_tokens;
    out.output_tokens += v.output_tokens;
    if (v.failure == FailureCause::kNone) {
      t.consecutive = 0;
      continue;
    }
    // A degraded call: logged (the job's log), counted by the caller, scored zero.
    std::fprintf(stderr, "trainer-job: warning: reward term %s: %s: %s\n", t.label.c_str(),
                 failure_cause_name(v.failure), v.detail.c_str());
    if (t.max_consecutive > 0 && ++t.consecutive >= t.max_consecutive) {
      return Status(StatusCode::kFailedPrecondition,
                    "reward term " + t.at + " (" + t.label + ") produced no score in " + std::to_string(t.consecutive) +
                        " calls in a row (maxConsecutiveFailures " + std::to_string(t.max_consecutive) +
                        "); the last: " + failure_cause_name(v.failure) + ": " + v.detail + "; the job stops");
    }
  }
  return out;
}

}  // namespace trainer::engine::rl

// The reward terms of one RL job, scored: one Grader per declared term, made once when the job
// starts, and the guard that stops the job when a term fails maxConsecutiveFailures calls in a
// row. Torch-free.
//
// Thread safety: none; the training loop calls it from one thread.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "engine/rl/graders/grader.h"

namespace trainer::engine::rl {

// One term's outcome over a batch of completions.
struct TermScores {
  std::vector<double> raw;             // per completion, unweighted, in [0, 1] (0 when failed)
  std::vector<FailureCause> failures;  // per completion: kNone, or why it produced no score
  std::vector<double> call_seconds;    // per completion: its call's duration, failed attempts included
  int64_t input_tokens = 0, output_tokens = 0;  // judge tokens of the batch's calls
};

class Scorer {
 public:
  // Makes every term's grader (a rule's worker starts and loads its module here). Errors name
  // the term ("config.reward.terms[1].kind: ...").
  static Result<std::unique_ptr<Scorer>> create(const std::vector<plan::RewardTermSpec>& terms, const GraderContext& ctx);

  size_t size() const { return terms_.size(); }
  const std::string& label(size_t term) const { return terms_[term].label; }
  double weight(size_t term) const { return terms_[term].weight; }

  // Scores every item with term `term`. An error stops the job: a refusal, or the term's
  // maxConsecutiveFailures calls in a row without a score (the message names the term, the
  // count and the last failure).
  Result<TermScores> score(size_t term, const std::vector<GradeItem>& items);

 private:
  struct Term {
    std::string at;      // "config.reward.terms[i]"
    std::string label;   // plan::term_label
    std::string kind;
    double weight = 1;
    int max_consecutive = 0;  // 0: never stops the job (json-label-match)
    int consecutive = 0;      // unscored calls in a row so far, across steps
    std::unique_ptr<Grader> grader;
  };
  std::vector<Term> terms_;
};

}  // namespace trainer::engine::rl

// Graders: what scores one reward term's completions (docs/graders.md). One Grader per declared
// term lives for the whole job, so a rule's worker process or a judge's connection is set up
// once. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/outbound.h"
#include "common/status.h"
#include "plan/plan.h"

namespace trainer::engine::rl {

// Why a call produced no score: the registry's rl.grader.failure.cause values.
enum class FailureCause {
  kNone,          // the call produced a score
  kTimeout,       // "timeout": no answer within the term's timeoutSeconds
  kUnreachable,   // "unreachable": not reached, or its reply is not of the protocol's shape
  kNoVerdict,     // "no_verdict": it replied, without a score in the expected form
  kGoldNotLabel,  // "gold_not_label": the row's gold answer is not a JSON label (json-label-match)
};
const char* failure_cause_name(FailureCause c);  // "timeout", ...; "" for kNone

// One completion to score.
struct GradeItem {
  std::string input;     // the prompt: its last user message
  std::string output;    // the completion
  std::string expected;  // the row's gold answer (never shown to a judge)
  int64_t row = 0;       // the row's 1-based line in the dataset file
};

// The outcome of one call.
struct Verdict {
  double score = 0;                         // in [0, 1]; 0 when the call failed
  FailureCause failure = FailureCause::kNone;
  std::string detail;                       // why it failed, for the job's log and error messages
  double seconds = 0;                       // the call's wall time, failed attempts included
  int64_t input_tokens = 0, output_tokens = 0;  // judges: from the reply's usage block
};

class Grader {
 public:
  virtual ~Grader() = default;
  // Scores every item (one Verdict each, in order). An error Status stops the job: a refused
  // judge or evaluator (HTTP 400-class), or a rule module that cannot be loaded.
  virtual Result<std::vector<Verdict>> grade(const std::vector<GradeItem>& items) = 0;
};

// What graders need from the job's environment.
struct GraderContext {
  std::string python = "python3";  // the interpreter of rule/bundle workers (TRAINER_REWARD_PYTHON)
  std::string data_source;         // passed as compute_score's data_source: the dataset's file name
  // Where http: terms may connect (TRAINER_OUTBOUND_ALLOW, protocol/job_request.h), and the proxy
  // they go through (TRAINER_OUTBOUND_PROXY); unset: no check (a job started by hand).
  std::optional<OutboundPolicy> outbound;
};

// The context from the job's environment (TRAINER_REWARD_PYTHON, TRAINER_OUTBOUND_ALLOW and _PROXY), for the
// dataset file `data_path`; a malformed TRAINER_OUTBOUND_ALLOW is invalid_argument naming it.
Result<GraderContext> grader_context_from_environment(const std::string& data_path);

// The grader of `term` (its kind decides); errors name `at` ("config.reward.terms[0]").
Result<std::unique_ptr<Grader>> make_grader(const plan::RewardTermSpec& term, const std::string& at,
                                            const GraderContext& ctx);

// Each kind's grader (graders/*.cpp).
std::unique_ptr<Grader> make_label_match_grader();
Result<std::unique_ptr<Grader>> make_rule_grader(const plan::RewardTermSpec& term, const std::string& at,
                                                 const GraderContext& ctx);
std::unique_ptr<Grader> make_http_grader(const plan::RewardTermSpec& term, const std::string& at,
                                         const GraderContext& ctx);
Result<std::unique_ptr<Grader>> make_judge_grader(const plan::RewardTermSpec& term, const std::string& at);

}  // namespace trainer::engine::rl

// What http: evaluators and model: judges share (graders/http_grader.cpp, judge_grader.cpp):
// a POST with a deadline whose transport failures are told apart, and a grader that runs its
// calls `concurrency` at a time, retries a call that produced no score, and stops everything on
// a refusal. Internal to graders/.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/rl/graders/grader.h"

namespace trainer::engine::rl {

// The answer to one POST.
struct HttpAnswer {
  int status = 0;       // the HTTP status; 0 when none came
  std::string body;
  FailureCause transport = FailureCause::kNone;  // kTimeout or kUnreachable when no answer came
  std::string detail;   // the transport error in words
  bool not_allowed = false;  // refused by the outbound policy as it connected (detail says why)
};

// POSTs `body` (application/json) to `url` (http:// or https://) within `timeout_seconds`,
// trusting `ca_file` ("" = the system's CA store) for https. A TLS failure is kUnreachable, its
// detail naming the URL. With `outbound`, the call is checked (not_allowed) and goes through its
// proxy; without, through `proxy` ("" = directly).
HttpAnswer post_json(const std::string& url, const std::string& body, double timeout_seconds,
                     const std::vector<std::pair<std::string, std::string>>& headers, const std::string& ca_file,
                     const OutboundPolicy* outbound = nullptr, const std::string& proxy = "");

// One attempt at one item.
struct Attempt {
  Verdict verdict;                      // its outcome (seconds are filled by the caller)
  std::optional<std::string> refusal;   // set: the grader refused the call; the job stops
};

// A refusal is an answer the grader will give again: HTTP 400-class but 408 and 429.
bool is_refusal(int status);

// How a reason names a remote grader's answer: "WHO answered HTTP STATUS (a reply of N bytes, not
// shown)". The reply's own bytes never go into a reason, a detail or a log line: a listener a plan
// points at must not get its words into what the run shows (issue 32).
std::string remote_answer(const std::string& who, int status, size_t reply_bytes);

class RemoteGrader : public Grader {
 public:
  RemoteGrader(const plan::RewardTermSpec& term, std::string at)
      : at_(std::move(at)), kind_(term.kind), retries_(term.retries), concurrency_(term.concurrency) {}
  Result<std::vector<Verdict>> grade(const std::vector<GradeItem>& items) final;

 protected:
  // One call for `item`. Thread-safe: calls run `concurrency` at a time.
  virtual Attempt call(const GradeItem& item) const = 0;

 private:
  const std::string at_, kind_;
  const int retries_, concurrency_;
};

}  // namespace trainer::engine::rl

// http: terms (declared in graders/grader.h): an evaluator the user runs. Each completion is
// POSTed as {input, output, expected}; the reply's `score` in [0, 1], or its boolean `ok` or
// `passed`, is the verdict (graders/verdict.h).
#include "common/json_parse.h"
#include "engine/rl/graders/remote_grader.h"
#include "engine/rl/graders/verdict.h"

namespace trainer::engine::rl {
namespace {

using json = nlohmann::json;

class HttpGrader final : public RemoteGrader {
 public:
  HttpGrader(const plan::RewardTermSpec& term, std::string at, std::optional<OutboundPolicy> outbound)
      : RemoteGrader(term, std::move(at)), url_(plan::term_target(term.kind)),
        ca_file_(term.caFile.value_or("")),
        timeout_(term.timeoutSeconds),
        outbound_(std::move(outbound)) {}

 protected:
  Attempt call(const GradeItem& item) const override {
    Attempt a;
    const json envelope = {{"input", item.input}, {"output", item.output}, {"expected", item.expected}};
    HttpAnswer r = post_json(url_, envelope.dump(-1, ' ', false, json::error_handler_t::replace), timeout_, {},
                              ca_file_, outbound_ ? &*outbound_ : nullptr);
    Verdict& v = a.verdict;
    if (r.not_allowed) {  // it would be refused again: the job stops, naming why
      a.refusal = r.detail;
      return a;
    }
    if (r.transport != FailureCause::kNone) {
      v.failure = r.transport;
      v.detail = r.detail;
      return a;
    }
    if (is_refusal(r.status)) {
      a.refusal = remote_answer("the evaluator", r.status, r.body.size());
      return a;
    }
    auto reply = parse_json(r.body, "the evaluator's reply");
    if (r.status < 200 || r.status >= 300 || !reply.is_ok() || !reply->is_object()) {
      v.failure = FailureCause::kUnreachable;
      v.detail = remote_answer("the evaluator", r.status, r.body.size()) +
                 (r.status >= 200 && r.status < 300 ? ", not a JSON object" : "");
      return a;
    }
    if (auto score = evaluator_score(*reply)) {
      v.score = *score;
      return a;
    }
    v.failure = FailureCause::kNoVerdict;
    v.detail = "the evaluator's reply (" + std::to_string(r.body.size()) +
               " bytes, not shown) has no score in [0, 1] and no boolean ok or passed";
    return a;
  }

 private:
  const std::string url_, ca_file_;
  const double timeout_;
  const std::optional<OutboundPolicy> outbound_;
};

}  // namespace

std::unique_ptr<Grader> make_http_grader(const plan::RewardTermSpec& term, const std::string& at,
                                         const GraderContext& ctx) {
  return std::make_unique<HttpGrader>(term, at, ctx.outbound);
}

}  // namespace trainer::engine::rl

// The built-in json-label-match grader, and the choice of grader by term kind (declared in
// graders/grader.h).
#include "engine/rl/graders/grader.h"

#include "engine/rl/rewards.h"

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace trainer::engine::rl {
namespace {

class LabelMatchGrader final : public Grader {
 public:
  Result<std::vector<Verdict>> grade(const std::vector<GradeItem>& items) override {
    std::vector<Verdict> out(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      if (!extract_json(items[i].expected)) {
        out[i].failure = FailureCause::kGoldNotLabel;
        out[i].detail = "row " + std::to_string(items[i].row) + ": the gold answer holds no JSON label";
        continue;
      }
      out[i].score = json_label_match(items[i].output, items[i].expected);
    }
    return out;
  }
};

}  // namespace

const char* failure_cause_name(FailureCause c) {
  switch (c) {
    case FailureCause::kNone:
      return "";
    case FailureCause::kTimeout:
      return "timeout";
    case FailureCause::kUnreachable:
      return "unreachable";
    case FailureCause::kNoVerdict:
      return "no_verdict";
    case FailureCause::kGoldNotLabel:
      return "gold_not_label";
  }
  return "";
}

std::unique_ptr<Grader> make_label_match_grader() { return std::make_unique<LabelMatchGrader>(); }

Result<std::unique_ptr<Grader>> make_grader(const plan::RewardTermSpec& term, const std::string& at,
                                            const GraderContext& ctx) {
  const std::optional<plan::TermKind> kind = plan::term_kind(term.kind);
  if (!kind) return Status(StatusCode::kInvalidArgument, at + ".kind: \"" + term.kind + "\" is not a reward term kind");
  switch (*kind) {
    case plan::TermKind::kLabelMatch:
      return make_label_match_grader();
    case plan::TermKind::kRule:
    case plan::TermKind::kBundle:
      return make_rule_grader(term, at, ctx);
    case plan::TermKind::kHttp:
      return make_http_grader(term, at, ctx);
    case plan::TermKind::kModel:
      return make_judge_grader(term, at);
  }
  return Status(StatusCode::kInvalidArgument, at + ".kind: \"" + term.kind + "\" is not a reward term kind");
}

Result<GraderContext> grader_context_from_environment(const std::string& data_path) {
  GraderContext ctx;
  if (const char* py = std::getenv("TRAINER_REWARD_PYTHON"); py != nullptr && *py != '\0') ctx.python = py;
  ctx.data_source = std::filesystem::path(data_path).filename().string();
  if (const char* allow = std::getenv("TRAINER_OUTBOUND_ALLOW"); allow != nullptr && *allow != '\0') {
    const nlohmann::json rules = nlohmann::json::parse(allow, nullptr, false);
    auto policy = parse_outbound_policy(rules, "TRAINER_OUTBOUND_ALLOW");
    if (!policy.is_ok()) return invalid_argument("TRAINER_OUTBOUND_ALLOW: " + policy.status().message());
    ctx.outbound = std::move(*policy);
    if (const char* proxy = std::getenv("TRAINER_OUTBOUND_PROXY"); proxy != nullptr && *proxy != '\0') {
      auto parsed = parse_outbound_proxy(nlohmann::json(proxy), "TRAINER_OUTBOUND_PROXY");
      if (!parsed.is_ok()) return invalid_argument("TRAINER_OUTBOUND_PROXY: " + parsed.status().message());
      ctx.outbound->proxy = std::move(*parsed);
    }
  }
  return ctx;
}

}  // namespace trainer::engine::rl

// Reward terms of RL plans (config.reward.terms[]): every kind, the fields each kind takes and
// their defaults, labels, and refusals by field.
#include <gtest/gtest.h>

#include "plan/plan.h"

namespace trainer::plan {
namespace {

Result<Plan> parse_terms(const std::string& terms) {
  return parse_plan(R"({"kind": "run", "workload": "w", "baseModel": "m", "config": {"dataset": "d", "method": "grpo",
      "reward": {"terms": )" + terms + "}}}",
                    "plan.json");
}

TEST(RewardTerms, EveryKindParsesWithItsDefaults) {
  auto p = parse_terms(R"([{"kind": "json-label-match"}, {"kind": "rule:/opt/score.py", "weight": 0.5},
      {"kind": "bundle:/opt/pkg#scoring.exact"}, {"kind": "http:http://127.0.0.1:9/score", "retries": 0},
      {"kind": "model:judge-4b", "graderInstructions": "Be strict.", "timeoutSeconds": 2.5,
       "judge": {"url": "http://127.0.0.1:8000", "apiKeyEnv": "JUDGE_KEY"}}])");
  ASSERT_TRUE(p.is_ok()) << p.status().describe();
  const auto& t = p->config.rewardTerms;
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(term_kind(t[1].kind), TermKind::kRule);
  EXPECT_EQ(term_target(t[1].kind), "/opt/score.py");
  EXPECT_EQ(term_label(t[1]), "rule:score.py");
  EXPECT_EQ(term_label(t[2]), "bundle:scoring.exact");
  EXPECT_EQ(term_target(t[3].kind), "http://127.0.0.1:9/score");
  EXPECT_EQ(t[3].retries, 0);
  EXPECT_EQ(t[4].retries, 1);
  EXPECT_EQ(t[4].maxConsecutiveFailures, 20);
  EXPECT_DOUBLE_EQ(t[4].timeoutSeconds, 2.5);
  EXPECT_EQ(term_label(t[4]), "model:judge-4b");
  ASSERT_TRUE(t[4].judge.has_value());
  EXPECT_EQ(t[4].judge->apiKeyEnv, "JUDGE_KEY");
  // The resolved plan shows each kind's defaults, and not the deployment's judge endpoint.
  const auto terms = to_json(*p)["config"]["reward"]["terms"];
  EXPECT_FALSE(terms[0].contains("timeoutSeconds"));
  EXPECT_EQ(terms[1]["name"], "rule:score.py");
  EXPECT_EQ(terms[1]["timeoutSeconds"], 30.0);
  EXPECT_FALSE(terms[1].contains("retries"));
  EXPECT_EQ(terms[3]["concurrency"], 4);
  EXPECT_EQ(terms[4]["graderInstructions"], "Be strict.");
  EXPECT_FALSE(terms[4].contains("judge"));
  // The URL alone is an http: term too.
  auto bare = parse_terms(R"([{"kind": "http://127.0.0.1:9/score"}])");
  ASSERT_TRUE(bare.is_ok()) << bare.status().describe();
  EXPECT_EQ(term_kind(bare->config.rewardTerms[0].kind), TermKind::kHttp);
}

TEST(RewardTerms, BadKindsAreRefusedByField) {
  struct Case {
    const char* terms;
    const char* field;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {R"([{"kind": "exact"}])", "config.reward.terms[0].kind", "is not a reward term kind"},
           {R"([{"kind": "rule:"}])", "config.reward.terms[0].kind", "names nothing after the colon"},
           {R"([{"kind": "http:ftp://x/y"}])", "config.reward.terms[0].kind", "does not name an http:// URL"},
           {R"([{"kind": "bundle:/x#"}])", "config.reward.terms[0].kind", "bundle:FOLDER#MODULE"},
           {R"([{"weight": 1}])", "config.reward.terms[0].kind", "required field is missing"},
       }) {
    auto p = parse_terms(c.terms);
    ASSERT_FALSE(p.is_ok()) << c.terms;
    EXPECT_EQ(p.status().field(), c.field) << c.terms;
    EXPECT_NE(p.status().message().find(c.says), std::string::npos) << p.status().message();
  }
}

TEST(RewardTerms, FieldsOfOtherKindsAndOutOfRangeValuesAreRefusedByName) {
  struct Case {
    const char* terms;
    const char* field;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {R"([{"kind": "json-label-match", "timeoutSeconds": 5}])", "config.reward.terms[0].timeoutSeconds",
            "applies to rule, bundle, http and model terms"},
           {R"([{"kind": "rule:/s.py", "retries": 2}])", "config.reward.terms[0].retries", "applies to http and model"},
           {R"([{"kind": "http:http://h/p", "graderInstructions": "x"}])", "config.reward.terms[0].graderInstructions",
            "applies to model"},
           {R"([{"kind": "rule:/s.py", "judge": {"url": "http://h"}}])", "config.reward.terms[0].judge", "applies to model"},
           {R"([{"kind": "rule:/s.py"}, {"kind": "model:j", "timeoutSeconds": 0}])", "config.reward.terms[1].timeoutSeconds",
            "must be in (0, 3600]"},
           {R"([{"kind": "model:j", "retries": 11}])", "config.reward.terms[0].retries", "between 0 and 10"},
           {R"([{"kind": "model:j", "maxConsecutiveFailures": 0}])", "config.reward.terms[0].maxConsecutiveFailures",
            "between 1 and 1000000"},
           {R"([{"kind": "model:j", "judge": {"url": "http://h", "key": "x"}}])", "config.reward.terms[0].judge.key",
            "unknown field"},
           {R"([{"kind": "model:j", "graderInstructions": ""}])", "config.reward.terms[0].graderInstructions",
            "must not be empty"},
           {R"([{"kind": "rule:/a/s.py"}, {"kind": "rule:/b/s.py"}])", "config.reward.terms[1].name",
            "two terms are named \"rule:s.py\""},
       }) {
    auto p = parse_terms(c.terms);
    ASSERT_FALSE(p.is_ok()) << c.terms;
    EXPECT_EQ(p.status().field(), c.field) << c.terms << ": " << p.status().describe();
    EXPECT_NE(p.status().message().find(c.says), std::string::npos) << p.status().message();
  }
}

}  // namespace
}  // namespace trainer::plan

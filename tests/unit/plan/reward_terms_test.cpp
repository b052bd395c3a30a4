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
  EXPECT_EQ(t[4].maxTokens, 512);
  EXPECT_EQ(terms[4]["maxTokens"], 512);
  EXPECT_FALSE(terms[3].contains("maxTokens"));
  EXPECT_FALSE(terms[4].contains("judge"));
  // The URL alone is an http: term too.
  auto bare = parse_terms(R"([{"kind": "http://127.0.0.1:9/score"}])");
  ASSERT_TRUE(bare.is_ok()) << bare.status().describe();
  EXPECT_EQ(term_kind(bare->config.rewardTerms[0].kind), TermKind::kHttp);
  // https too, with the CAs it trusts (shown in the resolved plan only when given).
  auto tls = parse_terms(R"([{"kind": "https://127.0.0.1:9/score"}, {"kind": "http:https://h/s", "caFile": "/etc/ca.pem"}])");
  ASSERT_TRUE(tls.is_ok()) << tls.status().describe();
  EXPECT_EQ(term_target(tls->config.rewardTerms[0].kind), "https://127.0.0.1:9/score");
  EXPECT_EQ(term_target(tls->config.rewardTerms[1].kind), "https://h/s");
  EXPECT_EQ(tls->config.rewardTerms[1].caFile, "/etc/ca.pem");
  const auto tls_terms = to_json(*tls)["config"]["reward"]["terms"];
  EXPECT_FALSE(tls_terms[0].contains("caFile"));
  EXPECT_EQ(tls_terms[1]["caFile"], "/etc/ca.pem");
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
           {R"([{"kind": "http:ftp://x/y"}])", "config.reward.terms[0].kind", "does not name an http:// or https:// URL"},
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
           {R"([{"kind": "model:j", "caFile": "/ca.pem"}])", "config.reward.terms[0].caFile",
            "applies to http (a judge's CA file is declared with the judge) terms"},
           {R"([{"kind": "http:https://h/p", "caFile": ""}])", "config.reward.terms[0].caFile", "must not be empty"},
           {R"([{"kind": "model:j", "judge": {"url": "https://h", "caFile": 3}}])", "config.reward.terms[0].judge.caFile",
            "must be a string"},
           {R"([{"kind": "model:j", "graderInstructions": ""}])", "config.reward.terms[0].graderInstructions",
            "must not be empty"},
           {R"([{"kind": "http:http://h/p", "maxTokens": 64}])", "config.reward.terms[0].maxTokens", "applies to model"},
           {R"([{"kind": "model:j", "maxTokens": 0}])", "config.reward.terms[0].maxTokens", "between 1 and 32768"},
           {R"([{"kind": "rule:/a/s.py"}, {"kind": "rule:/b/s.py"}])", "config.reward.terms[1].name",
            "two terms are named \"rule:s.py\""},
           {R"([{"kind": "http:http://h/p", "network": {"allow": ["h:80"]}}])", "config.reward.terms[0].network",
            "applies to rule and bundle"},
           {R"([{"kind": "rule:/s.py", "network": {"allow": []}}])", "config.reward.terms[0].network.allow",
            "must be a non-empty list"},
           {R"([{"kind": "rule:/s.py", "network": {"allow": ["h"]}}])", "config.reward.terms[0].network.allow[0]",
            "must be \"HOST:PORT\""},
           {R"([{"kind": "rule:/s.py", "network": {"allow": ["h:1"], "deny": []}}])",
            "config.reward.terms[0].network.deny", "unknown field"},
           {R"([{"kind": "rule:/s.py", "network": true}])", "config.reward.terms[0].network", "must be an object"},
       }) {
    auto p = parse_terms(c.terms);
    ASSERT_FALSE(p.is_ok()) << c.terms;
    EXPECT_EQ(p.status().field(), c.field) << c.terms << ": " << p.status().describe();
    EXPECT_NE(p.status().message().find(c.says), std::string::npos) << p.status().message();
  }
}

TEST(RewardTerms, ADeclaredNetworkIsResolvedAndHashed) {
  auto without = parse_terms(R"([{"kind": "rule:/s.py"}])");
  auto with = parse_terms(R"([{"kind": "rule:/s.py", "network": {"allow": ["api.example.com:443"]}}])");
  ASSERT_TRUE(without.is_ok() && with.is_ok());
  EXPECT_EQ(with->config.rewardTerms[0].networkAllow, std::vector<std::string>{"api.example.com:443"});
  const nlohmann::json resolved = to_json(*with);
  EXPECT_EQ(resolved["config"]["reward"]["terms"][0]["network"], nlohmann::json({{"allow", {"api.example.com:443"}}}));
  EXPECT_FALSE(to_json(*without)["config"]["reward"]["terms"][0].contains("network"));  // absent: hashed as before
  EXPECT_NE(settings_sha(with->config, "h"), settings_sha(without->config, "h"));
  // The resolved plan reads back the same (the job parses it).
  auto again = parse_plan(resolved.dump(), "resolved.json");
  ASSERT_TRUE(again.is_ok()) << again.status().describe();
  EXPECT_EQ(again->config.rewardTerms[0].networkAllow, with->config.rewardTerms[0].networkAllow);
}

}  // namespace
}  // namespace trainer::plan

namespace trainer::plan {
namespace {

Result<Plan> parse_top(const std::string& top, const std::string& terms) {
  return parse_plan(R"({"kind": "run", "workload": "w", "baseModel": "m", )" + top +
                        R"( "config": {"dataset": "d", "method": "grpo", "reward": {"terms": )" + terms + "}}}",
                    "plan.json");
}

TEST(GraderInstructions, ThePlansGoToItsJudgesWithoutTheirOwn) {
  auto p = parse_top(R"("graderInstructions": "Score the label.",)",
                     R"([{"kind": "model:a"}, {"kind": "model:b", "graderInstructions": "Mine."}, {"kind": "json-label-match"}])");
  ASSERT_TRUE(p.is_ok()) << p.status().describe();
  const auto& t = p->config.rewardTerms;
  EXPECT_EQ(t[0].planGraderInstructions, "Score the label.");
  EXPECT_FALSE(t[0].graderInstructions.has_value());
  EXPECT_STREQ(grader_instructions_source(t[0]), "plan");
  EXPECT_STREQ(grader_instructions_source(t[1]), "term");  // a term's own field wins
  EXPECT_EQ(t[1].graderInstructions, "Mine.");
  EXPECT_FALSE(t[2].planGraderInstructions.has_value());
  // The resolved plan keeps it at the top, and parsed again (the job's plan) gives the same.
  const nlohmann::json resolved = to_json(*p);
  EXPECT_EQ(resolved["graderInstructions"], "Score the label.");
  EXPECT_TRUE(resolved["config"]["reward"]["terms"][0]["graderInstructions"].is_null());
  auto again = plan_from_json(resolved, "resolved");
  ASSERT_TRUE(again.is_ok()) << again.status().describe();
  EXPECT_EQ(again->config.rewardTerms[0].planGraderInstructions, "Score the label.");
  // Without it: built-in.
  auto bare = parse_top("", R"([{"kind": "model:a"}])");
  ASSERT_TRUE(bare.is_ok());
  EXPECT_STREQ(grader_instructions_source(bare->config.rewardTerms[0]), "built-in");
  EXPECT_TRUE(to_json(*bare)["graderInstructions"].is_null());
  // The settings hash (and runs hparams) count the instructions a judge gets, wherever written.
  auto own = parse_top("", R"([{"kind": "model:a", "graderInstructions": "Score the label."},
      {"kind": "model:b", "graderInstructions": "Mine."}, {"kind": "json-label-match"}])");
  ASSERT_TRUE(own.is_ok()) << own.status().describe();
  EXPECT_EQ(settings_sha(p->config, "d"), settings_sha(own->config, "d"));
  EXPECT_NE(settings_sha(p->config, "d"), settings_sha(bare->config, "d"));
  EXPECT_EQ(flatten_config(p->config, "d")["config.reward.terms"][0]["graderInstructions"], "Score the label.");
  // A model: grader alone (the run's evaluations) takes it too.
  EXPECT_TRUE(parse_top(R"("grader": "model:a", "graderInstructions": "x",)", R"([{"kind": "json-label-match"}])").is_ok());
}

TEST(GraderInstructions, APlanWithoutAJudgeRefusesThemByName) {
  struct Case {
    const char* top;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {R"("graderInstructions": "x",)",
            "applies to model: graders (judges) only; this plan has no model: reward term and names no grader"},
           {R"("grader": "json-label-match", "graderInstructions": "x",)",
            "applies to model: graders (judges) only; this plan has no model: reward term and its grader is json-label-match"},
           {R"("grader": "model:a", "graderInstructions": "",)", "must not be empty"},
           {R"("grader": "model:a", "graderInstructions": 3,)", "must be a string"},
       }) {
    auto p = parse_top(c.top, R"([{"kind": "json-label-match"}, {"kind": "http:http://h/p"}])");
    ASSERT_FALSE(p.is_ok()) << c.top;
    EXPECT_EQ(p.status().field(), "graderInstructions") << c.top;
    EXPECT_NE(p.status().message().find(c.says), std::string::npos) << p.status().message();
  }
}

}  // namespace
}  // namespace trainer::plan

namespace trainer::plan {
namespace {

TEST(ScoringFunction, DefaultsToComputeScoreAndIsNamedAfterTheModuleOrFile) {
  struct Case {
    const char* kind;
    const char* path;
    const char* module;
    const char* function;
    const char* label;
  };
  for (const Case& c : std::vector<Case>{
           {"rule:/opt/score.py", "/opt/score.py", "", "compute_score", "rule:score.py"},
           {"rule:/opt/score.py:exact", "/opt/score.py", "", "exact", "rule:score.py:exact"},
           {"bundle:/opt/score.py:fuzzy_match", "/opt/score.py", "", "fuzzy_match", "bundle:score.py:fuzzy_match"},
           {"bundle:/opt/pkg#scoring.exact", "/opt/pkg", "scoring.exact", "compute_score", "bundle:scoring.exact"},
           {"bundle:/opt/pkg#scoring.exact:strict", "/opt/pkg", "scoring.exact", "strict", "bundle:scoring.exact:strict"},
           {"bundle:/opt/a:b/pkg#m", "/opt/a:b/pkg", "m", "compute_score", "bundle:m"},  // a colon in the folder
       }) {
    auto p = parse_terms(std::string(R"([{"kind": ")") + c.kind + R"("}])");
    ASSERT_TRUE(p.is_ok()) << c.kind << ": " << p.status().describe();
    const auto f = scoring_function(c.kind);
    ASSERT_TRUE(f.has_value()) << c.kind;
    EXPECT_EQ(f->path, c.path) << c.kind;
    EXPECT_EQ(f->module, c.module) << c.kind;
    EXPECT_EQ(f->function, c.function) << c.kind;
    EXPECT_EQ(term_label(p->config.rewardTerms[0]), c.label) << c.kind;
  }
  EXPECT_FALSE(scoring_function("model:j").has_value());
}

TEST(ScoringFunction, ANameThatIsNotAPythonFunctionIsRefused) {
  for (const char* kind : {"bundle:/opt/pkg#m:", "bundle:/opt/pkg#m:2fast", "bundle:/opt/pkg#m:a-b", "rule:/opt/s.py:"}) {
    auto p = parse_terms(std::string(R"([{"kind": ")") + kind + R"("}])");
    ASSERT_FALSE(p.is_ok()) << kind;
    EXPECT_EQ(p.status().field(), "config.reward.terms[0].kind") << kind;
    EXPECT_NE(p.status().message().find("is not a Python function name"), std::string::npos) << p.status().message();
  }
  auto p = parse_terms(R"([{"kind": "bundle:/opt/pkg#:f"}])");
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("bundle:FOLDER#MODULE[:FUNCTION]"), std::string::npos) << p.status().message();
}

}  // namespace
}  // namespace trainer::plan

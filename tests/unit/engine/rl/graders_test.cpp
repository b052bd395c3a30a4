// Graders of reward terms (src/engine/rl/graders/): a rule's real Python worker scoring, failing
// by cause, restarted after a hang or an exit; the consecutive-failure stop; json-label-match's
// gold_not_label. The Python is TRAINER_REWARD_PYTHON, else python3.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/rl/graders/grader.h"
#include "engine/rl/graders/scorer.h"

namespace trainer::engine::rl {
namespace {

GraderContext context() {
  GraderContext ctx;
  if (const char* py = std::getenv("TRAINER_REWARD_PYTHON")) ctx.python = py;
  ctx.data_source = "rows.jsonl";
  return ctx;
}

// Writes a rule module into the test's temporary folder; returns its path.
std::string write_module(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// A module whose verdict is written in the completion: "raise", "hang", "exit", "garbage",
// "big", "dict 0.25", or a number.
const char* kModule = R"(import os, time
def compute_score(data_source, solution_str, ground_truth, extra_info):
    print("user output must not break the protocol")
    assert data_source == "rows.jsonl" and extra_info["prompt"] == "q"
    if solution_str == "raise":
        raise ValueError("bad completion")
    if solution_str == "hang":
        time.sleep(60)
    if solution_str == "exit":
        os._exit(3)
    if solution_str == "garbage":
        return "high"
    if solution_str == "big":
        return 7.5
    if solution_str.startswith("dict "):
        return {"score": float(solution_str[5:]), "extra": 1}
    return float(solution_str) if solution_str != ground_truth else 1.0
)";

std::vector<GradeItem> items(const std::vector<std::string>& outputs) {
  std::vector<GradeItem> out;
  for (size_t i = 0; i < outputs.size(); ++i) out.push_back({.input = "q", .output = outputs[i], .expected = "gold", .row = 1});
  return out;
}

plan::RewardTermSpec rule(const std::string& path, double timeout = 2) {
  plan::RewardTermSpec t;
  t.kind = "rule:" + path;
  t.timeoutSeconds = timeout;
  return t;
}

TEST(RuleGrader, ScoresWithTheUsersComputeScoreAndCountsEachFailureByCause) {
  const std::string path = write_module("score_rule.py", kModule);
  auto g = make_grader(rule(path, 1.0), "config.reward.terms[0]", context());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto v = (*g)->grade(items({"0.5", "gold", "raise", "garbage", "big", "dict 0.25", "hang", "0.125", "exit", "1"}));
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  ASSERT_EQ(v->size(), 10u);
  const std::vector<double> scores = {0.5, 1.0, 0, 0, 0, 0.25, 0, 0.125, 0, 1.0};
  const std::vector<FailureCause> causes = {
      FailureCause::kNone,      FailureCause::kNone, FailureCause::kNoVerdict, FailureCause::kNoVerdict,
      FailureCause::kNoVerdict, FailureCause::kNone, FailureCause::kTimeout,   FailureCause::kNone,
      FailureCause::kUnreachable, FailureCause::kNone};
  for (size_t i = 0; i < scores.size(); ++i) {
    EXPECT_DOUBLE_EQ((*v)[i].score, scores[i]) << "item " << i;
    EXPECT_EQ((*v)[i].failure, causes[i]) << "item " << i << ": " << (*v)[i].detail;
  }
  EXPECT_NE((*v)[2].detail.find("ValueError: bad completion"), std::string::npos) << (*v)[2].detail;
  EXPECT_NE((*v)[4].detail.find("outside [0, 1]"), std::string::npos) << (*v)[4].detail;
  // The hang cost its timeout (1 s, give or take the clocks' rounding), no more: the items after it
  // were scored.
  EXPECT_GE((*v)[6].seconds, 0.9);
  // The worker restarted after the hang and the exit goes on serving later batches.
  auto again = (*g)->grade(items({"0.75"}));
  ASSERT_TRUE(again.is_ok());
  EXPECT_DOUBLE_EQ((*again)[0].score, 0.75);
}

TEST(RuleGrader, AModuleThatDoesNotLoadIsRefusedNamingTheTerm) {
  const std::string broken = write_module("broken_rule.py", "import no_such_module_anywhere\n");
  auto g = make_grader(rule(broken), "config.reward.terms[1]", context());
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("config.reward.terms[1].kind: rule:" + broken), std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("No module named 'no_such_module_anywhere'"), std::string::npos)
      << g.status().message();
  const std::string no_fn = write_module("no_fn_rule.py", "def score(a, b, c, d):\n    return 1\n");
  auto h = make_grader(rule(no_fn), "config.reward.terms[0]", context());
  ASSERT_FALSE(h.is_ok());
  EXPECT_NE(h.status().message().find("no function compute_score()"), std::string::npos) << h.status().message();
}

TEST(RuleGrader, ABundleFolderAndModuleLoadLikeAFile) {
  const std::string dir = ::testing::TempDir() + "/bundle_pkg";
  std::filesystem::create_directories(dir + "/scoring");
  std::ofstream(dir + "/scoring/__init__.py") << "";
  std::ofstream(dir + "/scoring/exact.py")
      << "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
         "    return {'score': 1.0 if solution_str == ground_truth else 0.0}\n";
  plan::RewardTermSpec t;
  t.kind = "bundle:" + dir + "#scoring.exact";
  EXPECT_EQ(plan::term_label(t), "bundle:scoring.exact");
  auto g = make_grader(t, "config.reward.terms[0]", context());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto v = (*g)->grade(items({"gold", "other"}));
  ASSERT_TRUE(v.is_ok());
  EXPECT_DOUBLE_EQ((*v)[0].score, 1.0);
  EXPECT_DOUBLE_EQ((*v)[1].score, 0.0);
}

TEST(Scorer, StopsTheJobAfterMaxConsecutiveFailuresNamingTheTerm) {
  const std::string path = write_module("score_rule2.py", kModule);
  plan::RewardTermSpec t = rule(path);
  t.maxConsecutiveFailures = 3;
  auto s = Scorer::create({t}, context());
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ((*s)->label(0), "rule:score_rule2.py");
  // Two failures, a success (the count starts again), two failures: no stop.
  auto ok = (*s)->score(0, items({"raise", "garbage", "0.5", "raise", "garbage"}));
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->failures[0], FailureCause::kNoVerdict);
  EXPECT_EQ(ok->failures[2], FailureCause::kNone);
  EXPECT_EQ(ok->call_seconds.size(), 5u);
  // The run of failures goes on across batches: the third in a row stops.
  auto stop = (*s)->score(0, items({"raise"}));
  ASSERT_FALSE(stop.is_ok());
  EXPECT_EQ(stop.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stop.status().message().find("reward term config.reward.terms[0] (rule:score_rule2.py) produced no score in 3 calls in a row"),
            std::string::npos)
      << stop.status().message();
}

TEST(LabelMatchGrader, AGoldAnswerWithoutAJsonLabelIsCountedNotCompared) {
  auto s = Scorer::create({plan::RewardTermSpec{.kind = "json-label-match"}}, context());
  ASSERT_TRUE(s.is_ok());
  std::vector<GradeItem> batch = {{.input = "q", .output = R"({"label": "a"})", .expected = R"({"label": "a"})"},
                                  {.input = "q", .output = "yes", .expected = "yes"}};
  auto r = (*s)->score(0, batch);
  ASSERT_TRUE(r.is_ok());
  EXPECT_DOUBLE_EQ(r->raw[0], 1.0);
  EXPECT_DOUBLE_EQ(r->raw[1], 0.0);
  EXPECT_EQ(r->failures[1], FailureCause::kGoldNotLabel);
  EXPECT_STREQ(failure_cause_name(r->failures[1]), "gold_not_label");
}

}  // namespace
}  // namespace trainer::engine::rl

// Answers against expected answers, and the evaluation report (src/engine/eval/answers.h).
#include "engine/eval/answers.h"

#include <gtest/gtest.h>

namespace trainer::engine::eval {
namespace {

using json = nlohmann::json;

TEST(MatchAnswer, ComparesJsonFieldByFieldAndWhole) {
  const std::string gold = R"({"label": "billing", "urgent": true})";
  AnswerMatch m = match_answer(R"(Here: {"urgent": true, "label": "billing"})", gold);
  EXPECT_TRUE(m.exact);
  ASSERT_EQ(m.fields.size(), 2u);
  EXPECT_EQ(m.fields[0], (std::pair<std::string, bool>{"label", true}));
  EXPECT_EQ(m.fields[1], (std::pair<std::string, bool>{"urgent", true}));

  m = match_answer(R"({"label": "billing", "urgent": false, "extra": 1})", gold);
  EXPECT_FALSE(m.exact);
  EXPECT_EQ(m.fields[0].second, true);
  EXPECT_EQ(m.fields[1].second, false);

  m = match_answer("no json here", gold);
  EXPECT_FALSE(m.exact);
  ASSERT_EQ(m.fields.size(), 2u);
  EXPECT_FALSE(m.fields[0].second || m.fields[1].second);
}

TEST(MatchAnswer, TextGoldComparesTrimmedTextAndHasNoFields) {
  EXPECT_TRUE(match_answer("  Paris\n", "Paris").exact);
  EXPECT_FALSE(match_answer("paris", "Paris").exact);
  EXPECT_TRUE(match_answer("Paris", "Paris").fields.empty());
  // A JSON gold that is not an object: equal value, no fields.
  EXPECT_TRUE(match_answer("[1, 2]", "[1,2]").exact);
  EXPECT_TRUE(match_answer("[1, 2]", "[1,2]").fields.empty());
}

RowResult row(std::optional<double> score, const std::string& output, const std::string& expected,
              const std::string& cause = "") {
  RowResult r;
  r.score = score;
  r.output = output;
  r.expected = expected;
  r.unscored_cause = cause;
  r.match = match_answer(output, expected);
  r.output_tokens = 3;
  return r;
}

TEST(Report, MeanExactMatchAndFieldsOverScoredRowsOnly) {
  const std::string gold = R"({"a": 1, "b": 2})";
  std::vector<RowResult> rows = {
      row(1.0, R"({"a": 1, "b": 2})", gold),
      row(0.5, R"({"a": 1, "b": 3})", gold),
      row(0.0, R"({"a": 0, "b": 3})", gold),
      // An evaluator that failed: neither a low score nor a wrong field.
      row(std::nullopt, R"({"a": 0, "b": 0})", gold, "timeout"),
      row(std::nullopt, "", gold, "prompt_too_long"),
      row(std::nullopt, "x", gold, "timeout"),
  };
  rows[1].truncated = true;
  const json r = report_json(rows);
  EXPECT_EQ(r["rows"], 6);
  EXPECT_EQ(r["scoredRows"], 3);
  EXPECT_EQ(r["unscoredRows"], 3);
  EXPECT_DOUBLE_EQ(r["meanScore"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["exactMatchRate"].get<double>(), 1.0 / 3.0);
  EXPECT_EQ(r["unscored"], (json{{"timeout", 2}, {"prompt_too_long", 1}}));
  // Worst first: b (1 of 3) before a (2 of 3).
  ASSERT_EQ(r["perFieldAccuracy"].size(), 2u);
  EXPECT_EQ(r["perFieldAccuracy"][0]["field"], "b");
  EXPECT_DOUBLE_EQ(r["perFieldAccuracy"][0]["accuracy"].get<double>(), 1.0 / 3.0);
  EXPECT_EQ(r["perFieldAccuracy"][0]["rows"], 3);
  EXPECT_EQ(r["perFieldAccuracy"][1]["field"], "a");
  EXPECT_EQ(r["perFieldAccuracy"][1]["correct"], 2);
  EXPECT_EQ(r["generatedTokens"], 18);
  EXPECT_EQ(r["truncatedRows"], 1);
}

TEST(Report, NothingScoredHasNoMeanRatherThanZero) {
  const json r = report_json({row(std::nullopt, "x", "y", "unreachable")});
  EXPECT_TRUE(r["meanScore"].is_null());
  EXPECT_TRUE(r["exactMatchRate"].is_null());
  EXPECT_EQ(r["unscored"]["unreachable"], 1);
}

TEST(RowJson, CarriesScoreOrCauseAndTheFields) {
  RowResult r = row(std::nullopt, R"({"a": 1})", R"({"a": 1})", "no_verdict");
  r.line = 7;
  r.detail = "no score in the reply";
  json j = row_json(r);
  EXPECT_EQ(j["line"], 7);
  EXPECT_TRUE(j["score"].is_null());
  EXPECT_EQ(j["unscoredCause"], "no_verdict");
  EXPECT_EQ(j["detail"], "no score in the reply");
  EXPECT_EQ(j["fields"], (json{{"a", true}}));
  EXPECT_EQ(j["exactMatch"], true);
  j = row_json(row(0.25, "x", "y"));
  EXPECT_EQ(j["score"], 0.25);
  EXPECT_FALSE(j.contains("unscoredCause"));
}

}  // namespace
}  // namespace trainer::engine::eval

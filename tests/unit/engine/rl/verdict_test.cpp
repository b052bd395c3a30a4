// Reading external graders' replies (src/grading/verdict.h, as the engine names it).
#include "engine/rl/graders/verdict.h"

#include <gtest/gtest.h>

namespace trainer::engine::rl {
namespace {

using json = nlohmann::json;

TEST(JudgeVerdict, ReadsTheScoreOfAJsonObjectFencedOrInProse) {
  EXPECT_EQ(judge_verdict(R"({"score": 0.75, "explanation": "mostly right"})"), 0.75);
  EXPECT_EQ(judge_verdict("Here is my verdict:\n```json\n{\"score\": 1}\n```"), 1.0);
  EXPECT_EQ(judge_verdict(R"(I think {"score": "0.5"} is fair.)"), 0.5);
  EXPECT_EQ(judge_verdict(R"({"score": "8/10"})"), 0.8);
  EXPECT_EQ(judge_verdict(R"({"passed": true})"), 1.0);
  EXPECT_EQ(judge_verdict(R"({"ok": false})"), 0.0);
}

TEST(JudgeVerdict, ReadsAScoreWrittenInWordsOrAsAFraction) {
  EXPECT_EQ(judge_verdict("Score: 0.4\nExplanation: half done"), 0.4);
  EXPECT_EQ(judge_verdict("The score is 7 / 10 because ..."), 0.7);
  EXPECT_EQ(judge_verdict("SCORE = 3 out of 4"), 0.75);
  EXPECT_EQ(judge_verdict("  0.9 \n"), 0.9);
  EXPECT_EQ(judge_verdict("1/2"), 0.5);
  EXPECT_EQ(judge_verdict(R"({"score": 0.2, "explanation": "broken JSON)"), 0.2);  // "score": in text that is not JSON
}

TEST(JudgeVerdict, RefusesRepliesWithoutAScoreOrWithOneOutsideTheUnitRange) {
  EXPECT_EQ(judge_verdict("The answer looks good to me."), std::nullopt);
  EXPECT_EQ(judge_verdict(""), std::nullopt);
  EXPECT_EQ(judge_verdict(R"({"score": 7})"), std::nullopt);
  EXPECT_EQ(judge_verdict(R"({"score": -0.1})"), std::nullopt);
  EXPECT_EQ(judge_verdict(R"({"score": "high"})"), std::nullopt);
  EXPECT_EQ(judge_verdict("Score: 12"), std::nullopt);
  EXPECT_EQ(judge_verdict("3 apples"), std::nullopt);  // a number that is not the whole text
}

TEST(EvaluatorScore, TakesAScoreInTheUnitRangeOrABooleanOkOrPassed) {
  EXPECT_EQ(evaluator_score(json{{"score", 0.25}, {"explanation", "x"}}), 0.25);
  EXPECT_EQ(evaluator_score(json{{"ok", true}}), 1.0);
  EXPECT_EQ(evaluator_score(json{{"passed", false}}), 0.0);
  EXPECT_EQ(evaluator_score(json{{"score", 1.5}}), std::nullopt);
  EXPECT_EQ(evaluator_score(json{{"score", "1"}}), std::nullopt);
  EXPECT_EQ(evaluator_score(json{{"ok", "yes"}}), std::nullopt);
  EXPECT_EQ(evaluator_score(json::array({1})), std::nullopt);
  EXPECT_EQ(evaluator_score(json{{"result", 1}}), std::nullopt);
}

TEST(ChatCompletion, ReadsTheFirstChoicesContentAndTheUsageTokens) {
  auto r = read_chat_completion(json::parse(R"({"id": "x", "object": "chat.completion",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"score\": 1}"}, "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 41, "completion_tokens": 7, "total_tokens": 48}})"));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->content, "{\"score\": 1}");
  EXPECT_EQ(r->input_tokens, 41);
  EXPECT_EQ(r->output_tokens, 7);
  auto no_usage = read_chat_completion(json::parse(R"({"choices": [{"message": {"content": "0.5"}}]})"));
  ASSERT_TRUE(no_usage.has_value());
  EXPECT_EQ(no_usage->input_tokens, 0);
  EXPECT_EQ(no_usage->output_tokens, 0);
}

TEST(ChatCompletion, RefusesWhatIsNotOne) {
  EXPECT_FALSE(read_chat_completion(json::parse(R"({"score": 1})")).has_value());
  EXPECT_FALSE(read_chat_completion(json::parse(R"({"choices": []})")).has_value());
  EXPECT_FALSE(read_chat_completion(json::parse(R"({"choices": [{"text": "1"}]})")).has_value());
  EXPECT_FALSE(read_chat_completion(json::parse(R"({"choices": [{"message": {"content": null}}]})")).has_value());
  EXPECT_FALSE(read_chat_completion(json::parse(R"("hello")")).has_value());
}

}  // namespace
}  // namespace trainer::engine::rl

// json-label-match and RL rows (src/engine/rl/rewards.h).
#include "engine/rl/rewards.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace trainer::engine::rl {
namespace {

TEST(JsonLabelMatch, ScoresTheShareOfGoldFieldsMatchedExactly) {
  const std::string gold = R"({"label": "billing", "priority": 2})";
  EXPECT_DOUBLE_EQ(json_label_match(R"({"priority": 2, "label": "billing"})", gold), 1.0);
  EXPECT_DOUBLE_EQ(json_label_match(R"({"label": "billing", "priority": 3})", gold), 0.5);
  EXPECT_DOUBLE_EQ(json_label_match(R"({"label": "Billing", "priority": "2"})", gold), 0.0);
  EXPECT_DOUBLE_EQ(json_label_match("billing, priority 2", gold), 0.0);  // no JSON at all
  EXPECT_DOUBLE_EQ(json_label_match(R"(["billing"])", gold), 0.0);       // JSON, not an object
}

TEST(JsonLabelMatch, ToleratesCodeFencesAndProse) {
  const std::string gold = "```json\n{\"label\": \"billing\"}\n```";
  EXPECT_DOUBLE_EQ(json_label_match("Sure! Here it is:\n```json\n{\"label\": \"billing\"}\n```\nAnything else?", gold), 1.0);
  EXPECT_DOUBLE_EQ(json_label_match("The answer is {\"label\": \"billing\"} as asked.", gold), 1.0);
  EXPECT_DOUBLE_EQ(json_label_match("I think {not json} then {\"label\": \"billing\", \"note\": \"}\"}", gold), 1.0);
}

TEST(JsonLabelMatch, GoldWithoutJsonComparesText) {
  EXPECT_DOUBLE_EQ(json_label_match("  yes \n", "yes"), 1.0);
  EXPECT_DOUBLE_EQ(json_label_match("no", "yes"), 0.0);
}

TEST(RlRows, ReadChatRowsWhoseLastAssistantMessageIsTheGoldAnswer) {
  const std::string path = ::testing::TempDir() + "/rl_rows.jsonl";
  {
    std::ofstream out(path);
    out << R"({"messages": [{"role": "user", "content": "classify: refund"}, {"role": "assistant", "content": "{\"label\": \"billing\"}"}]})"
        << "\n\n"
        << R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"
        << "\n";
  }
  auto rows = read_rl_rows(path);
  ASSERT_TRUE(rows.is_ok()) << rows.status().describe();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].gold, R"({"label": "billing"})");
  EXPECT_EQ((*rows)[0].messages.size(), 1u);
  EXPECT_EQ((*rows)[1].messages.size(), 2u);
  EXPECT_EQ((*rows)[1].line, 3);
  {
    std::ofstream out(path);
    out << R"({"messages": [{"role": "user", "content": "q"}, {"role": "user", "content": "q2"}]})" << "\n";
  }
  auto bad = read_rl_rows(path);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().field(), "config.dataset");
  EXPECT_NE(bad.status().message().find(":1: field 'messages[1]'"), std::string::npos) << bad.status().message();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace trainer::engine::rl

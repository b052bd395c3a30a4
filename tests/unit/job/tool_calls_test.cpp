// Tool calls parsed back out of an answer's text, in Qwen/Hermes and Llama 3 formats.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "job/tool_calls.h"

namespace trainer::job {
namespace {

using json = nlohmann::json;

TEST(ToolCalls, HermesBlocksBecomeCallsAndTheRestIsContent) {
  auto p = parse_tool_calls(
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>");
  ASSERT_TRUE(p);
  ASSERT_EQ(p->calls.size(), 2u);
  EXPECT_EQ(p->calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(p->calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(p->calls[1].name, "get_time");
  EXPECT_EQ(p->calls[1].arguments, "{}");
  EXPECT_EQ(p->content, "Let me look.");
}

TEST(ToolCalls, AnUnclosedBlockWithWholeJsonCountsAndBrokenJsonStaysText) {
  auto cut = parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}");
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->calls[0].name, "f");
  EXPECT_FALSE(parse_tool_calls("<tool_call>{\"name\": \"f\", \"argu"));
  EXPECT_FALSE(parse_tool_calls("<tool_call>not json</tool_call>"));
  EXPECT_FALSE(parse_tool_calls("The weather is fine."));
}

TEST(ToolCalls, Llama3WholeAnswerJsonWithParameters) {
  auto p = parse_tool_calls("<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"lora\"}}");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->calls[0].name, "search");
  EXPECT_EQ(json::parse(p->calls[0].arguments), json({{"q", "lora"}}));
  EXPECT_EQ(p->content, "");
  EXPECT_FALSE(parse_tool_calls("{\"label\": \"positive\"}"));  // JSON, but no call
  auto stringy = parse_tool_calls("{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 2}\"}");
  ASSERT_TRUE(stringy);
  EXPECT_EQ(json::parse(stringy->calls[0].arguments), json({{"a", 2}}));
}

TEST(ToolCalls, StreamingHoldsBackWhatMayBecomeACall) {
  EXPECT_EQ(tool_safe_prefix("Hello there"), 11u);
  EXPECT_EQ(tool_safe_prefix("Hello <tool"), 6u);
  EXPECT_EQ(tool_safe_prefix("Hello <tool_call>{\"na"), 6u);
  EXPECT_EQ(tool_safe_prefix("  {\"name\""), 0u);
  EXPECT_EQ(tool_safe_prefix("<|python"), 0u);
  EXPECT_EQ(tool_safe_prefix("a < b"), 5u);
}

}  // namespace
}  // namespace trainer::job

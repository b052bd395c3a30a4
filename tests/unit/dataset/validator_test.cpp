// The one dataset validator (service and engine): which rows it accepts, and how it names a bad one.
#include <gtest/gtest.h>

#include <string>

#include "dataset/validator.h"

namespace trainer::dataset {
namespace {

using json = nlohmann::json;

TEST(DatasetValidator, AcceptsChatRowsWithAndWithoutToolsAndPromptCompletionRows) {
  const std::string rows =
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})" "\n"
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "weather?"},)"
      R"( {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "get_weather"}}]},)"
      R"( {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "It is sunny."}],)"
      R"( "tools": [{"type": "function", "function": {"name": "get_weather"}}]})" "\n"
      "\n"
      R"({"prompt": "2+2=", "completion": "4"})" "\r\n"
      R"({"prompt": [{"role": "user", "content": "q"}], "completion": [{"role": "assistant", "content": "a"}]})";
  Validation v = validate_jsonl(rows);
  EXPECT_TRUE(v.ok()) << v.status("rows").to_string();
  EXPECT_EQ(v.rows.size(), 4u);
  EXPECT_EQ(*check_row(json::parse(R"({"prompt": "a", "completion": "b"})")), RowKind::kPromptCompletionText);
}

TEST(DatasetValidator, NamesLineAndFieldOfEveryBadRow) {
  struct Case {
    const char* row;
    const char* field;
    const char* message;
  } cases[] = {
      {R"({"messages": [{"role": "user", "content": "x"}]})", "messages",
       "the conversation must end with an assistant message (the last is \"user\")"},
      {R"({"messages": [{"role": "bot", "content": "x"}]})", "messages[0].role",
       "unknown role \"bot\" (expected system, user, assistant or tool)"},
      {R"({"messages": [{"role": "user"}, {"role": "assistant", "content": "a"}]})", "messages[0].content", "missing"},
      {R"({"messages": []})", "messages", "empty; a conversation needs at least one message"},
      {R"({"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "a"}]})", "messages[0]",
       "a tool message must follow an assistant message with tool_calls"},
      {R"({"prompt": "a"})", "completion", "missing (prompt/completion rows need both)"},
      {R"({"prompt": "a", "completion": ["b"]})", "prompt, completion",
       "must both be strings or both be message lists (got string and array)"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "tools": {}})",
       "tools", "expected an array, got object"},
  };
  for (const auto& c : cases) {
    auto r = check_row(json::parse(c.row));
    ASSERT_FALSE(r.is_ok()) << c.row;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().field(), c.field) << c.row;
    EXPECT_EQ(r.status().message(), c.message) << c.row;
  }
}

TEST(DatasetValidator, ReportsTheFirstTwentyBadLinesAndCountsThemAll) {
  std::string rows;
  for (int i = 0; i < 25; ++i) rows += R"({"messages": [{"role": "user", "content": "no answer"}]})" "\n";
  rows += R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})" "\n";
  rows += "not json\n";
  Validation v = validate_jsonl(rows);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.bad_lines, 26);
  ASSERT_EQ(v.errors.size(), 20u);
  EXPECT_EQ(v.errors[0].line, 1);
  EXPECT_EQ(v.errors[19].line, 20);
  Status st = v.status("rows");
  EXPECT_EQ(st.field(), "rows");
  EXPECT_EQ(st.message().rfind("line 1: messages: the conversation must end", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("; line 20: messages:"), std::string::npos);
  EXPECT_EQ(st.message().find("line 21:"), std::string::npos);
  EXPECT_NE(st.message().find("26 bad lines in all (the first 20 shown)"), std::string::npos) << st.message();
}

TEST(DatasetValidator, AnUnparsableLineNamesLineAndColumn) {
  // The line of the file and the column within that line (not "line 1" of the row parsed alone).
  const std::string good = R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})";
  Validation v = validate_jsonl(good + "\n" + R"({"messages": [}])" "\n");
  ASSERT_EQ(v.errors.size(), 1u);
  EXPECT_EQ(v.errors[0].line, 2);
  const Status st = v.status("rows");
  EXPECT_EQ(st.message().rfind("line 2, column 15: not valid JSON: syntax error", 0), 0u) << st.message();
  EXPECT_EQ(st.message().find("line 1"), std::string::npos) << st.message();
  std::string deep = R"({"messages": )" + std::string(5000, '[') + std::string(5000, ']') + "}";
  Validation d = validate_jsonl(deep);
  ASSERT_EQ(d.errors.size(), 1u);
  EXPECT_NE(d.errors[0].status.message().find("nested more than"), std::string::npos);
  EXPECT_EQ(d.status("rows").message().rfind("line 1: not valid JSON: JSON nested more than", 0), 0u)
      << d.status("rows").message();
}

TEST(DatasetValidator, SaysWhatWasExpectedWhenARowIsInAnotherKnownFormat) {
  auto sharegpt = check_row(json::parse(R"({"conversations": [{"from": "human", "value": "hi"}]})"));
  ASSERT_FALSE(sharegpt.is_ok());
  EXPECT_EQ(sharegpt.status().field(), "messages");
  EXPECT_NE(sharegpt.status().message().find("looks like ShareGPT"), std::string::npos);
  EXPECT_NE(sharegpt.status().message().find("from to role (human -> user, gpt -> assistant)"), std::string::npos);
  auto sharegpt_inside = check_row(json::parse(R"({"messages": [{"from": "human", "value": "hi"}]})"));
  ASSERT_FALSE(sharegpt_inside.is_ok());
  EXPECT_EQ(sharegpt_inside.status().field(), "messages[0].role");
  EXPECT_NE(sharegpt_inside.status().message().find("ShareGPT"), std::string::npos);
  auto preference = check_row(json::parse(
      R"({"input": {"messages": []}, "preferred_output": [], "non_preferred_output": []})"));
  ASSERT_FALSE(preference.is_ok());
  EXPECT_NE(preference.status().message().find("OpenAI's preference fine-tuning format"), std::string::npos);
  auto alpaca = check_row(json::parse(R"({"instruction": "i", "input": "", "output": "o"})"));
  ASSERT_FALSE(alpaca.is_ok());
  EXPECT_NE(alpaca.status().message().find("looks like Alpaca"), std::string::npos);
  auto other = check_row(json::parse(R"({"text": "hello"})"));
  ASSERT_FALSE(other.is_ok());
  EXPECT_EQ(other.status().describe(),
            "messages: missing; a row is {\"messages\": [...]} (chat) or {\"prompt\": ..., \"completion\": ...}");
}

TEST(DatasetValidator, NoRowsSaysWhatARowIs) {
  Validation v = validate_jsonl("\n  \n");
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status("rows").field(), "rows");
  EXPECT_NE(v.status("rows").message().find("no rows"), std::string::npos);
}

}  // namespace
}  // namespace trainer::dataset

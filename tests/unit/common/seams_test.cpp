// The common seams: statuses that blame a field, propagation helpers, the manual clock and
// bounded JSON parsing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/clock.h"
#include "common/json_parse.h"
#include "common/status.h"

namespace trainer {
namespace {

TEST(StatusField, InvalidFieldKeepsFieldApartFromMessage) {
  Status st = invalid_field("config.learningRate", "must be positive, got -1");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.field(), "config.learningRate");
  EXPECT_EQ(st.message(), "must be positive, got -1");
  EXPECT_EQ(st.describe(), "config.learningRate: must be positive, got -1");
  EXPECT_EQ(st.to_string(), "invalid_argument: config.learningRate: must be positive, got -1");
}

TEST(StatusField, WithFieldPrefixesAnInnerField) {
  EXPECT_EQ(invalid_field("lr", "bad").with_field("config").field(), "config.lr");
  EXPECT_EQ(invalid_field("[2].role", "bad").with_field("messages").field(), "messages[2].role");
  EXPECT_EQ(invalid_argument("bad").with_field("plan").field(), "plan");
  EXPECT_EQ(invalid_argument("bad").field(), "");
}

TEST(StatusField, WithContextKeepsTheField) {
  Status st = invalid_field("name", "too long").with_context("workload");
  EXPECT_EQ(st.field(), "name");
  EXPECT_EQ(st.message(), "workload: too long");
}

Result<int> half(int v) {
  if (v % 2 != 0) return invalid_field("v", "odd: " + std::to_string(v));
  return v / 2;
}

Result<int> quarter(int v) {
  TRAINER_ASSIGN_OR_RETURN(int h, half(v));
  TRAINER_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

TEST(StatusPropagation, AssignOrReturnPassesValuesAndFailures) {
  EXPECT_EQ(*quarter(12), 3);
  Result<int> r = quarter(6);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_EQ(r.status().field(), "v");
}

TEST(ManualClock, MovesOnlyWhenAdvanced) {
  ManualClock clock(1000.0);
  auto t0 = clock.steady_now();
  EXPECT_DOUBLE_EQ(clock.now_seconds(), 1000.0);
  clock.advance(std::chrono::milliseconds(2500));
  EXPECT_DOUBLE_EQ(clock.now_seconds(), 1002.5);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(clock.steady_now() - t0).count(), 2500);
}

TEST(SystemClock, WallTimeIsRecent) {
  EXPECT_GT(system_clock()->now_seconds(), 1'600'000'000.0);
}

TEST(FileClock, ReadsTheFileAtEveryReadingAndKeepsTheLastGoodValue) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("file-clock-" + std::to_string(::getpid()));
  std::ofstream(file) << "1769882400.5\n";
  auto clock = file_clock(file.string());
  EXPECT_EQ(clock->now_seconds(), 1769882400.5);
  std::ofstream(file) << "1769882460";
  EXPECT_EQ(clock->now_seconds(), 1769882460.0);
  std::ofstream(file) << "";  // being rewritten: the last good value stands
  EXPECT_EQ(clock->now_seconds(), 1769882460.0);
  std::filesystem::remove(file);
  EXPECT_EQ(clock->now_seconds(), 1769882460.0);
  const auto a = clock->steady_now();
  EXPECT_LE(a, clock->steady_now());  // the machine's monotonic time
}

TEST(BoundedJson, DepthIgnoresBracketsInsideStrings) {
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[{{{", "b": [1, [2]]})"), 3);
  EXPECT_EQ(json_nesting_depth(R"({"a": "\"[[["})"), 1);
  EXPECT_EQ(json_nesting_depth("42"), 0);
}

TEST(BoundedJson, RefusesDeepNestingWithoutRecursing) {
  std::string deep(200000, '[');
  deep += std::string(200000, ']');
  Result<nlohmann::json> r = parse_json(deep, "body");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "body: JSON nested more than 64 levels deep; flatten the document");
}

TEST(BoundedJson, AcceptsDocumentsAtTheLimit) {
  std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_TRUE(parse_json(ok, "body").is_ok());
  EXPECT_FALSE(parse_json("[" + ok + "]", "body").is_ok());
}

TEST(BoundedJson, SyntaxErrorsGiveLineAndColumn) {
  Result<nlohmann::json> r = parse_json("{\n  \"a\": 1,\n}", "config");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("config: not valid JSON at line 3, column 1"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace trainer

#include "common/status.h"

#include <gtest/gtest.h>

namespace trainer {
namespace {

TEST(Status, CodesMapToHttpStatuses) {
  EXPECT_EQ(http_status(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(http_status(StatusCode::kNotFound), 404);
  EXPECT_EQ(http_status(StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(http_status(StatusCode::kUnavailable), 503);
}

TEST(Status, ContextIsPrefixed) {
  Status st = invalid_argument("field 'x' must be positive").with_context("plan.yaml");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "plan.yaml: field 'x' must be positive");
  EXPECT_EQ(st.to_string(), "invalid_argument: plan.yaml: field 'x' must be positive");
}

TEST(Result, CarriesValueOrStatus) {
  Result<int> good = 7;
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(*good, 7);
  Result<int> bad = not_found("run r-1 not found");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainer

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

#include "common/sha256.h"

namespace trainer {
namespace {

TEST(Sha256, MatchesFipsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  Sha256 h;
  h.update("hello ");
  h.update("world");
  EXPECT_EQ(h.hex_digest(), sha256_hex("hello world"));
}

}  // namespace
}  // namespace trainer

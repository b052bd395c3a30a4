// ISO 8601 UTC times as configuration files and flags write them (common/utc_time.h).
#include <gtest/gtest.h>

#include "common/utc_time.h"

namespace trainer {
namespace {

TEST(UtcTime, ReadsZuluOffsetsAndFractions) {
  EXPECT_EQ(parse_utc_time("2026-01-31T18:00:00Z"), 1769882400.0);
  EXPECT_EQ(parse_utc_time("2026-01-31t18:00:00z"), 1769882400.0);
  EXPECT_EQ(parse_utc_time("2026-01-31 18:00:00Z"), 1769882400.0);
  EXPECT_EQ(parse_utc_time("2026-01-31T20:00:00+02:00"), 1769882400.0);
  EXPECT_EQ(parse_utc_time("2026-01-31T13:30:00-04:30"), 1769882400.0);
  EXPECT_EQ(parse_utc_time("2026-01-31T18:00:00.250Z"), 1769882400.25);
  EXPECT_EQ(parse_utc_time("2024-02-29T00:00:00Z"), 1709164800.0);  // a leap day
}

TEST(UtcTime, RefusesAnythingElse) {
  for (const char* bad : {"", "yesterday", "2026-01-31", "2026-01-31T18:00:00", "2026-01-31T18:00Z",
                          "2026-13-01T00:00:00Z", "2026-02-29T00:00:00Z", "2026-01-31T24:00:00Z",
                          "2026-01-31T18:60:00Z", "2026-01-31T18:00:60Z", "2026-01-31T18:00:00Zjunk",
                          "2026-01-31T18:00:00+2:00", "2026-01-31T18:00:00.Z", "1969-12-31T23:59:59Z",
                          "2026-1-31T18:00:00Z"}) {
    EXPECT_FALSE(parse_utc_time(bad).has_value()) << bad;
  }
}

TEST(UtcTime, WritesWholeSecondsInZulu) {
  EXPECT_EQ(utc_time_text(1769882400.9), "2026-01-31T18:00:00Z");
  EXPECT_EQ(utc_time_text(0), "1970-01-01T00:00:00Z");
}

}  // namespace
}  // namespace trainer

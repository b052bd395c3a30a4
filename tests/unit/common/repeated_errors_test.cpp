// A recurring error is logged once, counted, reminded, and its end said with the count.
#include <gtest/gtest.h>

#include "common/repeated_errors.h"

namespace trainer {
namespace {

TEST(RepeatedErrors, SaysAnErrorOnceThenCountsItsRepeats) {
  RepeatedErrors log(600);
  EXPECT_EQ(log.failed("run a", "disk is full", 0).value_or(""), "run a: disk is full");
  // The 7,580 failed passes a tenth of a second apart: one reminder (at 600 s), not 7,579 lines.
  int lines = 0;
  for (int i = 1; i < 7580; ++i) lines += log.failed("run a", "disk is full", i * 0.1).has_value() ? 1 : 0;
  EXPECT_EQ(lines, 1);
  auto ended = log.succeeded("run a", 758);
  ASSERT_TRUE(ended.has_value());
  EXPECT_NE(ended->find("7580 times in 758 s"), std::string::npos) << *ended;
  EXPECT_FALSE(log.succeeded("run a", 759).has_value());
  EXPECT_TRUE(log.failed("run a", "disk is full", 800).has_value());  // a new episode is said again
}

TEST(RepeatedErrors, RemindsWithTheCountWhileItLasts) {
  RepeatedErrors log(600);
  ASSERT_TRUE(log.failed("run a", "full", 0).has_value());
  EXPECT_FALSE(log.failed("run a", "full", 599).has_value());
  auto reminder = log.failed("run a", "full", 601);
  ASSERT_TRUE(reminder.has_value());
  EXPECT_NE(reminder->find("still failing, 3 times in 601 s (2 since the last line)"), std::string::npos) << *reminder;
  EXPECT_FALSE(log.failed("run a", "full", 700).has_value());
}

TEST(RepeatedErrors, KeysAndMessagesAreApart) {
  RepeatedErrors log(600);
  ASSERT_TRUE(log.failed("run a", "full", 0).has_value());
  EXPECT_TRUE(log.failed("run b", "full", 1).has_value());  // another task is its own line
  auto changed = log.failed("run a", "locked", 2);
  ASSERT_TRUE(changed.has_value());
  EXPECT_NE(changed->find("run a: locked (the previous error failed it 1 times in 2 s)"), std::string::npos) << *changed;
}

}  // namespace
}  // namespace trainer

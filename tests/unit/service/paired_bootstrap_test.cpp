// The paired bootstrap of comparisons and score tables (src/service/paired_bootstrap.h).
#include "service/paired_bootstrap.h"

#include <gtest/gtest.h>

namespace trainer::service {
namespace {

TEST(PairedBootstrap, NoRowsGiveNoInterval) { EXPECT_FALSE(paired_bootstrap({}).has_value()); }

TEST(PairedBootstrap, EqualScoresGiveAnIntervalOfZeroAndNoClearDifference) {
  auto iv = paired_bootstrap(std::vector<double>(30, 0.0));
  ASSERT_TRUE(iv);
  EXPECT_EQ(iv->low, 0);
  EXPECT_EQ(iv->high, 0);
  EXPECT_EQ(iv->rows, 30);
  EXPECT_STREQ(bootstrap_verdict(*iv), "no clear difference");
}

TEST(PairedBootstrap, OneRowOutOfThirtyIsNotAWinner) {
  std::vector<double> d(30, 0.0);
  d[7] = 1.0;
  auto iv = paired_bootstrap(d);
  ASSERT_TRUE(iv);
  EXPECT_DOUBLE_EQ(iv->mean_difference, 1.0 / 30);
  EXPECT_EQ(iv->low, 0);  // most resamples miss the one row more than 2.5% of the time
  EXPECT_STREQ(bootstrap_verdict(*iv), "no clear difference");
}

TEST(PairedBootstrap, AConsistentGainIsBetterAndAConsistentLossWorse) {
  std::vector<double> gain(30, 0.5);
  gain[3] = 0.0;
  auto better = paired_bootstrap(gain);
  ASSERT_TRUE(better);
  EXPECT_GT(better->low, 0);
  EXPECT_LE(better->high, 0.5);
  EXPECT_STREQ(bootstrap_verdict(*better), "better");
  for (auto& x : gain) x = -x;
  auto worse = paired_bootstrap(gain);
  ASSERT_TRUE(worse);
  EXPECT_STREQ(bootstrap_verdict(*worse), "worse");
}

TEST(PairedBootstrap, TheSameRowsAndSeedGiveTheSameIntervalAndAnotherSeedMayNot) {
  const std::vector<double> d = {0.1, -0.3, 0.7, 0.0, 0.2, -0.1, 0.4, 0.0, 0.9, -0.5};
  auto a = paired_bootstrap(d);
  auto b = paired_bootstrap(d);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->low, b->low);
  EXPECT_EQ(a->high, b->high);
  EXPECT_LT(a->low, a->mean_difference);
  EXPECT_GT(a->high, a->mean_difference);
  auto c = paired_bootstrap(d, {.seed = 1});
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->low != a->low || c->high != a->high);
}

TEST(PairedBootstrap, RowsArePairedByLineAndUnscoredLinesLeftOut) {
  const std::map<int64_t, double> target = {{1, 1.0}, {2, 0.5}, {4, 1.0}};
  const std::map<int64_t, double> source = {{1, 0.0}, {2, 0.5}, {3, 1.0}};
  EXPECT_EQ(paired_differences(target, source), (std::vector<double>{1.0, 0.0}));
}

}  // namespace
}  // namespace trainer::service

// The request limits (src/api/request_limits.h): a token bucket per token, refilled at the
// configured rate, and a cap on the long polls a token holds, each slot given back when its
// handle goes. Time is passed in, so nothing here waits.
#include "api/request_limits.h"

#include <gtest/gtest.h>

#include <chrono>

namespace trainer::api {
namespace {

using Clock = RequestLimiter::Clock;
using std::chrono::milliseconds;

std::shared_ptr<RequestLimiter> limiter_of(int rate, int burst, int polls) {
  service::Limits l;
  l.requests_per_second = rate;
  l.request_burst = burst;
  l.long_polls_per_token = polls;
  return RequestLimiter::for_tokens(l);
}

TEST(RequestLimiter, ATokenMayMakeItsBurstAtOnceThenWaitsForTheRate) {
  auto limiter = limiter_of(2, 3, 0);
  const Clock::time_point t0{};
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(limiter->take("a", t0)) << "request " << i;
  auto wait = limiter->take("a", t0);
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, 1);  // whole seconds, at least 1
  // Another token has a bucket of its own.
  EXPECT_FALSE(limiter->take("b", t0));
  // Half a second at 2 per second refills one request, and only one.
  EXPECT_FALSE(limiter->take("a", t0 + milliseconds(500)));
  EXPECT_TRUE(limiter->take("a", t0 + milliseconds(500)));
  // A long pause refills up to the burst, never more.
  const Clock::time_point later = t0 + std::chrono::seconds(60);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(limiter->take("a", later)) << "request " << i;
  EXPECT_TRUE(limiter->take("a", later));
}

TEST(RequestLimiter, AWorkloadsRateIsItsOwnSettingAndHoldsNoLongPolls) {
  service::Limits l;
  l.requests_per_second = 100;
  l.workload_requests_per_second = 1;
  auto workloads = RequestLimiter::for_workloads(l);
  EXPECT_EQ(workloads->requests_per_second(), 1);
  EXPECT_EQ(workloads->request_burst(), 1);
  EXPECT_FALSE(workloads->take("w1", Clock::time_point{}));
  EXPECT_TRUE(workloads->take("w1", Clock::time_point{}));
  EXPECT_EQ(workloads->long_polls_per_token(), 0);
}

TEST(RequestLimiter, WithoutARateEveryRequestGoesAndTheBurstDefaultsToTheRate) {
  auto open = limiter_of(0, 0, 0);
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(open->take("a", Clock::time_point{}));
  auto limited = limiter_of(5, 0, 0);
  EXPECT_EQ(limited->request_burst(), 5);
}

TEST(RequestLimiter, ATokenHoldsAtMostItsLongPollsAndGetsASlotBackWhenOneEnds) {
  auto limiter = limiter_of(0, 0, 2);
  auto first = limiter->hold_long_poll("a");
  auto second = limiter->hold_long_poll("a");
  ASSERT_TRUE(first && second);
  EXPECT_FALSE(limiter->hold_long_poll("a"));
  EXPECT_TRUE(limiter->hold_long_poll("b"));  // another token's are its own
  auto copy = first;                          // a slot is given back when its last copy goes
  first.reset();
  EXPECT_FALSE(limiter->hold_long_poll("a"));
  copy.reset();
  EXPECT_TRUE(limiter->hold_long_poll("a"));
  // Without a cap every poll is held.
  auto open = limiter_of(0, 0, 0);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(open->hold_long_poll("a"));
}

}  // namespace
}  // namespace trainer::api

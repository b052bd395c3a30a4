// The run's phase table: the same phases as phases.h, in order, and the lifecycle's rules.
#include <gtest/gtest.h>

#include "service/phases.h"

namespace trainer::service {
namespace {

TEST(RunPhaseTable, HasEveryRunPhaseInLifecycleOrderWithItsTerminalFlag) {
  const tasks::PhaseTable& t = run_phase_table();
  EXPECT_EQ(t.kind(), "run");
  ASSERT_EQ(t.phases().size(), static_cast<size_t>(kPhaseCount));
  for (int i = 0; i < kPhaseCount; ++i) {
    EXPECT_EQ(t.phases()[i].name, phase_name(phase_at(i)));
    EXPECT_EQ(t.phases()[i].terminal, is_terminal(phase_at(i))) << phase_name(phase_at(i));
  }
  EXPECT_TRUE(t.idle("PAUSED"));
  EXPECT_FALSE(t.idle("TRAINING"));
}

TEST(RunPhaseTable, ARunHoldsItsClaimFromWaitingForDevicesUntilItPausesOrEnds) {
  const tasks::PhaseTable& t = run_phase_table();
  for (const char* p : {"WAITING_FOR_DEVICES", "SUBMITTING", "QUEUED", "PREPARING", "TRAINING", "PAUSING",
                        "FINALIZING", "CLEANING_UP"}) {
    EXPECT_TRUE(t.find(p)->holds_claim) << p;
  }
  for (const char* p : {"SIZING_DATASET", "WAITING_FOR_BASE_MODEL", "DEPLOYING_GRADER", "WAITING_FOR_GRADER", "PAUSED",
                        "COMPLETED", "FAILED", "CANCELLED"}) {
    EXPECT_FALSE(t.find(p)->holds_claim) << p;
  }
}

TEST(RunPhaseTable, OnlyTheLifecyclesTransitionsAreAllowed) {
  const tasks::PhaseTable& t = run_phase_table();
  EXPECT_TRUE(t.allows("WAITING_FOR_DEVICES", "SUBMITTING"));
  EXPECT_TRUE(t.allows("PAUSED", "WAITING_FOR_DEVICES"));  // a resume claims again
  EXPECT_TRUE(t.allows("TRAINING", "PAUSING"));
  EXPECT_TRUE(t.allows("TRAINING", "SUBMITTING")) << "a lost job's run starts its next attempt";
  EXPECT_TRUE(t.allows("QUEUED", "SUBMITTING")) << "a job lost before it reported anything";
  EXPECT_TRUE(t.allows("FINALIZING", "CLEANING_UP"));
  EXPECT_TRUE(t.allows("CLEANING_UP", "COMPLETED"));
  EXPECT_FALSE(t.allows("TRAINING", "COMPLETED")) << "a run completes through FINALIZING and CLEANING_UP";
  EXPECT_FALSE(t.allows("TRAINING", "QUEUED")) << "a job's phases only move forward";
  EXPECT_FALSE(t.allows("FINALIZING", "PAUSING")) << "a run being registered can no longer pause";
  EXPECT_FALSE(t.allows("PAUSED", "TRAINING")) << "a resume goes through a new claim and job";
  EXPECT_FALSE(t.allows("COMPLETED", "FAILED")) << "terminal phases are final";
}

}  // namespace
}  // namespace trainer::service

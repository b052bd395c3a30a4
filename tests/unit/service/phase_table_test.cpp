// Phase tables: what a kind may declare, and what a transition may do.
#include <gtest/gtest.h>

#include "service/tasks/phase_table.h"

namespace trainer::tasks {
namespace {

Result<PhaseTable> toy(std::vector<Transition> transitions) {
  return PhaseTable::make("toy", {{"A"}, {"B", false, true}, {"PARKED", false, false, true}, {"DONE", true}},
                          std::move(transitions));
}

TEST(PhaseTable, AllowsOnlyTheTransitionsItLists) {
  auto t = toy({{"A", {"B", "DONE"}}, {"B", {"PARKED", "DONE"}}, {"PARKED", {"B"}}});
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_TRUE(t->allows("A", "B"));
  EXPECT_FALSE(t->allows("B", "A"));
  EXPECT_FALSE(t->allows("A", "NOPE"));
  Status refused = t->check("B", "A");
  EXPECT_EQ(refused.code(), StatusCode::kInternal);
  EXPECT_EQ(refused.message(), "a toy cannot move from B to A: its phase table does not allow it");
  EXPECT_EQ(t->check("A", "NOPE").message(), "a toy cannot move from A to NOPE: NOPE is not one of its phases");
  EXPECT_TRUE(t->terminal("DONE"));
  EXPECT_TRUE(t->idle("PARKED"));
  EXPECT_TRUE(t->find("B")->holds_claim);
  EXPECT_EQ(t->to_json()["phases"][0]["to"], nlohmann::json({"B", "DONE"}));
}

TEST(PhaseTable, RefusesABrokenTableByName) {
  auto expect_refused = [](Result<PhaseTable> t, const std::string& says) {
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.status().message().find(says), std::string::npos) << t.status().message();
  };
  expect_refused(toy({{"A", {"B"}}, {"B", {"DONE"}}, {"DONE", {"A"}}, {"PARKED", {"B"}}}),
                 "a transition leaves terminal phase DONE");
  expect_refused(toy({{"A", {"B"}}, {"B", {"DONE"}}}), "phase PARKED has no way out");
  expect_refused(toy({{"A", {"ELSEWHERE"}}}), "enters ELSEWHERE, which is not a phase");
  expect_refused(toy({{"A", {"A"}}}), "phase A cannot move to itself");
  expect_refused(PhaseTable::make("toy", {{"A"}, {"A"}, {"DONE", true}}, {}), "phase A is listed twice");
  expect_refused(PhaseTable::make("toy", {{"A"}}, {}), "no phase ends the task");
  expect_refused(PhaseTable::make("", {{"DONE", true}}, {}), "needs a name");
  expect_refused(PhaseTable::make("toy", {{"WAITING", false, false, false, true}, {"DONE", true}},
                                  {{"WAITING", {"DONE"}}}),
                 "phase WAITING waits for its claim, so it holds one and is not idle");
}

}  // namespace
}  // namespace trainer::tasks

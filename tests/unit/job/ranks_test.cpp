// The other ranks of a data-parallel job (src/job/ranks.h): started, watched, and named when one
// fails. The ranks here are small shell programs in place of trainer-job. And the world a rank
// reads from its environment (src/engine/engine.h).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <csignal>
#include <future>
#include <map>
#include <memory>

#include "engine/engine.h"
#include "job/ranks.h"

namespace trainer::job {
namespace {

RanksOptions shell(const std::string& script, int world_size) {
  RanksOptions o;
  o.executable = "/bin/sh";
  o.args = {"-c", script};
  o.world_size = world_size;
  o.master_addr = "127.0.0.1";
  o.master_port = 29999;
  return o;
}

TEST(Ranks, ExitsAreDescribedByRankPidAndSignal) {
  EXPECT_EQ(Ranks::describe_exit(1, 42, 0), std::nullopt);
  EXPECT_EQ(Ranks::describe_exit(1, 42, 143 << 8), std::nullopt);  // cancelled with the others
  EXPECT_EQ(Ranks::describe_exit(2, 42, 1 << 8), "rank 2 (pid 42) exited with status 1");
  EXPECT_EQ(Ranks::describe_exit(1, 42, SIGKILL), "rank 1 (pid 42) was killed by signal 9 (SIGKILL)");
}

TEST(Ranks, RanksThatEndWellGiveNoFailureAndSeeTheirWorld) {
  auto ranks = Ranks::start(shell(R"(test "$WORLD_SIZE" = 3 && test "$MASTER_PORT" = 29999 && test "$RANK" -ge 1)", 3));
  ASSERT_TRUE(ranks.is_ok()) << ranks.status().describe();
  EXPECT_EQ((*ranks)->wait(), std::nullopt);
}

TEST(Ranks, AFailedRankIsNamedAndTheOthersAreKilled) {
  // Rank 1 fails at once; rank 2 would run for a minute.
  auto ranks = Ranks::start(shell(R"(if [ "$RANK" = 1 ]; then exit 3; fi; sleep 60)", 3));
  ASSERT_TRUE(ranks.is_ok()) << ranks.status().describe();
  auto failed = (*ranks)->wait();  // returns only once rank 2 is gone too
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->rfind("rank 1 (pid ", 0), 0u) << *failed;
  EXPECT_NE(failed->find(") exited with status 3"), std::string::npos) << *failed;
}

TEST(Ranks, ARankFailingWhileRankZeroIsStuckIsReportedByTheWatcher) {
  RanksOptions o = shell("kill -9 $$", 2);
  o.abandon_after = std::chrono::milliseconds(10);
  std::promise<std::string> abandoned;
  o.on_abandon = [&](const std::string& failure) { abandoned.set_value(failure); };
  auto ranks = Ranks::start(std::move(o));
  ASSERT_TRUE(ranks.is_ok());
  auto f = abandoned.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_NE(f.get().find("was killed by signal 9 (SIGKILL)"), std::string::npos);
}

}  // namespace
}  // namespace trainer::job

namespace trainer::engine::dist {
namespace {

std::function<const char*(const char*)> env_of(std::map<std::string, std::string> values) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(values));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(World, WithoutRankTheProcessTrainsAlone) {
  auto w = world_from_environment(env_of({{"WORLD_SIZE", "4"}}));
  ASSERT_TRUE(w.is_ok());
  EXPECT_EQ(w->rank, 0);
  EXPECT_EQ(w->size, 1);
  EXPECT_FALSE(w->distributed());
}

TEST(World, AStartedRankReadsItsWorld) {
  auto w = world_from_environment(
      env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29400"}}));
  ASSERT_TRUE(w.is_ok()) << w.status().describe();
  EXPECT_EQ(w->rank, 1);
  EXPECT_EQ(w->size, 2);
  EXPECT_EQ(w->master_port, 29400);
  EXPECT_TRUE(w->distributed());
}

TEST(World, AMalformedVariableIsNamed) {
  auto w = world_from_environment(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29400"}}));
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().describe(), "RANK: 2 is not below WORLD_SIZE 2");
  w = world_from_environment(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().describe(), "MASTER_PORT: '' is not an integer from 1 to 65535");
}

}  // namespace
}  // namespace trainer::engine::dist

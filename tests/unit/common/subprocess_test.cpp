// The process seam (src/common/subprocess.h): lines both ways, a deadline on reads, a child that
// exits, and kill() ending a child that ignores its input.
#include "common/subprocess.h"

#include <gtest/gtest.h>

#include <signal.h>

namespace trainer {
namespace {

using namespace std::chrono_literals;

std::chrono::steady_clock::time_point in(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

TEST(Subprocess, ExchangesLinesWithAChild) {
  Subprocess p;
  ASSERT_TRUE(p.start({"sh", "-c", "while read line; do echo \"got $line $GREETING\"; done"}, {{"GREETING", "hi"}}).is_ok());
  ASSERT_TRUE(p.write_line("one").is_ok());
  ASSERT_TRUE(p.write_line("two").is_ok());
  std::string line;
  ASSERT_EQ(p.read_line(in(10s), &line), Subprocess::ReadResult::kLine);
  EXPECT_EQ(line, "got one hi");
  ASSERT_EQ(p.read_line(in(10s), &line), Subprocess::ReadResult::kLine);
  EXPECT_EQ(line, "got two hi");
}

TEST(Subprocess, AReadEndsAtItsDeadlineAndKillEndsTheChild) {
  Subprocess p;
  ASSERT_TRUE(p.start({"sleep", "60"}).is_ok());
  const pid_t pid = p.pid();
  std::string line;
  EXPECT_EQ(p.read_line(in(200ms), &line), Subprocess::ReadResult::kTimeout);
  p.kill();
  EXPECT_FALSE(p.running());
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: the pid is gone
}

TEST(Subprocess, AChildThatExitsClosesItsOutputAndWritesFailWithoutASignal) {
  Subprocess p;
  ASSERT_TRUE(p.start({"sh", "-c", "echo last; exit 3"}).is_ok());
  std::string line;
  ASSERT_EQ(p.read_line(in(10s), &line), Subprocess::ReadResult::kLine);
  EXPECT_EQ(line, "last");
  EXPECT_EQ(p.read_line(in(10s), &line), Subprocess::ReadResult::kClosed);
  for (int i = 0; i < 100 && p.write_line("x").is_ok(); ++i) {
  }
  EXPECT_FALSE(p.write_line("x").is_ok());  // no SIGPIPE: we are still here
}

TEST(Subprocess, AProgramThatDoesNotExistClosesAtOnce) {
  Subprocess p;
  ASSERT_TRUE(p.start({"/no/such/program"}).is_ok());
  std::string line;
  EXPECT_EQ(p.read_line(in(10s), &line), Subprocess::ReadResult::kClosed);
}

TEST(Subprocess, WaitExitGivesTheExitStatusOrKillsAChildThatDoesNotExit) {
  Subprocess exits;
  ASSERT_TRUE(exits.start({"sh", "-c", "exit 3"}).is_ok());
  std::string line;
  EXPECT_EQ(exits.read_line(in(10s), &line), Subprocess::ReadResult::kClosed);
  EXPECT_EQ(exits.wait_exit(10s), 3);
  EXPECT_FALSE(exits.running());
  Subprocess stays;
  ASSERT_TRUE(stays.start({"sleep", "60"}).is_ok());
  const pid_t pid = stays.pid();
  EXPECT_EQ(stays.wait_exit(100ms), 128 + SIGKILL);
  EXPECT_NE(::kill(pid, 0), 0);  // killed and reaped
  EXPECT_EQ(stays.wait_exit(100ms), -1);  // none runs
}

}  // namespace
}  // namespace trainer

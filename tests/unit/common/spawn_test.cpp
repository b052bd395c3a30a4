// The process seam's spawn() and run_captured() (src/common/subprocess.h): exit codes, the
// environment, where the standard streams go, process groups and sessions, what the child
// inherits, and the timeout that ends a child and all it started.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "common/subprocess.h"

namespace trainer {
namespace {

using namespace std::chrono_literals;

SpawnOptions shell(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

CaptureOptions within(std::chrono::milliseconds timeout) {
  CaptureOptions capture;
  capture.timeout = timeout;
  return capture;
}

CapturedRun run(SpawnOptions options, std::chrono::milliseconds timeout = 10s) {
  Result<CapturedRun> r = run_captured(std::move(options), within(timeout));
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? *r : CapturedRun{};
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return exit_code_of(status);
}

// Whether `pid` has ended (gone, or a zombie nobody reaped yet), waiting up to 5 s for it.
bool ended_soon(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST(Spawn, ExitCodesAndSignalsReadAsOneNumber) {
  EXPECT_EQ(run(shell("exit 0")).exit_code, 0);
  EXPECT_EQ(run(shell("exit 3")).exit_code, 3);
  EXPECT_EQ(run(shell("kill -9 $$")).exit_code, 128 + SIGKILL);
}

TEST(Spawn, AProgramThatCannotBeExecutedExitsWith127AndTheNoteOnStderr) {
  SpawnOptions o;
  o.argv = {"/no/such/program"};
  CapturedRun quiet = run(o);
  EXPECT_EQ(quiet.exit_code, 127);
  EXPECT_EQ(quiet.err, "");
  o.exec_failure_note = "cannot exec\n";
  EXPECT_EQ(run(o).err, "cannot exec\n");
}

TEST(Spawn, AnEmptyArgvIsRefused) {
  Result<pid_t> r = spawn(SpawnOptions{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "no program to start");
}

TEST(Spawn, SearchPathFindsAProgramByName) {
  SpawnOptions o;
  o.argv = {"echo", "found"};
  EXPECT_EQ(run(o).exit_code, 127);  // no search: "echo" is not a path
  o.search_path = true;
  EXPECT_EQ(run(o).out, "found\n");
}

TEST(Spawn, AddedVariablesReplaceInheritedOnesAndClearEnvKeepsOnlyThem) {
  ::setenv("TRAINER_SPAWN_TEST", "inherited", 1);
  ::setenv("TRAINER_SPAWN_KEPT", "kept", 1);
  SpawnOptions o = shell("env | grep '^TRAINER_SPAWN_' | sort");
  o.env = {{"TRAINER_SPAWN_TEST", "added"}, {"TRAINER_SPAWN_NEW", "new"}};
  EXPECT_EQ(run(o).out, "TRAINER_SPAWN_KEPT=kept\nTRAINER_SPAWN_NEW=new\nTRAINER_SPAWN_TEST=added\n");
  o.clear_env = true;
  EXPECT_EQ(run(o).out, "TRAINER_SPAWN_NEW=new\nTRAINER_SPAWN_TEST=added\n");
  ::unsetenv("TRAINER_SPAWN_TEST");
  ::unsetenv("TRAINER_SPAWN_KEPT");
}

TEST(Spawn, StreamsGoToDescriptorsNullOrTheCapture) {
  char path[] = "/tmp/spawn-test-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  SpawnOptions o = shell("read line; echo \"out $line\"; echo err >&2");
  o.stdin_stream = ChildStream::null();
  o.stdout_stream = ChildStream::to(fd);
  o.stderr_stream = ChildStream::to(fd);
  Result<pid_t> pid = spawn(o);
  ASSERT_TRUE(pid.is_ok());
  EXPECT_EQ(wait_for(*pid), 0);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "out \nerr\n");
  ::close(fd);
  ::unlink(path);

  CaptureOptions capture = within(10s);
  capture.input = "hello\n";
  Result<CapturedRun> captured = run_captured(shell("read line; echo \"out $line\"; echo err >&2"), capture);
  ASSERT_TRUE(captured.is_ok());
  EXPECT_EQ(captured->out, "out hello\n");
  EXPECT_EQ(captured->err, "err\n");
  SpawnOptions quiet = shell("echo err >&2");
  quiet.stderr_stream = ChildStream::null();
  capture = within(10s);
  capture.capture_stderr = false;
  captured = run_captured(quiet, capture);
  ASSERT_TRUE(captured.is_ok());
  EXPECT_EQ(captured->err, "");
}

TEST(Spawn, AWorkingDirectoryIsWhereTheChildStarts) {
  SpawnOptions o = shell("pwd");
  o.working_dir = "/tmp";
  EXPECT_EQ(run(o).out, "/tmp\n");
  o.working_dir = "/no/such/folder";
  EXPECT_EQ(run(o).exit_code, 127);
}

TEST(Spawn, TheChildRunsInTheGroupOrSessionAsked) {
  SpawnOptions o;
  o.argv = {"/bin/sleep", "30"};
  for (ChildGroup group : {ChildGroup::kInherit, ChildGroup::kNewGroup, ChildGroup::kNewSession}) {
    o.group = group;
    Result<pid_t> pid = spawn(o);
    ASSERT_TRUE(pid.is_ok());
    bool as_asked = false;
    for (int i = 0; i < 500 && !as_asked; ++i) {  // setsid runs in the child: give it a moment
      switch (group) {
        case ChildGroup::kInherit: as_asked = ::getpgid(*pid) == ::getpgrp() && ::getsid(*pid) == ::getsid(0); break;
        case ChildGroup::kNewGroup: as_asked = ::getpgid(*pid) == *pid && ::getsid(*pid) == ::getsid(0); break;
        case ChildGroup::kNewSession: as_asked = ::getsid(*pid) == *pid && ::getpgid(*pid) == *pid; break;
      }
      if (!as_asked) std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(as_asked) << "group " << static_cast<int>(group);
    ::kill(*pid, SIGKILL);
    EXPECT_EQ(wait_for(*pid), 128 + SIGKILL);
  }
}

TEST(Spawn, ATimeoutKillsTheChildAndWhatItStarted) {
  SpawnOptions o = shell("sleep 30 & echo $!; wait");
  o.group = ChildGroup::kNewGroup;
  const auto started = std::chrono::steady_clock::now();
  CapturedRun r = run(o, 300ms);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
  EXPECT_TRUE(r.timed_out);
  const pid_t grandchild = static_cast<pid_t>(std::atoi(r.out.c_str()));
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(ended_soon(grandchild));
}

TEST(Spawn, TheChildInheritsNoneOfOurDescriptors) {
  const int fd = ::open("/dev/null", O_RDONLY);  // inheritable: no O_CLOEXEC
  ASSERT_GT(fd, 2);
  ASSERT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  // A shell lists its own descriptors: only 0, 1, 2 (and the one ls opens to read the folder).
  SpawnOptions o = shell("test -e /proc/self/fd/" + std::to_string(fd));
  EXPECT_EQ(run(o).exit_code, 1);
  ::close(fd);
}

TEST(Spawn, MarkCloseOnExecSetsTheFlag) {
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GT(fd, 2);
  ASSERT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_TRUE(mark_close_on_exec(fd, "a test file").is_ok());
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  ::close(fd);
  Status closed = mark_close_on_exec(fd, "a closed descriptor");
  EXPECT_FALSE(closed.is_ok());
  EXPECT_NE(closed.message().find("a closed descriptor"), std::string::npos) << closed.message();
}

TEST(Spawn, UnblockSignalsClearsAnInheritedMask) {
  // This thread blocks SIGUSR2; a child inherits the mask unless it is cleared.
  sigset_t usr2, old;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &usr2, &old), 0);
  SpawnOptions o;  // no shell between: a shell may set its own mask
  o.argv = {"/bin/grep", "^SigBlk:", "/proc/self/status"};
  const std::string inherited = run(o).out;
  o.unblock_signals = true;
  const std::string cleared = run(o).out;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_NE(inherited, "SigBlk:\t0000000000000000\n");
  EXPECT_EQ(cleared, "SigBlk:\t0000000000000000\n");
}

TEST(Spawn, DieWithParentEndsTheChildWhenTheSpawningThreadEnds) {
  Result<pid_t> pid = Status(StatusCode::kInternal, "not run");
  std::thread spawner([&] {
    SpawnOptions o;
    o.argv = {"/bin/sleep", "30"};
    o.die_with_parent = true;
    pid = spawn(o);
    // Once it runs sleep it has passed PR_SET_PDEATHSIG: only then may this thread end.
    for (int i = 0; pid.is_ok() && i < 500; ++i) {
      std::ifstream comm("/proc/" + std::to_string(*pid) + "/comm");
      std::string name;
      if (std::getline(comm, name) && name == "sleep") break;
      std::this_thread::sleep_for(10ms);
    }
  });
  spawner.join();
  ASSERT_TRUE(pid.is_ok());
  EXPECT_EQ(wait_for(*pid), 128 + SIGKILL);
}

}  // namespace
}  // namespace trainer

// The confinement of user code (common/confinement.h): how an executable is resolved for it, and,
// with this machine's bubblewrap (tools/setup installs it), what confined code sees.
#include "common/confinement.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/subprocess.h"

namespace trainer {
namespace {

namespace fs = std::filesystem;

class ConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("confinement-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::owner_all);  // 0700, as a test's or a user's folder often is
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text, fs::perms mode) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    fs::permissions(p, mode);
    return p;
  }

  // Runs `argv` confined with `c`; its stdout.
  std::string run_confined(Confinement c, const std::vector<std::string>& argv) {
    auto confined = confined_argv(c, argv);
    EXPECT_TRUE(confined.is_ok()) << confined.status().message();
    if (!confined.is_ok()) return "";
    SpawnOptions options;
    options.argv = *confined;
    CaptureOptions capture;
    capture.timeout = std::chrono::seconds(60);
    auto run = run_captured(options, capture);
    EXPECT_TRUE(run.is_ok());
    EXPECT_EQ(run->exit_code, 0) << run->err;
    return run->out;
  }

  fs::path dir_;
};

TEST_F(ConfinementTest, TheModeIsTheOperatorsAndAnUnknownOneIsNamed) {
  ::unsetenv("TRAINER_USER_CODE_CONFINEMENT");
  EXPECT_EQ(*user_code_confinement(), ConfinementMode::kBubblewrap);
  ::setenv("TRAINER_USER_CODE_CONFINEMENT", "none", 1);
  EXPECT_EQ(*user_code_confinement(), ConfinementMode::kNone);
  ::setenv("TRAINER_USER_CODE_CONFINEMENT", "chroot", 1);
  auto bad = user_code_confinement();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("TRAINER_USER_CODE_CONFINEMENT: 'chroot' is not a confinement"),
            std::string::npos);
  ::unsetenv("TRAINER_USER_CODE_CONFINEMENT");
}

TEST_F(ConfinementTest, AMissingOrNonExecutableProgramIsNamed) {
  auto missing = confined_executable((dir_ / "nope").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().message(), (dir_ / "nope").string() + ": cannot be run (missing or not executable)");
  const fs::path plain = write("plain", "#!/bin/sh\n", fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_FALSE(confined_executable(plain.string()).is_ok());
}

TEST_F(ConfinementTest, AScriptRunsThroughItsInterpreterAndIsMounted) {
  const fs::path script = write("tool", "#!/usr/bin/python3 -u\nprint(1)\n", fs::perms::owner_all | fs::perms::others_read);
  auto exe = confined_executable(script.string());
  ASSERT_TRUE(exe.is_ok()) << exe.status().message();
  const std::string real = fs::canonical(script).string();
  EXPECT_EQ(exe->argv, (std::vector<std::string>{"/usr/bin/python3", "-u", real}));
  EXPECT_EQ(exe->mounts, std::vector<std::string>{real});  // /usr is the confinement's own
}

TEST_F(ConfinementTest, ConfinedCodeSeesItsFilesAndScratchOnlyAsNobodyWithoutTheJobsEnvironment) {
  ::setenv("TRAINER_CATALOG_URL", "http://127.0.0.1:1/secret", 1);
  const fs::path mine = write("mine.txt", "visible\n", fs::perms::owner_all | fs::perms::others_read);
  write("other.txt", "hidden\n", fs::perms::owner_all | fs::perms::others_read);
  auto scratch = make_scratch(dir_.string());
  ASSERT_TRUE(scratch.is_ok()) << scratch.status().message();
  Confinement c;
  c.read_only = {mine.string()};
  c.scratch = *scratch;
  c.env = {{"GIVEN", "yes"}};
  const std::string script =
      "cat " + mine.string() + "; cat " + (dir_ / "other.txt").string() + " 2>/dev/null || echo other-hidden; " +
      "test -e /etc/shadow || echo no-shadow; echo made > /scratch/f && cat /scratch/f; " +
      "touch " + (dir_ / "new").string() + " 2>/dev/null || echo read-only; " +
      "echo env=${TRAINER_CATALOG_URL:-none},$GIVEN; id -u";
  const std::string out = run_confined(c, {"/bin/sh", "-c", script});
  const std::string uid = ::geteuid() == 0 ? "65534" : std::to_string(::geteuid());
  EXPECT_EQ(out, "visible\nother-hidden\nno-shadow\nmade\nread-only\nenv=none,yes\n" + uid + "\n");
  EXPECT_FALSE(fs::exists(dir_ / "new"));
  remove_scratch(*scratch);
  EXPECT_FALSE(fs::exists(*scratch));
  ::unsetenv("TRAINER_CATALOG_URL");
}

TEST_F(ConfinementTest, LimitsHoldInside) {
  Confinement c;
  c.limits.file_bytes = 4096;
  auto scratch = make_scratch(dir_.string());
  ASSERT_TRUE(scratch.is_ok());
  c.scratch = *scratch;
  const std::string out = run_confined(
      c, {"/bin/sh", "-c", "head -c 100000 /dev/zero > /scratch/big 2>/dev/null; wc -c < /scratch/big; ulimit -v"});
  EXPECT_EQ(out, "4096\n" + std::to_string(c.limits.memory_bytes / 1024) + "\n");
  remove_scratch(*scratch);
}

}  // namespace
}  // namespace trainer

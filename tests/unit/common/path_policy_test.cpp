// Host paths a request may name (common/path_policy.h, docs/security.md "Paths"): resolved, links
// followed, confined to the allowed folders and never trainerd's data folder, with one refusal
// for any path outside, whether it exists or not.
#include "common/path_policy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace trainer {
namespace {

namespace fs = std::filesystem;

class PathPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("path-policy-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "allowed" / "sub");
    fs::create_directories(root_ / "data" / "runs" / "r1");
    fs::create_directories(root_ / "data" / "bundles" / "abc");
    fs::create_directories(root_ / "elsewhere");
    std::ofstream(root_ / "allowed" / "score.py") << "x = 1\n";
    std::ofstream(root_ / "elsewhere" / "secret.py") << "x = 2\n";
    std::ofstream(root_ / "data" / "runs" / "r1" / "adapter.safetensors") << "w";
    fs::create_symlink(root_ / "elsewhere", root_ / "allowed" / "link");
    policy_.allow = {(root_ / "allowed").string(), (root_ / "data").string()};
    policy_.deny = {(root_ / "data").string()};
    policy_.except = {(root_ / "data" / "bundles").string()};
  }
  void TearDown() override { fs::remove_all(root_); }

  Status check(const fs::path& p, PathKind kind = PathKind::kFile) {
    return check_confined_path(policy_, p.string(), "config.reward.terms[0].kind", kind);
  }

  fs::path root_;
  PathPolicy policy_;
};

TEST_F(PathPolicyTest, AFileInsideAnAllowedFolderPasses) {
  EXPECT_TRUE(check(root_ / "allowed" / "score.py").is_ok());
  EXPECT_TRUE(check(root_ / "allowed" / "sub" / ".." / "score.py").is_ok());
  EXPECT_TRUE(check(root_ / "data" / "bundles" / "abc", PathKind::kFolder).is_ok());
}

TEST_F(PathPolicyTest, APathOutsideIsRefusedByFieldWithTheSameMessageWhetherItExistsOrNot) {
  const Status existing = check("/etc/passwd");
  const Status missing = check("/etc/no-such-file-here");
  ASSERT_FALSE(existing.is_ok());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(existing.field(), "config.reward.terms[0].kind");
  EXPECT_NE(existing.message().find("is outside the folders this trainerd lets requests name"), std::string::npos)
      << existing.message();
  // The messages differ only by the path each names.
  std::string a = existing.message(), b = missing.message();
  a.replace(a.find("/etc/passwd"), std::string("/etc/passwd").size(), "PATH");
  b.replace(b.find("/etc/no-such-file-here"), std::string("/etc/no-such-file-here").size(), "PATH");
  EXPECT_EQ(a, b);
}

TEST_F(PathPolicyTest, ALinkOrDotDotLeadingOutIsRefused) {
  EXPECT_NE(check(root_ / "allowed" / "link" / "secret.py").message().find("is outside"), std::string::npos);
  EXPECT_NE(check(root_ / "allowed" / ".." / "elsewhere" / "secret.py").message().find("is outside"),
            std::string::npos);
  EXPECT_NE(check(root_ / "allowed" / "missing" / ".." / ".." / "elsewhere" / "secret.py").message().find("is outside"),
            std::string::npos);
}

TEST_F(PathPolicyTest, TheDataFolderIsNeverAllowedButItsBundles) {
  const Status run = check(root_ / "data" / "runs" / "r1", PathKind::kFolder);
  ASSERT_FALSE(run.is_ok());
  EXPECT_NE(run.message().find("is outside"), std::string::npos) << run.message();
  EXPECT_FALSE(check(root_ / "data" / "runs" / "r1" / "adapter.safetensors").is_ok());
  // Through a link in an allowed folder too.
  fs::create_symlink(root_ / "data" / "runs", root_ / "allowed" / "runs");
  EXPECT_NE(check(root_ / "allowed" / "runs" / "r1", PathKind::kFolder).message().find("is outside"),
            std::string::npos);
}

TEST_F(PathPolicyTest, AMissingFileInsideIsNamedMissingAndARelativePathIsRefused) {
  const Status missing = check(root_ / "allowed" / "nope.py");
  EXPECT_NE(missing.message().find("no such file"), std::string::npos) << missing.message();
  EXPECT_NE(check(root_ / "allowed" / "score.py", PathKind::kFolder).message().find("no such folder"),
            std::string::npos);
  EXPECT_NE(check("relative.py").message().find("must be an absolute path"), std::string::npos);
}

TEST_F(PathPolicyTest, AllowedFoldersAreAbsolute) {
  EXPECT_TRUE(parse_allowed_folders(nlohmann::json::array({"/srv/a", "/tmp"}), "paths.allow").is_ok());
  const auto bad = parse_allowed_folders(nlohmann::json::array({"/srv/a", "rel"}), "paths.allow");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().field(), "paths.allow[1]");
}

}  // namespace
}  // namespace trainer

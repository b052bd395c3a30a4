// Content hashes: a dataset file by its bytes, a model folder by its files' paths and bytes.
#include "storage/content_hash.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/sha256.h"

namespace trainer::storage {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

class ContentHashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() / ("content-hash-" + std::to_string(::getpid()) + "-" + test->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(ContentHashTest, AFileIsHashedByItsBytes) {
  write(root_ / "rows.jsonl", "{\"a\": 1}\n");
  auto h = file_content_hash((root_ / "rows.jsonl").string());
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_EQ(h->sha256, sha256_hex("{\"a\": 1}\n"));
  EXPECT_EQ(h->bytes, 9);
}

TEST_F(ContentHashTest, AFolderIsHashedByEachFilesRelativePathAndBytesInPathOrder) {
  write(root_ / "m" / "config.json", "{}");
  write(root_ / "m" / "sub" / "w.bin", "xyz");
  auto h = folder_content_hash((root_ / "m").string());
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  const std::string nul(1, '\0');
  EXPECT_EQ(h->sha256, sha256_hex("config.json" + nul + "{}" + nul + "sub/w.bin" + nul + "xyz" + nul));
  EXPECT_EQ(h->bytes, 5);
  // A renamed file changes the hash, though no byte did.
  fs::rename(root_ / "m" / "sub" / "w.bin", root_ / "m" / "sub" / "v.bin");
  auto renamed = folder_content_hash((root_ / "m").string());
  ASSERT_TRUE(renamed.is_ok());
  EXPECT_NE(renamed->sha256, h->sha256);
}

TEST_F(ContentHashTest, AMissingFileIsAnErrorNamingIt) {
  auto h = file_content_hash((root_ / "absent.jsonl").string());
  ASSERT_FALSE(h.is_ok());
  EXPECT_NE(h.status().message().find("absent.jsonl"), std::string::npos) << h.status().message();
}

}  // namespace
}  // namespace trainer::storage

// The folder implementation of Storage: keys, put/get/list/delete, size, and atomic publish.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "storage/storage.h"

namespace trainer::storage {
namespace {

namespace fs = std::filesystem;

class FolderStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("storage-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    auto s = make_folder_storage((dir_ / "root").string());
    ASSERT_TRUE(s.is_ok());
    storage_ = std::move(*s);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every entry under the root's `sub` folder, temporaries included.
  std::vector<std::string> entries(const std::string& sub) {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir_ / "root" / sub, ec); !ec && it != fs::directory_iterator(); ++it) {
      out.push_back(it->path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir_;
  std::unique_ptr<Storage> storage_;
};

TEST_F(FolderStorageTest, PutGetListSizeAndDelete) {
  ASSERT_TRUE(storage_->put("datasets/a.jsonl", "one\n").is_ok());
  ASSERT_TRUE(storage_->put("datasets/b.jsonl", "two!\n").is_ok());
  ASSERT_TRUE(storage_->put("datasets/a.jsonl", "uno\n").is_ok());  // replaces
  EXPECT_EQ(*storage_->get("datasets/a.jsonl"), "uno\n");
  EXPECT_EQ(*storage_->list("datasets"), (std::vector<std::string>{"datasets/a.jsonl", "datasets/b.jsonl"}));
  EXPECT_EQ(*storage_->size("datasets/b.jsonl"), 5);
  EXPECT_EQ(*storage_->size("datasets"), 9);
  EXPECT_TRUE(*storage_->exists("datasets/a.jsonl"));
  EXPECT_EQ(storage_->local_path("datasets/a.jsonl"), (dir_ / "root" / "datasets" / "a.jsonl").string());
  ASSERT_TRUE(storage_->remove("datasets/a.jsonl").is_ok());
  ASSERT_TRUE(storage_->remove("datasets/a.jsonl").is_ok());  // absent: still ok
  EXPECT_FALSE(*storage_->exists("datasets/a.jsonl"));
  auto missing = storage_->get("datasets/a.jsonl");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(storage_->size("nothing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(entries("datasets"), (std::vector<std::string>{"b.jsonl"}));  // no temporaries left
}

TEST_F(FolderStorageTest, KeysOutsideTheRootAreRefusedByName) {
  for (const char* key : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "a/"}) {
    Status st = storage_->put(key, "x");
    ASSERT_FALSE(st.is_ok()) << key;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_EQ(st.field(), "key") << key;
  }
  EXPECT_FALSE(fs::exists(dir_ / "x"));
}

TEST_F(FolderStorageTest, PublishesAFolderWholeAndReplacesTheOldOne) {
  fs::create_directories(dir_ / "src" / "sub");
  std::ofstream(dir_ / "src" / "config.json") << "{}";
  std::ofstream(dir_ / "src" / "sub" / "weights.bin") << "0123456789";
  ASSERT_TRUE(storage_->publish((dir_ / "src").string(), "models/abc").is_ok());
  EXPECT_EQ(*storage_->list("models/abc"),
            (std::vector<std::string>{"models/abc/config.json", "models/abc/sub/weights.bin"}));
  EXPECT_EQ(*storage_->size("models/abc"), 12);
  std::ofstream(dir_ / "src" / "config.json") << "{\"v\": 2}";
  fs::remove(dir_ / "src" / "sub" / "weights.bin");
  ASSERT_TRUE(storage_->publish((dir_ / "src").string(), "models/abc").is_ok());
  EXPECT_EQ(*storage_->list("models/abc"), (std::vector<std::string>{"models/abc/config.json"}));
  EXPECT_EQ(*storage_->get("models/abc/config.json"), "{\"v\": 2}");
  EXPECT_EQ(entries("models"), (std::vector<std::string>{"abc"}));
}

TEST_F(FolderStorageTest, AFailedPublishLeavesNoPartialDestination) {
  // A folder whose second entry cannot be published (a FIFO is not a regular file): the copy
  // fails part way, after the first file was copied.
  fs::create_directories(dir_ / "src");
  std::ofstream(dir_ / "src" / "a.json") << "{}";
  ASSERT_EQ(::mkfifo((dir_ / "src" / "b.fifo").c_str(), 0644), 0);
  Status st = storage_->publish((dir_ / "src").string(), "models/bad");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("not a regular file or folder"), std::string::npos) << st.message();
  EXPECT_FALSE(*storage_->exists("models/bad"));
  EXPECT_TRUE(entries("models").empty());  // no temporary either

  // A failed publish over an existing artifact leaves the old one whole.
  fs::create_directories(dir_ / "good");
  std::ofstream(dir_ / "good" / "a.json") << "old";
  ASSERT_TRUE(storage_->publish((dir_ / "good").string(), "models/bad").is_ok());
  ASSERT_FALSE(storage_->publish((dir_ / "src").string(), "models/bad").is_ok());
  EXPECT_EQ(*storage_->get("models/bad/a.json"), "old");
  EXPECT_EQ(entries("models"), (std::vector<std::string>{"bad"}));
}

TEST_F(FolderStorageTest, PublishesASingleFile) {
  std::ofstream(dir_ / "plan.json") << "{\"kind\": \"run\"}";
  ASSERT_TRUE(storage_->publish((dir_ / "plan.json").string(), "runs/r1/plan.json").is_ok());
  EXPECT_EQ(*storage_->get("runs/r1/plan.json"), "{\"kind\": \"run\"}");
  Status missing = storage_->publish((dir_ / "nope").string(), "runs/r1/nope");
  EXPECT_FALSE(missing.is_ok());
  EXPECT_FALSE(*storage_->exists("runs/r1/nope"));
}

TEST_F(FolderStorageTest, PublishNewRefusesAnOccupiedDestinationAndLeavesItsBytesAlone) {
  const fs::path src = dir_ / "src";
  fs::create_directories(src);
  std::ofstream(src / "a.bin") << "first";
  ASSERT_TRUE(storage_->publish_new(src.string(), "snapshots/x/weights").is_ok());
  std::ofstream(src / "a.bin") << "second";
  Status again = storage_->publish_new(src.string(), "snapshots/x/weights");
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(*storage_->get("snapshots/x/weights/a.bin"), "first");
  // No temporary is left beside the destination.
  EXPECT_EQ(entries("snapshots/x"), std::vector<std::string>{"weights"});
  EXPECT_EQ(storage_->publish_new(src.string(), "../out").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainer::storage

// The TensorBoard writer (src/job/tensorboard): CRC-32C against the known vectors of RFC 3720
// (B.4), the record framing TensorBoard's reader checks, and a run's events written and copied
// to the artifacts. TensorBoard's own reader reads the files in tests/python/cli/test_cli_tensorboard.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "job/tensorboard/crc32c.h"
#include "job/tensorboard/event_file.h"
#include "job/tensorboard/run_board.h"
#include "storage/storage.h"

namespace trainer::job::tensorboard {
namespace {

namespace fs = std::filesystem;

uint32_t read_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  return v;
}

uint64_t read_u64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  return v;
}

// The records of `bytes`, each checked as TensorBoard's reader checks it.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 12u);
    const uint64_t length = read_u64(bytes, at);
    EXPECT_EQ(read_u32(bytes, at + 8), masked_crc32c(bytes.substr(at, 8)));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(read_u32(bytes, at + 12 + length), masked_crc32c(data));
    out.push_back(data);
    at += 12 + length + 4;
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

TEST(Crc32c, MatchesTheKnownVectors) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending += static_cast<char>(i);
    descending += static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending), 0x113FDB5Cu);
}

TEST(Crc32c, MaskedIsRotatedRightBy15PlusTheDelta) {
  EXPECT_EQ(masked_crc32c("123456789"), mask(0xE3069283u));
  EXPECT_EQ(masked_crc32c(""), 0xa282ead8u);
}

TEST(EventRecords, FrameTheLengthAndBothChecksums) {
  const std::string record = frame_record("abc");
  ASSERT_EQ(record.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(read_u64(record, 0), 3u);
  EXPECT_EQ(read_u32(record, 8), mask(crc32c(record.substr(0, 8))));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(read_u32(record, 15), mask(crc32c("abc")));
}

TEST(EventRecords, TheFileVersionEventEncodesWallTimeAndVersion) {
  const std::string e = file_version_event(1.5);
  // field 1 (double): key 0x09, 1.5 little-endian; field 3 (string): key 0x1a, length 13.
  std::string expected = "\x09";
  const double wall = 1.5;
  char bits[8];
  std::memcpy(bits, &wall, 8);
  expected.append(bits, 8);
  expected += "\x1a\x0d";
  expected += "brain.Event:2";
  EXPECT_EQ(e, expected);
}

TEST(EventRecords, TheFileNameIsTheOneTensorBoardLists) {
  EXPECT_EQ(event_file_name(1700000000.75, "node-1", 4242), "events.out.tfevents.1700000000.node-1.4242");
}

class RunBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tb-test-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    auto st = storage::make_folder_storage((root_ / "artifacts").string());
    ASSERT_TRUE(st.is_ok()) << st.status().describe();
    artifacts_ = std::move(*st);
  }
  void TearDown() override { fs::remove_all(root_); }

  RunBoardOptions options() {
    RunBoardOptions o;
    o.local_dir = (root_ / "local").string();
    o.host = "host";
    o.pid = 7;
    o.run_id = "run-1";
    o.artifacts = artifacts_.get();
    o.publish_every = std::chrono::seconds(3);
    o.clock = clock_;
    return o;
  }

  static protocol::Step step(int64_t n, double loss) {
    protocol::Step s;
    s.step = n;
    s.total_steps = 10;
    s.loss = loss;
    return s;
  }

  fs::path root_;
  std::unique_ptr<storage::Storage> artifacts_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

TEST_F(RunBoardTest, CopiesTheFileUnderTheRunsFolderEveryFewSecondsAndAtTheEnd) {
  auto board = RunBoard::open(options());
  ASSERT_TRUE(board.is_ok()) << board.status().describe();
  const std::string key = "runs/run-1/tensorboard/events.out.tfevents.1700000000.host.7";
  EXPECT_EQ((*board)->key(), key);
  (*board)->on_event(step(1, 2.5));  // the first copy
  ASSERT_TRUE(artifacts_->exists(key).value());
  const std::string first = artifacts_->get(key).value();
  (*board)->on_event(step(2, 2.25));  // within publish_every: not copied yet
  EXPECT_EQ(artifacts_->get(key).value(), first);
  clock_->advance(std::chrono::seconds(3));
  (*board)->on_event(step(3, 2.0));
  const std::string local = read_file((*board)->file_path());
  EXPECT_EQ(artifacts_->get(key).value(), local);
  // file version, session start, then one scalars event per step
  EXPECT_EQ(read_records(local).size(), 5u);
  (*board)->on_event(step(4, 1.5));
  (*board)->on_event(protocol::Completed{.steps = 4});  // the attempt's end: copied at once
  EXPECT_EQ(artifacts_->get(key).value(), read_file((*board)->file_path()));
  EXPECT_EQ((*board)->publish_failures(), 0);
}

TEST_F(RunBoardTest, WithoutArtifactsOnlyTheLocalFileIsWritten) {
  RunBoardOptions o = options();
  o.artifacts = nullptr;
  auto board = RunBoard::open(std::move(o));
  ASSERT_TRUE(board.is_ok());
  (*board)->on_event(step(1, 2.5));
  EXPECT_TRUE(fs::exists((*board)->file_path()));
  EXPECT_FALSE(artifacts_->exists("runs/run-1/tensorboard/" + (*board)->file_name()).value());
}

TEST_F(RunBoardTest, RefusesToOverwriteAnExistingFile) {
  auto first = RunBoard::open(options());
  ASSERT_TRUE(first.is_ok());
  auto second = RunBoard::open(options());  // same time, host and pid: the same name
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find("cannot create the event file"), std::string::npos)
      << second.status().message();
}

}  // namespace
}  // namespace trainer::job::tensorboard

// The S3 implementation of Storage against a real S3-compatible server (SeaweedFS's `weed`,
// started by tests/python/storage/test_s3_storage.py). Every test fails when the server's
// address and keys are not in the environment: this binary is only meaningful against one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "storage/s3_storage.h"

namespace trainer::storage {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

S3Options options(const std::string& prefix) {
  S3Options o;
  o.endpoint = env("TRAINER_TEST_S3_ENDPOINT");
  o.bucket = "trainer-tests";
  o.prefix = prefix;
  o.access_key = env("TRAINER_TEST_S3_ACCESS_KEY");
  o.secret_key = env("TRAINER_TEST_S3_SECRET_KEY");
  o.deadline_seconds = 30;
  return o;
}

std::unique_ptr<Storage> open(const std::string& prefix) {
  if (env("TRAINER_TEST_S3_ENDPOINT").empty()) {
    ADD_FAILURE() << "TRAINER_TEST_S3_ENDPOINT is not set: run this through tests/python/storage/test_s3_storage.py";
    return nullptr;
  }
  auto s = make_s3_storage(options(prefix));
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return s.is_ok() ? std::move(*s) : nullptr;
}

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("s3-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

TEST(S3Storage, PutGetListSizeRemove) {
  auto s = open("basic");
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->put("a/one.txt", "hello").is_ok());
  ASSERT_TRUE(s->put("a/two.bin", std::string("\0\1\2 bytes", 9)).is_ok());
  auto got = s->get("a/one.txt");
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, "hello");
  EXPECT_EQ(*s->get("a/two.bin"), std::string("\0\1\2 bytes", 9));
  auto listed = s->list("a");
  ASSERT_TRUE(listed.is_ok()) << listed.status().to_string();
  EXPECT_EQ(*listed, (std::vector<std::string>{"a/one.txt", "a/two.bin"}));
  EXPECT_EQ(*s->size("a/one.txt"), 5);
  EXPECT_TRUE(*s->exists("a/one.txt"));
  EXPECT_EQ(s->get("a/none").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(s->remove("a/one.txt").is_ok());
  EXPECT_FALSE(*s->exists("a/one.txt"));
  EXPECT_TRUE(s->remove("a/one.txt").is_ok());  // absent: ok
  EXPECT_EQ(s->put("../escape", "x").code(), StatusCode::kInvalidArgument);
}

TEST(S3Storage, FolderPublishNewIsAllOrConflictAndSameBytesSucceed) {
  auto s = open("folders");
  ASSERT_NE(s, nullptr);
  const fs::path src = temp_dir("folder");
  write(src / "manifest.json", "{\"files\": 2}");
  write(src / "weights" / "adapter.safetensors", random_bytes(100000, 1));
  ASSERT_TRUE(s->publish_new(src.string(), "snap/abc").is_ok());
  EXPECT_TRUE(*s->exists("snap/abc"));
  EXPECT_EQ(*s->list("snap/abc"),
            (std::vector<std::string>{"snap/abc/manifest.json", "snap/abc/weights/adapter.safetensors"}));
  EXPECT_EQ(*s->size("snap/abc"), 100000 + 12);
  // The same key again: refused whatever the bytes (the caller compares).
  EXPECT_EQ(s->publish_new(src.string(), "snap/abc").code(), StatusCode::kAlreadyExists);
  // A publication that died after its files (no commit object) is finished by a retry with the
  // same bytes; other bytes under an uncommitted key conflict and overwrite nothing.
  ASSERT_TRUE(s->put("snap/half/manifest.json", "{\"files\": 2}").is_ok());
  EXPECT_FALSE(*s->exists("snap/half"));
  ASSERT_TRUE(s->publish_new(src.string(), "snap/half").is_ok());
  EXPECT_TRUE(*s->exists("snap/half"));
  ASSERT_TRUE(s->put("snap/other/manifest.json", "different").is_ok());
  EXPECT_EQ(s->publish_new(src.string(), "snap/other").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(*s->get("snap/other/manifest.json"), "different");
  EXPECT_FALSE(*s->exists("snap/other"));
  // remove takes the whole folder.
  ASSERT_TRUE(s->remove("snap/abc").is_ok());
  EXPECT_FALSE(*s->exists("snap/abc"));
  EXPECT_TRUE(s->list("snap/abc")->empty());
  fs::remove_all(src);
}

TEST(S3Storage, LargeFilesGoUpInPartsAndComeBackWhole) {
  S3Options o = options("multipart");
  if (o.endpoint.empty()) FAIL() << "TRAINER_TEST_S3_ENDPOINT is not set";
  o.multipart_threshold = 6 << 20;
  o.part_size = 5 << 20;
  auto s = make_s3_storage(o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  const fs::path dir = temp_dir("large");
  const std::string big = random_bytes((12 << 20) + 12345, 2);  // three parts
  write(dir / "big.bin", big);
  ASSERT_TRUE((*s)->publish((dir / "big.bin").string(), "big/one.bin").is_ok());
  auto back = (*s)->get("big/one.bin");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_TRUE(*back == big) << "the object differs from the file (" << back->size() << " bytes back)";
  // Conditional: publishing the same bytes again is success, other bytes a conflict.
  ASSERT_TRUE((*s)->publish_new((dir / "big.bin").string(), "big/two.bin").is_ok());
  EXPECT_TRUE((*s)->publish_new((dir / "big.bin").string(), "big/two.bin").is_ok());
  write(dir / "other.bin", random_bytes((7 << 20), 3));
  EXPECT_EQ((*s)->publish_new((dir / "other.bin").string(), "big/two.bin").code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(*(*s)->get("big/two.bin") == big);
  fs::remove_all(dir);
}

TEST(S3Storage, AWrongSecretIsRefusedByName) {
  S3Options o = options("wrong");
  if (o.endpoint.empty()) FAIL() << "TRAINER_TEST_S3_ENDPOINT is not set";
  o.secret_key = "not-the-secret";
  auto s = make_s3_storage(o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("refused the credentials"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("HTTP 403"), std::string::npos) << s.status().message();
}

TEST(S3Storage, AServerThatIsNotThereFailsWithinTheDeadline) {
  S3Options o = options("gone");
  o.endpoint = "http://127.0.0.1:9";  // discard port: nothing listens
  o.access_key = o.secret_key = "x";
  o.deadline_seconds = 2;
  auto s = make_s3_storage(o);  // retried with backoff until the 2 s deadline, then given up
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status().to_string();
  EXPECT_NE(s.status().message().find("did not answer"), std::string::npos) << s.status().message();
}

TEST(S3Storage, OptionsFromAnUriNameWhatIsMissing) {
  ::unsetenv("TRAINER_S3_ENDPOINT");
  auto missing = s3_options_from_uri("s3://bucket-x/pre/fix");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().to_string().find("TRAINER_S3_ENDPOINT"), std::string::npos);
  ::setenv("TRAINER_S3_ENDPOINT", "http://127.0.0.1:1", 1);
  ::setenv("AWS_ACCESS_KEY_ID", "k", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
  auto ok = s3_options_from_uri("s3://bucket-x/pre/fix");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->bucket, "bucket-x");
  EXPECT_EQ(ok->prefix, "pre/fix");
  EXPECT_FALSE(s3_options_from_uri("gs://x").is_ok());
}

}  // namespace
}  // namespace trainer::storage

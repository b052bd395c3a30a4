// A job's inputs in the artifact store: the keys trainerd stages them under, read back by the job.
#include "protocol/inputs.h"

#include <gtest/gtest.h>

#include <string>

namespace trainer::protocol {
namespace {

const std::string kSha(64, 'a');

TEST(InputKeys, AModelFolderAndADatasetFileAreNamedByTheirContentHash) {
  EXPECT_EQ(model_input_key(kSha), "inputs/models/" + kSha);
  EXPECT_EQ(dataset_input_key(kSha), "inputs/datasets/" + kSha + ".jsonl");
}

TEST(InputKeys, ParsingGivesBackTheKindAndTheHash) {
  auto model = parse_input_key(model_input_key(kSha), "baseModel");
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_TRUE(model->folder);
  EXPECT_EQ(model->sha, kSha);
  auto dataset = parse_input_key(dataset_input_key(kSha), "config.dataset");
  ASSERT_TRUE(dataset.is_ok()) << dataset.status().to_string();
  EXPECT_FALSE(dataset->folder);
  EXPECT_EQ(dataset->sha, kSha);
}

TEST(InputKeys, AKeyOutsideTheInputsOrWithoutAHashIsRefusedNamingTheField) {
  auto other = parse_input_key("snapshots/abc/weights", "baseModel");
  ASSERT_FALSE(other.is_ok());
  EXPECT_EQ(other.status().field(), "baseModel");
  EXPECT_NE(other.status().message().find("'snapshots/abc/weights' is not an input"), std::string::npos)
      << other.status().message();
  auto short_hash = parse_input_key("inputs/datasets/abc.jsonl", "config.dataset");
  ASSERT_FALSE(short_hash.is_ok());
  EXPECT_EQ(short_hash.status().field(), "config.dataset");
  EXPECT_NE(short_hash.status().message().find("does not name a content hash"), std::string::npos);
  EXPECT_FALSE(parse_input_key("inputs/models/" + std::string(64, 'A'), "baseModel").is_ok());  // upper case
  EXPECT_FALSE(parse_input_key("inputs/models/" + kSha + "/config.json", "baseModel").is_ok());
}

}  // namespace
}  // namespace trainer::protocol

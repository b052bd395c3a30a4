// Safetensors reading and writing, model folder configs, learning-rate schedules: the engine's
// torch-free parts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "../temp_dir.h"
#include "engine/optim/schedule.h"

namespace trainer::engine {
namespace {
namespace fs = std::filesystem;

using test_support::TempDir;

void write(const fs::path& p, const std::string& bytes) { test_support::write_file(p, bytes); }

TEST(Safetensors, WrittenFileReadsBackWithTheSameTensorsAndMetadata) {
  TempDir dir{"engine-formats"};
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f};
  std::vector<int64_t> b = {7, 8, 9};
  std::string bytes = model::serialize_safetensors(
      {{"z.weight", "F32", {2, 3}, a.data(), a.size() * sizeof(float)}, {"a.ids", "I64", {3}, b.data(), b.size() * 8}},
      {{"format", "pt"}});
  write(dir.path() / "t.safetensors", bytes);
  auto file = model::SafetensorsFile::open((dir.path() / "t.safetensors").string());
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  const model::TensorView* z = (*file)->find("z.weight");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->dtype, "F32");
  EXPECT_EQ(z->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(z->data, a.data(), z->nbytes), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z->data) % 8, 0u);
  const model::TensorView* ids = (*file)->find("a.ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(std::memcmp(ids->data, b.data(), 24), 0);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
}

TEST(Safetensors, TruncatedFileNamesTheTensorAndField) {
  TempDir dir{"engine-formats"};
  std::vector<float> a(16, 1.0f);
  std::string bytes = model::serialize_safetensors({{"w", "F32", {16}, a.data(), 64}}, {});
  bytes.resize(bytes.size() - 10);
  const std::string path = (dir.path() / "cut.safetensors").string();
  write(path, bytes);
  auto file = model::SafetensorsFile::open(path);
  ASSERT_FALSE(file.is_ok());
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(file.status().message().find(path + ": tensor 'w': field 'data_offsets'"), std::string::npos)
      << file.status().message();
}

TEST(Safetensors, GarbageIsNotASafetensorsFile) {
  TempDir dir{"engine-formats"};
  const std::string path = (dir.path() / "junk.safetensors").string();
  write(path, "abc");
  auto file = model::SafetensorsFile::open(path);
  ASSERT_FALSE(file.is_ok());
  EXPECT_NE(file.status().message().find("not a safetensors file"), std::string::npos);
  auto missing = model::SafetensorsFile::open((dir.path() / "none.safetensors").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

const char* kQwen3Config = R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 100, "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true})";

TEST(ModelConfig, ReadsQwen3WithPerHeadNormsAndTiedHead) {
  TempDir dir{"engine-formats"};
  write(dir.path() / "config.json", kQwen3Config);
  auto c = model::read_model_config(dir.path().string());
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->architecture, model::Architecture::kQwen3);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
}

TEST(ModelConfig, ReadsLlama3RopeScalingFromEitherSpelling) {
  TempDir dir{"engine-formats"};
  for (const char* field : {"rope_scaling", "rope_parameters"}) {
    write(dir.path() / "config.json",
          std::string(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, ")") +
              field + R"(": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_theta": 500000.0}})");
    auto c = model::read_model_config(dir.path().string());
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ(c->rope.type, "llama3");
    EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
    EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
    EXPECT_EQ(c->head_dim, 16);
    EXPECT_FALSE(c->attention_bias);
  }
}

TEST(ModelConfig, UnknownArchitectureNamesTheFileAndField) {
  TempDir dir{"engine-formats"};
  write(dir.path() / "config.json", R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10})");
  auto c = model::read_model_config(dir.path().string());
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), (dir.path() / "config.json").string() +
                                      ": field 'architectures': unknown architecture 'GPT2LMHeadModel' (supported: "
                                      "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM)");
}

TEST(ModelConfig, MissingOrMalformedFieldsAreNamed) {
  TempDir dir{"engine-formats"};
  write(dir.path() / "config.json", R"({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 10, "hidden_size": 8})");
  auto c = model::read_model_config(dir.path().string());
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().message(), (dir.path() / "config.json").string() + ": field 'intermediate_size' is missing");
  write(dir.path() / "config.json", "{not json");
  c = model::read_model_config(dir.path().string());
  EXPECT_EQ(c.status().message(), (dir.path() / "config.json").string() + ": not a JSON object");
  auto none = model::read_model_config((dir.path() / "nowhere").string());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
}

TEST(ModelConfig, MissingWeightsAndMissingShardsAreNamed) {
  TempDir dir{"engine-formats"};
  auto w = model::model_weight_files(dir.path().string());
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("neither model.safetensors nor model.safetensors.index.json"), std::string::npos);
  write(dir.path() / "model.safetensors.index.json",
        R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  write(dir.path() / "model-00001-of-00002.safetensors", "");
  w = model::model_weight_files(dir.path().string());
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("model-00002-of-00002.safetensors, which does not exist"), std::string::npos)
      << w.status().message();
}

// Reference values: transformers' get_*_schedule_with_warmup(num_warmup_steps=2,
// num_training_steps=10) lambdas at steps 0..10.
TEST(LearningRateSchedule, MatchesTransformersWithWarmup) {
  const double linear[] = {0.0, 0.5, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0};
  for (int s = 0; s <= 10; ++s) {
    EXPECT_NEAR(optim::lr_multiplier(plan::Schedule::kLinear, s, 2, 10), linear[s], 1e-12) << s;
    const double progress = (s - 2) / 8.0;
    const double cosine = s < 2 ? s / 2.0 : 0.5 * (1 + std::cos(M_PI * progress));
    EXPECT_NEAR(optim::lr_multiplier(plan::Schedule::kCosine, s, 2, 10), cosine, 1e-12) << s;
    EXPECT_NEAR(optim::lr_multiplier(plan::Schedule::kConstant, s, 2, 10), s < 2 ? s / 2.0 : 1.0, 1e-12) << s;
  }
  EXPECT_DOUBLE_EQ(optim::lr_multiplier(plan::Schedule::kLinear, 0, 0, 10), 1.0);
}

TEST(LearningRateSchedule, WarmupRatioRoundsUpAsTransformers) {
  plan::OptimizerSettings s;
  s.warmupRatio = 0.1;
  EXPECT_EQ(optim::warmup_steps(s, 25), 3);
  s.warmupSteps = 5;
  EXPECT_EQ(optim::warmup_steps(s, 25), 5);
}

}  // namespace
}  // namespace trainer::engine

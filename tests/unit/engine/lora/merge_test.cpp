// engine::merge_adapter (src/engine/lora/merge.cpp): a PEFT LoRA folder merged into a base model
// folder's safetensors, as PEFT's merge_and_unload() computes it, written whole or not at all.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/model/safetensors.h"
#include "../temp_dir.h"

namespace trainer::engine {
namespace {
namespace fs = std::filesystem;

using test_support::TempDir;

void write(const fs::path& p, const std::string& bytes) { test_support::write_file(p, bytes); }

model::TensorToWrite entry(const std::string& name, const at::Tensor& t, const std::string& dtype) {
  return {name, dtype, t.sizes().vec(), t.data_ptr(), static_cast<size_t>(t.nbytes())};
}

at::Tensor read(const model::SafetensorsFile& file, const std::string& name) {
  const model::TensorView* v = file.find(name);
  EXPECT_NE(v, nullptr) << name;
  if (v == nullptr) return {};
  const at::ScalarType st = v->dtype == "BF16" ? at::kBFloat16 : at::kFloat;
  return at::from_blob(const_cast<void*>(v->data), v->shape, at::TensorOptions().dtype(st)).clone();
}

// A base folder: q_proj in F32, v_proj in BF16, an embedding; config and tokenizer files, and a
// stray .bin that a merged folder must not carry. An adapter of rank 2 on q_proj and v_proj.
struct Folders {
  TempDir tmp{"engine-merge"};
  fs::path base = tmp.path() / "base";
  fs::path adapter = tmp.path() / "adapter";
  at::Tensor q = at::randn({4, 3});
  at::Tensor v = at::randn({4, 3}).to(at::kBFloat16);
  at::Tensor embed = at::randn({5, 3});
  at::Tensor qa = at::randn({2, 3}), qb = at::randn({4, 2}), va = at::randn({2, 3}), vb = at::randn({4, 2});

  explicit Folders(const nlohmann::json& config_extra = nlohmann::json::object()) {
    fs::create_directories(base);
    fs::create_directories(adapter);
    write(base / "model.safetensors",
          model::serialize_safetensors({entry("model.layers.0.self_attn.q_proj.weight", q, "F32"),
                                        entry("model.layers.0.self_attn.v_proj.weight", v, "BF16"),
                                        entry("model.embed_tokens.weight", embed, "F32")},
                                       {{"format", "pt"}}));
    write(base / "config.json", R"({"model_type": "qwen3"})");
    write(base / "tokenizer.json", R"({"model": {}})");
    write(base / "pytorch_model.bin", "stale");
    const std::string prefix = "base_model.model.model.layers.0.self_attn.";
    write(adapter / "adapter_model.safetensors",
          model::serialize_safetensors({entry(prefix + "q_proj.lora_A.weight", qa, "F32"),
                                        entry(prefix + "q_proj.lora_B.weight", qb, "F32"),
                                        entry(prefix + "v_proj.lora_A.weight", va, "F32"),
                                        entry(prefix + "v_proj.lora_B.weight", vb, "F32")},
                                       {{"format", "pt"}}));
    nlohmann::json config = {{"peft_type", "LORA"}, {"r", 2}, {"lora_alpha", 8}, {"bias", "none"},
                             {"target_modules", {"q_proj", "v_proj"}}};
    config.update(config_extra);
    write(adapter / "adapter_config.json", config.dump());
  }
};

TEST(MergeAdapter, WritesEveryBaseTensorWithTheAdaptedLinearsMergedAsPeftDoes) {
  Folders f;
  const fs::path out = f.tmp.path() / "merged";
  auto result = merge_adapter({f.base.string(), f.adapter.string(), out.string()});
  ASSERT_TRUE(result.is_ok()) << result.status().message();
  EXPECT_EQ(result->merged_modules, 2);
  EXPECT_EQ(result->files, (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));

  auto file = model::SafetensorsFile::open((out / "model.safetensors").string());
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  EXPECT_EQ((*file)->tensors().size(), 3u);
  const double scale = 8.0 / 2;  // lora_alpha / r
  EXPECT_TRUE(at::equal(read(**file, "model.layers.0.self_attn.q_proj.weight"), f.q + at::matmul(f.qb, f.qa) * scale));
  // A BF16 weight stays BF16: the sum in fp32, rounded once.
  EXPECT_EQ((*file)->find("model.layers.0.self_attn.v_proj.weight")->dtype, "BF16");
  EXPECT_TRUE(at::equal(read(**file, "model.layers.0.self_attn.v_proj.weight"),
                        (f.v.to(at::kFloat) + at::matmul(f.vb, f.va) * scale).to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(read(**file, "model.embed_tokens.weight"), f.embed));
  std::ifstream config(out / "config.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(config), {}), R"({"model_type": "qwen3"})");
}

TEST(MergeAdapter, ScalesByAlphaOverTheSquareRootOfTheRankWithRsLora) {
  Folders f(nlohmann::json{{"use_rslora", true}});
  const fs::path out = f.tmp.path() / "merged";
  ASSERT_TRUE(merge_adapter({f.base.string(), f.adapter.string(), out.string()}).is_ok());
  auto file = model::SafetensorsFile::open((out / "model.safetensors").string());
  ASSERT_TRUE(file.is_ok());
  EXPECT_TRUE(at::equal(read(**file, "model.layers.0.self_attn.q_proj.weight"),
                        f.q + at::matmul(f.qb, f.qa) * (8.0 / std::sqrt(2.0))));
}

TEST(MergeAdapter, RefusesAnExistingOutputFolder) {
  Folders f;
  const fs::path out = f.tmp.path() / "merged";
  fs::create_directories(out);
  auto result = merge_adapter({f.base.string(), f.adapter.string(), out.string()});
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(result.status().message(), "output: " + out.string() + " already exists; a merge writes a new folder");
}

TEST(MergeAdapter, AnAdapterThatDoesNotFitTheBaseNamesTheTensorAndLeavesNothing) {
  Folders f(nlohmann::json{{"r", 3}});
  const fs::path out = f.tmp.path() / "merged";
  auto result = merge_adapter({f.base.string(), f.adapter.string(), out.string()});
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("base_model.model.model.layers.0.self_attn.q_proj.lora_A/B.weight' have "
                                           "shapes [2, 3] and [4, 2], which do not fit r=3"),
            std::string::npos)
      << result.status().message();
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(std::distance(fs::directory_iterator(f.tmp.path()), fs::directory_iterator()), 2);  // base, adapter
}

TEST(MergeAdapter, RefusesModulesSavedWholeByField) {
  Folders f(nlohmann::json{{"modules_to_save", {"lm_head"}}});
  auto result = merge_adapter({f.base.string(), f.adapter.string(), (f.tmp.path() / "merged").string()});
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().message(), (f.adapter / "adapter_config.json").string() +
                                           ": field 'modules_to_save': modules saved whole cannot be merged into the base");
}

}  // namespace
}  // namespace trainer::engine

// The import checks of a PEFT LoRA folder against a base model folder, on small safetensors
// files written here: every refusal names the file, tensor or setting at fault.
#include "service/adapter_check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace trainer::service {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A safetensors file of F32 zeros with these shapes; `extra_header` is merged into the header.
void write_safetensors(const fs::path& path, const json& shapes, const json& extra_header = json::object()) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, shape] : shapes.items()) {
    uint64_t n = 4;
    for (const auto& d : shape) n *= d.get<uint64_t>();
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  header.update(extra_header);
  const std::string text = header.dump();
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
  out << text << std::string(offset, '\0');
}

class AdapterCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("adapter_check_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_ / "base");
    fs::create_directories(root_ / "adapter");
    // A two-projection base model: q_proj 64 -> 64, v_proj 64 -> 32.
    write_safetensors(root_ / "base" / "model.safetensors",
                      {{"model.layers.0.self_attn.q_proj.weight", {64, 64}},
                       {"model.layers.0.self_attn.v_proj.weight", {32, 64}},
                       {"model.norm.weight", {64}}});
    config_ = {{"peft_type", "LORA"}, {"r", 4}, {"lora_alpha", 8}, {"target_modules", {"q_proj", "v_proj"}},
               {"base_model_name_or_path", "tiny"}};
    tensors_ = {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {4, 64}},
                {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", {64, 4}},
                {"base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", {4, 64}},
                {"base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight", {32, 4}}};
  }
  void TearDown() override { fs::remove_all(root_); }

  Result<AdapterInfo> check(int max_rank = 64) {
    std::ofstream(root_ / "adapter" / kAdapterConfigFile) << config_.dump();
    write_safetensors(root_ / "adapter" / kAdapterWeightsFile, tensors_);
    return check_peft_adapter((root_ / "adapter").string(), (root_ / "base").string(), max_rank, "ref");
  }
  std::string refusal(int max_rank = 64) {
    auto r = check(max_rank);
    EXPECT_FALSE(r.is_ok());
    if (r.is_ok()) return "";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().field(), "ref");
    return r.status().message();
  }

  fs::path root_;
  json config_;
  json tensors_;
};

TEST_F(AdapterCheck, AcceptsALoraAdapterThatFitsTheBaseModel) {
  auto r = check();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->rank, 4);
  EXPECT_EQ(r->lora_tensors, 4);
  EXPECT_EQ(r->target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(r->base_model_name_or_path, "tiny");
}

TEST_F(AdapterCheck, RefusesEachBrokenSettingByName) {
  config_["peft_type"] = "PREFIX_TUNING";
  EXPECT_NE(refusal().find("peft_type is \"PREFIX_TUNING\""), std::string::npos);
  config_["peft_type"] = "LORA";
  config_["modules_to_save"] = {"lm_head"};
  EXPECT_NE(refusal().find("modules_to_save is [\"lm_head\"]"), std::string::npos);
  config_["modules_to_save"] = nullptr;
  EXPECT_TRUE(check().is_ok());  // null means none
  config_["use_dora"] = true;
  EXPECT_NE(refusal().find("DoRA"), std::string::npos);
  config_["use_dora"] = false;
  EXPECT_NE(refusal(2).find("rank r=4 is above the deployment's maximum 2 (limits.maxAdapterRank)"), std::string::npos);
  config_["target_modules"] = {"q_proj", "gate_proj"};
  EXPECT_NE(refusal().find("target module 'gate_proj' is not a module of the base model (its linear modules: q_proj, "
                           "v_proj)"),
            std::string::npos);
}

TEST_F(AdapterCheck, RefusesTensorsThatAreNotLoraFactorsOfTheBaseModel) {
  tensors_["base_model.model.lm_head.weight"] = {8, 64};
  EXPECT_NE(refusal().find("tensor 'base_model.model.lm_head.weight' is not a LoRA factor"), std::string::npos);
  tensors_.erase("base_model.model.lm_head.weight");
  tensors_.erase("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight");
  EXPECT_NE(refusal().find("tensor 'base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight' is missing"),
            std::string::npos);
  tensors_["base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"] = {64, 4};
  EXPECT_NE(refusal().find("has shape [64, 4], but r=4 on the base model's model.layers.0.self_attn.v_proj [32, 64] "
                           "needs [32, 4]"),
            std::string::npos);
  tensors_["base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"] = {32, 4};
  tensors_["base_model.model.model.layers.9.self_attn.q_proj.lora_A.weight"] = {4, 64};
  EXPECT_NE(refusal().find("adapts 'model.layers.9.self_attn.q_proj', which the base model does not have"),
            std::string::npos);
}

TEST_F(AdapterCheck, ReadsOnlyWellFormedSafetensorsHeadersThatFitTheirFile) {
  const fs::path path = root_ / "x.safetensors";
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_NE(safetensors_shapes(path.string(), "f").status().message().find("shorter than its 8-byte header length"),
            std::string::npos);
  std::string huge(8, '\xff');
  std::ofstream(path, std::ios::binary) << huge << "{}";
  EXPECT_NE(safetensors_shapes(path.string(), "f").status().message().find("does not fit the file"), std::string::npos);
  write_safetensors(path, {{"t", {2, 2}}}, {{"u", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 400}}}}});
  EXPECT_NE(safetensors_shapes(path.string(), "f").status().message().find("tensor 'u' has data offsets [0,400] outside"),
            std::string::npos);
  write_safetensors(path, {{"t", {2, 2}}}, {{"__metadata__", {{"format", "pt"}}}});
  auto ok = safetensors_shapes(path.string(), "f");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->at("t"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ok->size(), 1u);
}

}  // namespace
}  // namespace trainer::service

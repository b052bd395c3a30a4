// Useful FLOPs of a LoRA update (src/engine/train/useful_flops.h) against hand counts of a tiny
// model, written out part by part.
#include <gtest/gtest.h>

#include "engine/engine_error.h"
#include "engine/train/useful_flops.h"

namespace trainer::engine::train {
namespace {

// 2 layers, hidden 8, 2 query heads and 1 key-value head of head_dim 4, intermediate 16,
// vocabulary 32. Per layer, the projections (in x out):
//   q 8x8 = 64, k 8x4 = 32, v 8x4 = 32, o 8x8 = 64, gate 8x16 = 128, up 8x16 = 128, down 16x8 = 128
//   = 576 per layer, 1152 for both layers; the head 8 x 32 = 256.
model::ModelConfig tiny() {
  model::ModelConfig c;
  c.num_hidden_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.intermediate_size = 16;
  c.vocab_size = 32;
  return c;
}

plan::LoraSettings lora(int rank, std::vector<std::string> targets) {
  plan::LoraSettings l;
  l.rank = rank;
  l.targetModules = std::move(targets);
  return l;
}

TEST(UsefulFlops, CountsTheParametersOfTheBaseAndTheAdapters) {
  EXPECT_EQ(base_linear_parameters(tiny()), 1152);
  // The specification's count is the same plus the head.
  EXPECT_EQ(tiny().linear_parameters(), 1152 + 256);
  // r 2 on q (2 x (8 + 8) = 32) and v (2 x (8 + 4) = 24): 56 per layer.
  EXPECT_EQ(adapter_parameters(tiny(), lora(2, {"q_proj", "v_proj"})), 112);
  // A target named twice is adapted once.
  EXPECT_EQ(adapter_parameters(tiny(), lora(2, {"v_proj", "q_proj", "q_proj"})), 112);
}

TEST(UsefulFlops, AnSftStepMatchesItsHandCount) {
  // Two sequences of 3 and 5 real tokens (8 tokens), 5 of them labelled: the head runs at 5
  // positions. LoRA r 2 on q and v: 112 adapter parameters.
  PassShape pass{.sequence_lengths = {3, 5}, .head_positions = 5};
  const FlopsParts f = lora_update_flops(tiny(), lora(2, {"q_proj", "v_proj"}), pass);
  // Frozen base: forward 2 + input gradient 2 per parameter and token: 4 x 1152 x 8.
  EXPECT_DOUBLE_EQ(f.base, 36864);
  // Adapters: forward, input gradient and weight gradient, 2 each: 6 x 112 x 8.
  EXPECT_DOUBLE_EQ(f.adapters, 5376);
  // Attention: query-key pairs 1+2+3 = 6 and 1+2+3+4+5 = 15, 21 in all. Per pair and layer, QK^T
  // and AV over 2 heads x 4 dims: 2 x 2 x 8 = 32 FLOPs; 2 layers: 64; forward 21 x 64 = 1344;
  // with the backward (twice the forward): 3 x 1344.
  EXPECT_DOUBLE_EQ(f.attention, 4032);
  // Head: forward 2 + input gradient 2 per parameter at the 5 labelled positions: 4 x 256 x 5.
  EXPECT_DOUBLE_EQ(f.head, 5120);
  EXPECT_DOUBLE_EQ(f.total(), 36864 + 5376 + 4032 + 5120);
}

TEST(UsefulFlops, AnRlStepMatchesItsHandCount) {
  // Two rollouts: prompts of 3 and 2 real tokens, completions of 2 and 4: sequences of 5 and 6
  // (11 tokens), the head at the 6 completion positions. LoRA r 2 on all 7 projections:
  // q 2x(8+8) = 32, k 2x(8+4) = 24, v 24, o 32, gate 2x(8+16) = 48, up 48, down 48 = 256 per
  // layer, 512 in all.
  const PassShape pass = rl_update_shape({3, 2}, {2, 4});
  EXPECT_EQ(pass.sequence_lengths, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(pass.head_positions, 6);
  const plan::LoraSettings all = lora(2, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  EXPECT_EQ(adapter_parameters(tiny(), all), 512);
  const FlopsParts f = lora_update_flops(tiny(), all, pass);
  EXPECT_DOUBLE_EQ(f.base, 50688);      // 4 x 1152 x 11
  EXPECT_DOUBLE_EQ(f.adapters, 33792);  // 6 x 512 x 11
  // Query-key pairs 15 + 21 = 36; forward 36 x 64 = 2304; with the backward 3 x 2304.
  EXPECT_DOUBLE_EQ(f.attention, 6912);
  EXPECT_DOUBLE_EQ(f.head, 6144);  // 4 x 256 x 6
  EXPECT_DOUBLE_EQ(f.total(), 50688 + 33792 + 6912 + 6144);
}

TEST(UsefulFlops, PackedSequencesAttendOnlyWithinThemselves) {
  // A packed row of 3 + 5 tokens is two sequences (21 query-key pairs), not one of 8 (36).
  const plan::LoraSettings none = lora(2, {});
  const FlopsParts apart = lora_update_flops(tiny(), none, {.sequence_lengths = {3, 5}});
  const FlopsParts joined = lora_update_flops(tiny(), none, {.sequence_lengths = {8}});
  EXPECT_DOUBLE_EQ(apart.attention, 3 * 21 * 64);
  EXPECT_DOUBLE_EQ(joined.attention, 3 * 36 * 64);
  EXPECT_DOUBLE_EQ(apart.base, joined.base);
  EXPECT_DOUBLE_EQ(apart.head, 0);
}

TEST(UsefulFlops, AnUnknownTargetIsNamed) {
  try {
    adapter_parameters(tiny(), lora(2, {"q_proj", "lm_head"}));
    FAIL() << "lm_head was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'lm_head'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainer::engine::train

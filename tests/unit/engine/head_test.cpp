// The head's fused log-probabilities (CausalLM::token_logps, src/engine/model/head.cpp) against
// the plain autograd composition log_softmax(linear(h, W) / T).gather(t): values, entropy, argmax
// and the hidden states' gradient, across chunk boundaries (the real 151,669-token vocabulary:
// six rows a chunk on the CPU) and at temperatures 1 and 0.7; the no-grad path agrees with the
// grad path; a second backward through the same node is refused by name. The bf16-screened greedy
// pick (model/greedy_head.h) against the float64 argmax, on rows where bf16's own argmax is wrong.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <fstream>
#include <limits>
#include <string>

#include "engine/model/greedy_head.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"
#include "temp_dir.h"

namespace trainer::engine::model {
namespace {

using test_support::TempDir;

constexpr int64_t kVocab = 151669;
constexpr int64_t kHidden = 16;

// A one-layer Qwen3 folder with random weights and an untied head; returns the head.
at::Tensor write_model(const std::filesystem::path& dir) {
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": )" << kVocab
                                     << R"(, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "rms_norm_eps": 1e-6,
      "rope_theta": 10000.0, "tie_word_embeddings": false})";
  at::manual_seed(11);
  std::vector<std::pair<std::string, at::Tensor>> named = {
      {"model.embed_tokens.weight", at::randn({kVocab, kHidden})},
      {"lm_head.weight", at::randn({kVocab, kHidden}) * 0.8},
      {"model.norm.weight", at::ones({kHidden})},
      {"model.layers.0.input_layernorm.weight", at::ones({kHidden})},
      {"model.layers.0.post_attention_layernorm.weight", at::ones({kHidden})},
      {"model.layers.0.self_attn.q_proj.weight", at::randn({16, kHidden})},
      {"model.layers.0.self_attn.k_proj.weight", at::randn({8, kHidden})},
      {"model.layers.0.self_attn.v_proj.weight", at::randn({8, kHidden})},
      {"model.layers.0.self_attn.o_proj.weight", at::randn({kHidden, 16})},
      {"model.layers.0.self_attn.q_norm.weight", at::ones({8})},
      {"model.layers.0.self_attn.k_norm.weight", at::ones({8})},
      {"model.layers.0.mlp.gate_proj.weight", at::randn({32, kHidden})},
      {"model.layers.0.mlp.up_proj.weight", at::randn({32, kHidden})},
      {"model.layers.0.mlp.down_proj.weight", at::randn({kHidden, 32})},
  };
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, t] : named) {
    tensors.push_back({name, "F32", t.sizes().vec(), t.data_ptr(), static_cast<size_t>(t.nbytes())});
  }
  std::ofstream(dir / "model.safetensors", std::ios::binary) << serialize_safetensors(tensors, {{"format", "pt"}});
  return named[1].second;
}

class HeadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("engine-head");
    head_ = new at::Tensor(write_model(dir_->path()));
    model_ = CausalLM::load(dir_->path().string(), at::kFloat, at::Device(at::kCPU)).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete head_;
    delete dir_;
  }
  static TempDir* dir_;
  static at::Tensor* head_;
  static CausalLM* model_;
};
TempDir* HeadTest::dir_ = nullptr;
at::Tensor* HeadTest::head_ = nullptr;
CausalLM* HeadTest::model_ = nullptr;

TEST_F(HeadTest, LogProbsEntropyArgmaxAndGradientEqualThePlainComposition) {
  for (double temperature : {1.0, 0.7}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    // 2 x 7 = 14 rows: chunks of 6, 6 and 2.
    at::Tensor base = at::randn({2, 7, kHidden});
    at::Tensor targets = at::randint(kVocab, {2, 7}, at::kLong);
    at::Tensor weights = at::randn({2, 7});  // an arbitrary upstream gradient per token

    at::Tensor h_ref = base.clone().set_requires_grad(true);
    at::Tensor logp_all = at::log_softmax(at::linear(h_ref, *head_) / temperature, -1);
    at::Tensor want = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
    (want * weights).sum().backward();
    at::Tensor want_entropy = -(logp_all.exp() * logp_all).sum(-1).detach();
    at::Tensor want_argmax = logp_all.argmax(-1);

    at::Tensor h = base.clone().set_requires_grad(true);
    TokenStats stats;
    stats.want_entropy = true;
    stats.want_argmax = true;
    at::Tensor got = model_->token_logps(h, targets, temperature, &stats);
    ASSERT_EQ(got.sizes(), targets.sizes());
    EXPECT_TRUE(at::allclose(got, want.detach(), 1e-5, 1e-5)) << (got - want).abs().max().item<double>();
    EXPECT_TRUE(at::allclose(stats.entropy, want_entropy, 1e-5, 1e-5));
    EXPECT_TRUE(at::equal(stats.argmax, want_argmax));
    EXPECT_FALSE(stats.entropy.requires_grad());
    (got * weights).sum().backward();
    ASSERT_TRUE(h.grad().defined());
    EXPECT_TRUE(at::allclose(h.grad(), h_ref.grad(), 1e-4, 1e-6))
        << (h.grad() - h_ref.grad()).abs().max().item<double>();

    at::NoGradGuard no_grad;
    TokenStats plain;
    plain.want_entropy = true;
    at::Tensor again = model_->token_logps(base, targets, temperature, &plain);
    EXPECT_TRUE(at::equal(again, got.detach()));
    EXPECT_TRUE(at::equal(plain.entropy, stats.entropy));
  }
}

TEST_F(HeadTest, ASecondBackwardThroughTheSameNodeIsRefused) {
  at::Tensor h = at::randn({3, kHidden}).set_requires_grad(true);
  at::Tensor lp = model_->token_logps(h, at::randint(kVocab, {3}, at::kLong));
  lp.sum().backward({}, /*retain_graph=*/true);
  try {
    lp.sum().backward();
    FAIL() << "the second backward went through";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("differentiated twice"), std::string::npos) << e.what();
  }
}

TEST_F(HeadTest, ANonPositiveTemperatureIsRefused) {
  at::Tensor h = at::randn({2, kHidden});
  EXPECT_THROW(model_->token_logps(h, at::zeros({2}, at::kLong), 0.0), std::exception);
}

TEST(RowArgmax, EqualsATenArgmaxWithTiesNegativeZeroInfinityAndNaN) {
  at::Tensor x = at::randn({7, kVocab});
  x[1].fill_(2.5);                                          // all equal: the first index
  x[2][10] = 9.0;                                           // a tie: the first of the two
  x[2][20000] = 9.0;
  x[3].fill_(-std::numeric_limits<float>::infinity());      // nothing but -inf
  x[4][5] = -0.0;                                           // -0 then +0 as the maximum
  x[4].clamp_max_(0.0);
  x[4][7] = 0.0;
  x[5][123] = std::numeric_limits<float>::infinity();
  x[6][77] = std::numeric_limits<float>::quiet_NaN();       // NaN wins, as in at::argmax
  const at::Tensor got = row_argmax(x);
  EXPECT_TRUE(at::equal(got, x.argmax(-1))) << got << x.argmax(-1);
  EXPECT_EQ(got[2].item<int64_t>(), 10);
  EXPECT_EQ(got[6].item<int64_t>(), 77);
  // A non-contiguous view and a single row.
  const at::Tensor view = x.narrow(1, 0, 1000).t().contiguous().t();
  EXPECT_TRUE(at::equal(row_argmax(view), view.argmax(-1)));
  EXPECT_TRUE(at::equal(row_argmax(x.narrow(0, 5, 1)), x.narrow(0, 5, 1).argmax(-1)));
}

// The float64 argmax of hidden [N, H] through `head`, a few rows at a time.
at::Tensor exact_argmax(const at::Tensor& hidden, const at::Tensor& head) {
  std::vector<at::Tensor> out;
  const at::Tensor w = head.to(at::kDouble);
  for (int64_t r = 0; r < hidden.size(0); r += 64) {
    out.push_back(at::mm(hidden.narrow(0, r, std::min<int64_t>(64, hidden.size(0) - r)).to(at::kDouble), w.t()).argmax(1));
  }
  return at::cat(out);
}

TEST_F(HeadTest, GreedyPicksAreTheExactArgmaxWhereBf16sOwnArgmaxIsWrong) {
  auto screened = GreedyHead::for_model(*model_, /*force=*/true);
  ASSERT_NE(screened, nullptr);
  at::manual_seed(5);
  const at::Tensor h = at::randn({1024, kHidden});
  const at::Tensor truth = exact_argmax(h, *head_);
  // bf16's own argmax is wrong on some rows (near-ties its rounding reorders): the test reaches them.
  const at::Tensor bf16_pick = onednn_linear(h.to(at::kBFloat16), head_->to(at::kBFloat16)).argmax(1);
  const int64_t wrong = bf16_pick.ne(truth).sum().item<int64_t>();
  EXPECT_GT(wrong, 0);
  const at::Tensor got = screened->pick(h);
  EXPECT_TRUE(at::equal(got, truth)) << got.ne(truth).sum().item<int64_t>() << " rows differ";
  const GreedyHead::Counts counts = screened->counts();
  EXPECT_EQ(counts.rows, 1024);
  EXPECT_EQ(counts.fp32_rows, 0);
  EXPECT_GE(counts.candidates, 1024 + wrong);  // a row whose bf16 order was wrong had two candidates or more
  EXPECT_LT(counts.candidates, 1024 * 64);     // and the screen kept few
  // A strided view of the rows picks the same.
  EXPECT_TRUE(at::equal(screened->pick(h.t().contiguous().t()), truth));
}

TEST_F(HeadTest, AGreedyRowWithTooManyCandidatesOrANonFiniteValueTakesTheFp32Product) {
  auto screened = GreedyHead::for_model(*model_, /*force=*/true);
  ASSERT_NE(screened, nullptr);
  at::Tensor h = at::randn({3, kHidden});
  h[0].zero_();                                          // every logit 0: every token a candidate
  h[1][3] = std::numeric_limits<float>::quiet_NaN();     // NaN logits
  const at::Tensor got = screened->pick(h);
  EXPECT_TRUE(at::equal(got, row_argmax(model_->step_logits(h)))) << got;
  EXPECT_EQ(got[0].item<int64_t>(), 0);
  EXPECT_EQ(got[2].item<int64_t>(), exact_argmax(h.narrow(0, 2, 1), *head_).item<int64_t>());
  EXPECT_EQ(screened->counts().fp32_rows, 2);
}

TEST_F(HeadTest, GreedyScreeningAppliesToAnFp32HeadOnly) {
  auto bf16 = CausalLM::load(dir_->path().string(), at::kBFloat16, at::Device(at::kCPU));
  EXPECT_EQ(GreedyHead::for_model(*bf16, /*force=*/true), nullptr);
  EXPECT_NE(GreedyHead::for_model(*model_, /*force=*/true), nullptr);
}

}  // namespace
}  // namespace trainer::engine::model

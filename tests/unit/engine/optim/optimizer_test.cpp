// The engine's AdamW and gradient clipping against torch.optim.AdamW's and
// torch.nn.utils.clip_grad_norm_'s formulas.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/optim/adamw.h"

namespace trainer::engine::optim {
namespace {

TEST(AdamW, MatchesTorchOptimAdamWOverSeveralSteps) {
  torch::manual_seed(0);
  plan::OptimizerSettings s;
  s.weightDecay = 0.1;
  torch::Tensor ours = torch::randn({4, 3}).set_requires_grad(true);
  torch::Tensor ref = ours.detach().clone().set_requires_grad(true);
  AdamW opt({ours}, s);
  torch::optim::AdamW torch_opt({ref}, torch::optim::AdamWOptions(1e-2).betas({s.beta1, s.beta2}).eps(s.epsilon).weight_decay(0.1));
  for (int step = 0; step < 5; ++step) {
    torch::Tensor g = torch::randn({4, 3});
    ours.mutable_grad() = g.clone();
    ref.mutable_grad() = g.clone();
    opt.step(1e-2);
    torch_opt.step();
  }
  EXPECT_TRUE(torch::allclose(ours, ref, 1e-6, 1e-7)) << (ours - ref).abs().max();
  EXPECT_EQ(opt.steps(), 5);
}

TEST(AdamW, ZeroGradLeavesNoGradient) {
  torch::Tensor p = torch::ones({2}).set_requires_grad(true);
  AdamW opt({p}, plan::OptimizerSettings{});
  p.mutable_grad() = torch::ones({2});
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

TEST(ClipGradNorm, ReturnsTheNormBeforeClippingAndScalesToMaxNorm) {
  torch::Tensor a = torch::zeros({2}).set_requires_grad(true), b = torch::zeros({1}).set_requires_grad(true);
  a.mutable_grad() = torch::tensor({3.0f, 0.0f});
  b.mutable_grad() = torch::tensor({4.0f});
  EXPECT_NEAR(clip_grad_norm({a, b}, 1.0), 5.0, 1e-6);
  const float coef = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_NEAR(a.grad()[0].item<float>(), 3.0f * coef, 1e-6);
  EXPECT_NEAR(b.grad()[0].item<float>(), 4.0f * coef, 1e-6);
  EXPECT_NEAR(clip_grad_norm({a, b}, 0.0), 1.0, 1e-5);  // 0 disables clipping but still measures
}

}  // namespace
}  // namespace trainer::engine::optim

// Proves the engine links against the wheel's libtorch and trains on the CPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/engine.h"

namespace trainer::engine {
namespace {

TEST(EngineRuntime, ReportsTheLinkedLibtorch) {
  RuntimeInfo info = runtime_info();
  EXPECT_EQ(info.torch_version, "2.11.0");
  EXPECT_GE(info.cpu_threads, 1);
}

TEST(EngineRuntime, ForwardBackwardOnCpuMatchesAnalyticGradient) {
  torch::manual_seed(0);
  // y = x W^T + b, loss = mean(y^2): dL/dW = 2/N * y^T x.
  torch::nn::Linear layer(4, 3);
  torch::Tensor x = torch::randn({5, 4});
  torch::Tensor y = layer(x);
  torch::Tensor loss = y.pow(2).mean();
  loss.backward();
  torch::Tensor expected = (2.0 / y.numel()) * y.detach().t().matmul(x);
  EXPECT_TRUE(torch::allclose(layer->weight.grad(), expected, 1e-5, 1e-6));
}

TEST(EngineRuntime, AdamWStepsLowerALoss) {
  torch::manual_seed(0);
  torch::nn::Linear layer(8, 1);
  torch::Tensor x = torch::randn({64, 8});
  torch::Tensor target = x.sum(1, true);
  torch::optim::AdamW opt(layer->parameters(), torch::optim::AdamWOptions(0.05));
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(layer(x), target);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  EXPECT_LT(last, first * 0.2);
}

}  // namespace
}  // namespace trainer::engine

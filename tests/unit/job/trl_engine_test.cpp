// The TRL engine's bridge (src/job/trl_engine.h): the row order it hands the worker is the native
// engine's, epoch after epoch, long enough for the run's steps.
#include "job/trl_engine.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "engine/data/dataset.h"

namespace trainer::job {
namespace {

TEST(TrlEngine, TheRowOrderIsTheNativeEnginesEpochAfterEpoch) {
  plan::RunConfig config;
  config.training.batchSize = 4;
  config.training.gradientAccumulation = 2;
  config.training.seed = 11;
  // 10 steps of 8 rows over 12 rows: 80 rows, 7 epochs of 12.
  const auto order = native_row_order(config, 12, 10);
  ASSERT_EQ(order.size(), 84u);
  for (int64_t epoch = 0; epoch < 7; ++epoch) {
    const auto want = engine::data::shuffled_order(12, 11, epoch);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), order.begin() + epoch * 12)) << "epoch " << epoch;
  }
  // An RL step takes promptsPerStep prompts.
  config.method = plan::Method::kGrpo;
  config.rl.promptsPerStep = 2;
  EXPECT_EQ(native_row_order(config, 12, 10).size(), 24u);
  EXPECT_TRUE(native_row_order(config, 0, 10).empty());
}

}  // namespace
}  // namespace trainer::job

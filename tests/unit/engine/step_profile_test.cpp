// The step profile (src/engine/train/step_profile.h): self times from nested events, grouping by
// name and shapes, and a real recording through libtorch's profiler.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/train/step_profile.h"
#include "temp_dir.h"

namespace trainer::engine::train {
namespace {

TEST(StepProfile, SelfTimeIsTheDurationLessTheDirectChildren) {
  // Thread 1: linear [0, 100) holds mm [10, 70) which holds a copy [20, 30); another mm [80, 95).
  // Thread 2: an mm [0, 50) that overlaps thread 1's events in time but nests in nothing.
  std::vector<ProfiledEvent> events{
      {.name = "aten::mm", .shapes = "[[2, 3]]", .thread = 1, .start_ns = 80, .end_ns = 95},
      {.name = "aten::linear", .shapes = "[[2, 3]]", .thread = 1, .start_ns = 0, .end_ns = 100},
      {.name = "aten::copy_", .shapes = "", .thread = 1, .start_ns = 20, .end_ns = 30},
      {.name = "aten::mm", .shapes = "[[2, 3]]", .thread = 1, .start_ns = 10, .end_ns = 70},
      {.name = "aten::mm", .shapes = "[[4, 4]]", .thread = 2, .start_ns = 0, .end_ns = 50},
  };
  const nlohmann::json doc = summarize_profile(events, 10);
  const auto& ops = doc["operators"];
  ASSERT_EQ(ops.size(), 4u);
  // mm [[2, 3]]: (60 - 10) + 15 = 65 ns self, 75 total, 2 calls: the largest.
  EXPECT_EQ(ops[0]["name"], "aten::mm");
  EXPECT_EQ(ops[0]["shapes"], "[[2, 3]]");
  EXPECT_EQ(ops[0]["calls"], 2);
  EXPECT_DOUBLE_EQ(ops[0]["selfSeconds"].get<double>(), 65e-9);
  EXPECT_DOUBLE_EQ(ops[0]["totalSeconds"].get<double>(), 75e-9);
  // mm [[4, 4]] on its own thread: all self.
  EXPECT_EQ(ops[1]["shapes"], "[[4, 4]]");
  EXPECT_DOUBLE_EQ(ops[1]["selfSeconds"].get<double>(), 50e-9);
  // linear: 100 - 60 - 15 = 25; copy: 10.
  EXPECT_EQ(ops[2]["name"], "aten::linear");
  EXPECT_DOUBLE_EQ(ops[2]["selfSeconds"].get<double>(), 25e-9);
  EXPECT_DOUBLE_EQ(ops[3]["selfSeconds"].get<double>(), 10e-9);
  EXPECT_DOUBLE_EQ(doc["recordedSelfSeconds"].get<double>(), 150e-9);
  // Only the top rows are kept.
  EXPECT_EQ(summarize_profile(events, 1)["operators"].size(), 1u);
}

TEST(StepProfile, RecordsTheAskedStepOnlyWithItsOperatorsAndShapes) {
  test_support::TempDir dir("step-profile");
  const std::string out = (dir.path() / "p.json").string();
  ::setenv("TRAINER_PROFILE_STEP", "2", 1);
  ::setenv("TRAINER_PROFILE_OUT", out.c_str(), 1);
  StepProfile profile = StepProfile::from_environment();
  ::unsetenv("TRAINER_PROFILE_STEP");
  ::unsetenv("TRAINER_PROFILE_OUT");
  const at::Tensor a = at::ones({8, 16}), b = at::ones({16, 4});
  for (int64_t step = 0; step < 3; ++step) {
    profile.begin(step);
    (void)at::mm(a, b);
    profile.end(step, 0.5);
    // Step 1 (0-based 0) is not the asked one: nothing written yet.
    if (step == 0) {
      EXPECT_FALSE(std::filesystem::exists(out));
    }
  }
  std::ifstream in(out);
  ASSERT_TRUE(in.good()) << out;
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["step"], 2);
  EXPECT_DOUBLE_EQ(doc["stepSeconds"].get<double>(), 0.5);
  bool found = false;
  for (const auto& op : doc["operators"]) {
    if (op["name"] == "aten::mm") {
      found = true;
      EXPECT_EQ(op["shapes"], "[[8, 16], [16, 4]]");
      EXPECT_EQ(op["calls"], 1);
    }
  }
  EXPECT_TRUE(found) << doc.dump();
}

TEST(StepProfile, AMalformedStepProfilesNothing) {
  for (const char* bad : {"0", "-1", "two", "3x", ""}) {
    ::setenv("TRAINER_PROFILE_STEP", bad, 1);
    ::setenv("TRAINER_PROFILE_OUT", "/nonexistent/p.json", 1);
    StepProfile profile = StepProfile::from_environment();
    profile.begin(0);
    profile.end(0, 1.0);  // would throw or write if it had started
  }
  ::unsetenv("TRAINER_PROFILE_STEP");
  ::unsetenv("TRAINER_PROFILE_OUT");
}

}  // namespace
}  // namespace trainer::engine::train

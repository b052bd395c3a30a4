// trainer-job's progress lines (src/job/job_events.h), printed from typed events.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "job/job_events.h"

namespace trainer::job {
namespace {

std::string printed(const std::vector<protocol::Event>& events) {
  FILE* f = std::tmpfile();
  ProgressPrinter p(f);
  for (const auto& e : events) p.on_event(e);
  std::rewind(f);
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  std::fclose(f);
  return out;
}

TEST(ProgressPrinter, ShowsPhasesDataAndTheEnd) {
  const std::string out = printed({protocol::Phase{.phase = "TRAINING", .total_steps = 2, .device = "cpu"},
                                   protocol::DataFit{.rows = 64, .truncated = 2, .exact = 1, .dropped = 0},
                                   protocol::DataSplit{.train_rows = 58, .validation_rows = 6, .held_out = true},
                                   protocol::Validation{.step = 2, .validation_loss = 1.5},
                                   protocol::Completed{.adapter_dir = "/out/adapter", .final_loss = 0.5}});
  EXPECT_NE(out.find("[TRAINING] on cpu\n"), std::string::npos) << out;
  EXPECT_NE(out.find("data: 64 rows, 2 cut to maxSeqLength, 1 exactly at it, 0 dropped"), std::string::npos) << out;
  EXPECT_NE(out.find("data: training on 58 rows, validating on 6 held out"), std::string::npos) << out;
  EXPECT_NE(out.find("validation at step 2: loss 1.5000"), std::string::npos) << out;
  EXPECT_NE(out.find("done: adapter in /out/adapter (final loss 0.5000)"), std::string::npos) << out;
}

TEST(ProgressPrinter, AStepShowsItsFigures) {
  const std::string out = printed({protocol::Phase{.phase = "TRAINING", .total_steps = 10},
                                   protocol::Step{.step = 1, .total_steps = 10, .loss = 2.25, .learning_rate = 1e-4,
                                                  .grad_norm = 0.5, .tokens_per_second = 1500}});
  EXPECT_NE(out.find("step 1/10  loss 2.2500  lr 1.00e-04  grad 0.500  1500 tok/s  ETA "), std::string::npos) << out;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  FILE* f = std::fopen(path.c_str(), "r");
  char buf[4096];
  while (f != nullptr && std::fgets(buf, sizeof buf, f)) out.emplace_back(buf);
  if (f != nullptr) std::fclose(f);
  return out;
}

TEST(EventWriter, AHeartbeatCarriesTheLastStepAndNeverFollowsTheAttemptsLastEvent) {
  const std::string path = testing::TempDir() + "/heartbeat_events.jsonl";
  {
    EventWriter w;
    ASSERT_TRUE(w.open(path).is_ok());
    w.heartbeat(1.0);
    w.write(protocol::Step{.step = 4, .total_steps = 10, .loss = 1.0});
    w.heartbeat(2.5);
    w.write(protocol::Cancelled{.steps = 4});
    w.heartbeat(3.0);  // after the last event: not written
  }
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 4u);
  auto first = protocol::parse_event(lines[0]);
  ASSERT_TRUE(first && std::holds_alternative<protocol::Heartbeat>(*first)) << lines[0];
  EXPECT_FALSE(std::get<protocol::Heartbeat>(*first).step.has_value());
  auto second = protocol::parse_event(lines[2]);
  ASSERT_TRUE(second && std::holds_alternative<protocol::Heartbeat>(*second)) << lines[2];
  EXPECT_EQ(std::get<protocol::Heartbeat>(*second).step, 4);
  EXPECT_EQ(std::get<protocol::Heartbeat>(*second).uptime_seconds, 2.5);
  EXPECT_NE(lines[3].find(R"("type":"cancelled")"), std::string::npos) << lines[3];
}

TEST(FormatDuration, HoursMinutesSeconds) {
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(184), "3m04s");
  EXPECT_EQ(format_duration(12.4), "12s");
  EXPECT_EQ(format_duration(-1), "0s");
}

}  // namespace
}  // namespace trainer::job

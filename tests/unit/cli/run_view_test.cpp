// The live view of a run: the line `runs wait` redraws and what `runs get` shows.
#include "cli/run_view.h"

#include <gtest/gtest.h>

#include "cli/format.h"

namespace trainer::cli {
namespace {

nlohmann::json training_run() {
  return nlohmann::json::parse(R"({
    "runId": "7d496e82c3a15f04aa", "workload": {"id": "w1", "name": "demo"}, "baseModel": "tiny-qwen3",
    "phase": "TRAINING", "attempt": 1, "submissionId": "s1", "settingsSha": "abc",
    "createdAt": "2026-11-30T05:00:00Z", "updatedAt": "2026-11-30T05:01:40Z",
    "phaseHistory": [{"phase": "QUEUED", "enteredAt": "2026-11-30T05:00:00Z"},
                     {"phase": "PREPARING", "enteredAt": "2026-11-30T05:00:10Z"},
                     {"phase": "TRAINING", "enteredAt": "2026-11-30T05:00:20Z"}],
    "progress": {"step": 40, "totalSteps": 100},
    "latest": {"loss": 1.23456, "tokensPerSecond": 812.4},
    "cost": {"gpuSeconds": 80, "estimated": true}
  })");
}

TEST(CliRunView, TrainingLineShowsBarStepLossRateEtaAndCost) {
  // 40 steps in 80 s of training: 60 steps left take 120 s.
  EXPECT_EQ(run_progress_line(training_run(), ViewStyle{false, false, 10}),
            "TRAINING   [####......]  step 40/100  loss 1.235  812 tok/s  ETA 2m00s  cost 80 GPU-s (est.)");
  EXPECT_DOUBLE_EQ(*run_eta_seconds(training_run()), 120);
}

TEST(CliRunView, TheEtaOfAResumedAttemptCountsOnlyTheStepsItTrained) {
  // Attempt 2 resumed from step 30 and trained 10 steps in its 80 s: 60 steps left take 480 s
  // (not 120 s, as 40 steps in 80 s would say).
  auto run = training_run();
  run["attempt"] = 2;
  run["attempts"] = nlohmann::json::parse(R"([{"number": 1, "cause": "paused"},
                                              {"number": 2, "resumedFromStep": 30}])");
  EXPECT_DOUBLE_EQ(*run_eta_seconds(run), 480);
  // An attempt that started from the beginning (no snapshot) counts every step.
  run["attempts"][1]["resumedFromStep"] = nullptr;
  EXPECT_DOUBLE_EQ(*run_eta_seconds(run), 120);
}

TEST(CliRunView, APausedRunShowsItsPauseAndHowToResume) {
  auto run = training_run();
  run["phase"] = "PAUSED";
  run["pause"] = nlohmann::json::parse(R"({"policy": "save", "requestedAt": "2026-11-30T05:01:00Z",
    "state": "paused", "savedStep": 40, "snapshotId": "5e1f0a9b2c3d4e5f66", "resourcesReleased": true,
    "releasedAt": "2026-11-30T05:01:05Z"})");
  const std::string text = run_detail(run, ViewStyle{false, false, 10});
  ASSERT_NE(text.find("\nPause\n"), std::string::npos) << text;
  // The value of the row `key` of the Pause section (rows are "  Key:   value").
  auto row = [&](const std::string& key) {
    const size_t at = text.find("  " + key + ":", text.find("\nPause\n"));
    if (at == std::string::npos) return std::string("(no row)");
    const size_t value = text.find_first_not_of(' ', at + key.size() + 3);
    return text.substr(value, text.find('\n', value) - value);
  };
  EXPECT_EQ(row("Snapshot"), "5e1f0a9b2c3d (step 40)");
  EXPECT_EQ(row("Devices"), "released at 2026-11-30T05:01:05Z");
  EXPECT_EQ(row("Next"), "`trainer runs resume 7d496e82c3a1` continues it from step 40 as a new attempt; "
                         "`trainer runs cancel 7d496e82c3a1` ends it");
  // A run that was never paused has no such section.
  EXPECT_EQ(run_detail(training_run(), ViewStyle{false, false, 10}).find("\nPause\n"), std::string::npos);
}

TEST(CliRunView, AQueuedRunShowsItsPlaceInItsPoolsQueue) {
  auto run = training_run();
  run["phase"] = "WAITING_FOR_DEVICES";
  run["progress"] = {{"step", 0}, {"totalSteps", 0}};
  run["latest"] = nlohmann::json::object();
  run["cost"] = {{"gpuSeconds", 0}, {"estimated", true}};
  run["claim"] = nlohmann::json::parse(R"({"pool": "cpu", "devices": 1, "state": "QUEUED", "queuePosition": 3,
    "ahead": [{"owner": "9a01c3d2e4f5a6b7", "kind": "SFT", "devices": 1}, {"owner": "77aa", "kind": "GRPO", "devices": 2}]})");
  EXPECT_EQ(run_progress_line(run, ViewStyle{false, false, 4}),
            "WAITING_FOR_DEVICES  waiting for devices in pool cpu  3rd in queue, behind 9a01c3d2e4f5 (SFT, 1 device), "
            "77aa (GRPO, 2 devices)  cost 0 GPU-s (est.)");
  run["claim"]["queuePosition"] = 1;
  run["claim"]["ahead"] = nlohmann::json::array();
  EXPECT_NE(run_progress_line(run, ViewStyle{false, false, 4}).find("  first in queue"), std::string::npos);
}

TEST(CliRunView, AReinforcementRunShowsItsRewardInsteadOfTheLoss) {
  auto run = training_run();
  run["latest"]["reward"] = 0.625;
  EXPECT_EQ(run_progress_line(run, ViewStyle{false, false, 10}),
            "TRAINING   [####......]  step 40/100  reward 0.625  812 tok/s  ETA 2m00s  cost 80 GPU-s (est.)");
  run["phase"] = "COMPLETED";
  const std::string summary = run_summary(run);
  EXPECT_NE(summary.find("final reward:  0.625"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("final loss"), std::string::npos) << summary;
}

TEST(CliRunView, PreparingShowsRowsAndTerminalShowsTrainingTime) {
  auto run = training_run();
  run["phase"] = "PREPARING";
  run["progress"] = {{"step", 0}, {"totalSteps", 0}, {"rowsDone", 50}, {"rowsTotal", 200}};
  run["latest"] = nlohmann::json::object();
  run["cost"] = {{"gpuSeconds", 0}, {"estimated", true}};
  EXPECT_EQ(run_progress_line(run, ViewStyle{false, false, 4}), "PREPARING  [#...]  rows 50/200  cost 0 GPU-s (est.)");

  auto done = training_run();
  done["phase"] = "COMPLETED";
  done["progress"]["step"] = 100;
  done["phaseHistory"].push_back({{"phase", "COMPLETED"}, {"enteredAt", "2026-11-30T05:03:00Z"}});
  done["cost"] = {{"gpuSeconds", 160}, {"estimated", false}};
  EXPECT_EQ(run_progress_line(done, ViewStyle{false, false, 4}),
            "COMPLETED  [####]  step 100/100  loss 1.235  trained 2m40s  cost 2.7 GPU-min");
  EXPECT_FALSE(run_eta_seconds(done));
}

TEST(CliRunView, NarrowLineDropsCostThenRateBeforeCutting) {
  ViewStyle narrow{false, false, 10, 70};
  EXPECT_EQ(run_progress_line(training_run(), narrow),
            "TRAINING   [####......]  step 40/100  loss 1.235  812 tok/s  ETA 2m00s");
  narrow.max_width = 60;
  EXPECT_EQ(run_progress_line(training_run(), narrow), "TRAINING   [####......]  step 40/100  loss 1.235  ETA 2m00s");
  narrow.max_width = 20;
  EXPECT_EQ(run_progress_line(training_run(), narrow), "TRAINING   [####....");
}

TEST(CliRunView, ColoursOnlyWhenAsked) {
  const std::string line = run_progress_line(training_run(), ViewStyle{true, true, 8});
  EXPECT_NE(line.find("\033[36mTRAINING"), std::string::npos);
  EXPECT_NE(line.find("███▏░░░░"), std::string::npos);
}

TEST(CliRunView, DetailHasStateResultsAndCostSections) {
  auto run = training_run();
  run["failureReason"] = "out of memory\ntraceback...";
  run["adapterPath"] = "/data/runs/7d/adapter";
  const std::string detail = run_detail(run, ViewStyle{});
  EXPECT_NE(detail.find("State\n"), std::string::npos);
  EXPECT_NE(detail.find("  Run:           7d496e82c3a15f04aa\n"), std::string::npos);
  EXPECT_NE(detail.find("  Failure:       out of memory\n"), std::string::npos);
  EXPECT_NE(detail.find("Results\n  Loss:          1.235\n"), std::string::npos);
  EXPECT_NE(detail.find("  Adapter:       /data/runs/7d/adapter\n"), std::string::npos);
  EXPECT_NE(detail.find("Cost\n  GPU time:      80 GPU-s (est.)\n"), std::string::npos);
}

TEST(CliRunView, RecordKeepsCreatedSubmissionAndSettingsOutOfCost) {
  const std::string detail = run_detail(training_run(), ViewStyle{});
  const size_t cost = detail.find("Cost\n");
  const size_t record = detail.find("Record\n");
  ASSERT_NE(cost, std::string::npos);
  ASSERT_NE(record, std::string::npos);
  EXPECT_LT(cost, record);
  const std::string cost_section = detail.substr(cost, record - cost);
  for (const char* key : {"Created:", "Updated:", "Submission:", "Settings sha:"}) {
    EXPECT_EQ(cost_section.find(key), std::string::npos) << key << " is in Cost:\n" << cost_section;
    EXPECT_NE(detail.find(key, record), std::string::npos) << key << " is not in Record";
  }
}

TEST(CliRunView, ACpuRunShowsCpuSecondsNotGpuSeconds) {
  auto run = training_run();
  run["plan"] = {{"execution", {{"gpus", 0}}}};
  EXPECT_NE(run_progress_line(run, ViewStyle{false, false, 10}).find("cost 80 CPU-s (est.)"), std::string::npos);
  const std::string detail = run_detail(run, ViewStyle{});
  EXPECT_NE(detail.find("  CPU time:      80 CPU-s (est.)\n"), std::string::npos) << detail;
  EXPECT_EQ(detail.find("GPU"), std::string::npos) << detail;
  EXPECT_NE(run_summary(run).find("cost:        80 CPU-s (est.)"), std::string::npos);
  run["plan"]["execution"]["gpus"] = 2;
  EXPECT_NE(run_detail(run, ViewStyle{}).find("GPU time:"), std::string::npos);
}

TEST(CliRunView, ErasingALineThatWrappedAfterNarrowingClearsEveryRowItTakes) {
  // Fits: clear this row only.
  EXPECT_EQ(erase_drawn_line(79, 80), "\r\033[K");
  // A 79-cell line on a terminal narrowed to 40 columns takes 2 rows: clear both.
  EXPECT_EQ(erase_drawn_line(79, 40), "\r\033[K\033[A\033[K");
  // ... and 4 rows at 20 columns.
  EXPECT_EQ(erase_drawn_line(79, 20), "\r\033[K\033[A\033[K\033[A\033[K\033[A\033[K");
  EXPECT_EQ(erase_drawn_line(0, 20), "\r\033[K");
}

TEST(CliRunView, SummaryNamesAdapterAndFinalLoss) {
  auto run = training_run();
  run["phase"] = "COMPLETED";
  run["progress"]["step"] = 100;
  run["adapterPath"] = "/d/adapter";
  run["phaseHistory"].push_back({{"phase", "COMPLETED"}, {"enteredAt", "2026-11-30T05:01:00Z"}});
  EXPECT_EQ(run_summary(run),
            "Run 7d496e82c3a15f04aa COMPLETED after 100/100 steps in 40s\n"
            "  final loss:  1.235\n"
            "  tokens/s:    812\n"
            "  cost:        80 GPU-s (est.)\n"
            "  adapter:     /d/adapter\n");
}

TEST(CliRunView, ListRowIsShortAndAged) {
  auto row = run_list_row(training_run(), *parse_rfc3339("2026-11-30T05:05:00Z"));
  // "-": no pipeline (a pipeline-stage run shows PIPELINE/stage there).
  EXPECT_EQ(row, (std::vector<std::string>{"7d496e82c3a1", "demo", "tiny-qwen3", "TRAINING", "40/100", "1.235", "",
                                           "-", "5m ago"}));
}

TEST(CliRunView, AReinforcementRunsListRowShowsItsRewardLabelledWhereTheLossGoes) {
  auto run = training_run();
  run["latest"]["loss"] = 0.0;  // a GRPO step's policy loss is often exactly 0
  run["latest"]["reward"] = 0.625;
  auto row = run_list_row(run, *parse_rfc3339("2026-11-30T05:05:00Z"));
  EXPECT_EQ(row[5], "reward 0.625");
  EXPECT_EQ(row.size(), run_list_header().size());
}

}  // namespace
}  // namespace trainer::cli

// A data-parallel job's rank other than 0 (docs/data-parallel.md): started by rank 0 (ranks.h)
// with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, it trains its share of every batch and
// reports nothing: no events, no metrics, no files. SIGTERM and the pause signal take effect at
// the step where any rank takes them. Exit status: 0 trained (or paused), 143 cancelled, 1
// failed (the reason on stderr).
#pragma once

#include <string>

#include "engine/engine.h"
#include "plan/plan.h"

namespace trainer::job {

// Rank 0 passes the adapter and training state it resumes from in these (restored once, by it).
inline constexpr const char* kRankResumeWeightsVar = "TRAINER_RANK_RESUME_WEIGHTS";
inline constexpr const char* kRankResumeStateVar = "TRAINER_RANK_RESUME_STATE";
// "1" when those come from a parent's snapshot (a child run: engine::TrainRequest::branch).
inline constexpr const char* kRankBranchVar = "TRAINER_RANK_BRANCH";

int run_rank(plan::Plan plan, const std::string& output_dir, const engine::dist::World& world);

}  // namespace trainer::job

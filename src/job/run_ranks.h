// The data-parallel side of `trainer-job run` (docs/data-parallel.md): how many ranks a plan
// trains on, rank 0 starting ranks 1..N-1 as copies of this process (job/ranks.h) and reading
// their failures, and what a rank other than 0 runs.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "engine/dist/world.h"
#include "engine/engine.h"
#include "job/args.h"
#include "job/job_events.h"
#include "job/ranks.h"
#include "plan/plan.h"

namespace trainer::job {

// The ranks a plan trains on: execution.gpus for SFT; GRPO/GSPO train on one device (the job
// says so with a `warning` event, plan::single_device_warning).
int data_parallel_ranks(const plan::Plan& plan);

// A rank other than 0, started by rank 0 with the same arguments: its exit status.
int run_other_rank(const Args& args, const engine::dist::World& world);

// Data parallelism: the rendezvous hosted here, then ranks 1..N-1 started as copies of this
// process (a failure that strands rank 0 is written to `writer` before the exit). nullptr when
// the plan trains on one rank.
Result<std::unique_ptr<Ranks>> start_other_ranks(engine::TrainRequest& req, const std::string& plan_path,
                                                 EventWriter& writer);

// Rank 0's failure when other ranks trained with it: the rank that failed is the cause, named
// first (rank 0's collectives broke: Unavailable); rank 0's own error (bad data, memory) is the
// job's, whatever it then did to the others. nullopt: every rank finished.
std::optional<std::string> other_rank_failure(Ranks& others, const Result<engine::TrainResult>& result);

}  // namespace trainer::job

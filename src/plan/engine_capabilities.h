// What each training engine (config.engine) can do, in one table: a plan asking its engine for
// something the engine cannot do is refused at submission (trainerd's admission, and so the
// CLI's dry run), naming the engine and the plan field. A peer engine's translation that learns
// a field removes that field's row here.
#pragma once

#include <string_view>
#include <vector>

#include "common/status.h"
#include "plan/plan.h"

namespace trainer::plan {

// What the deployment offers the engines that need more than trainer-job itself. trainerd fills
// it from its configuration; a plan checked without a deployment (a local run) gets the defaults.
struct EngineDeployment {
  bool ray_backend = false;         // compute.backend is "ray": verl runs its trainer as a Ray job
  bool gpu_rollout_engine = false;  // a GPU rollout engine verl can start: vLLM or SGLang on CUDA
};

// One thing an engine cannot do: a plan that `asks` it is refused on `field`.
struct EngineLimit {
  Engine engine;
  std::string_view field;         // the dotted plan field blamed: "config.rlHyperparams.tools"
  bool (*asks)(const Plan& plan);  // true when the plan asks for it
  std::string_view why;           // completes "engine trl cannot run this: " (what it lacks, and what to do)
};

// Every limit, for each engine in the order of the field table.
const std::vector<EngineLimit>& engine_limits();

// Ok for a plan its engine can train here. Otherwise kInvalidArgument naming the field of the
// first limit the plan meets, with a message that names the engine; for an engine the
// deployment cannot run at all, the field is config.engine and the message lists every missing
// piece.
Status check_engine_capabilities(const Plan& plan, const EngineDeployment& deployment);

}  // namespace trainer::plan

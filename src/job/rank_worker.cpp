#include "job/rank_worker.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "engine/engine.h"
#include "job/stop_signals.h"

namespace trainer::job {

int run_rank(plan::Plan plan, const std::string& output_dir, const engine::dist::World& world) {
  std::atomic<bool> stop{false};
  std::atomic<bool> pause{false};
  StopSignals signals([&](int signal) { (signal == kPauseSignal ? pause : stop).store(true); });
  engine::TrainRequest req;
  req.plan = std::move(plan);
  req.output_dir = output_dir;
  req.stop = &stop;
  req.pause = &pause;
  req.world = world;
  if (const char* v = std::getenv(kRankResumeWeightsVar); v != nullptr) req.resume_weights_dir = v;
  if (const char* v = std::getenv(kRankResumeStateVar); v != nullptr) req.resume_state_dir = v;
  if (const char* v = std::getenv(kRankBranchVar); v != nullptr) req.branch = std::string(v) == "1";
  auto result = engine::run_training(req, [](const protocol::Event&) {});
  if (!result.is_ok()) {
    std::fprintf(stderr, "trainer-job rank %d: failed: %s\n", world.rank, result.status().message().c_str());
    return 1;
  }
  return result->cancelled ? kExitCancelled : 0;
}

}  // namespace trainer::job

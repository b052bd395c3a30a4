// The data-parallel side of `trainer-job run` (declared in job/run_ranks.h).
#include "job/run_ranks.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "job/input_fetch.h"
#include "job/rank_worker.h"
#include "protocol/job_request.h"

namespace trainer::job {
namespace {

// How long rank 0, failed, waits to learn whether another rank's failure caused its own.
constexpr std::chrono::seconds kOtherRankGrace{5};

// This executable, for the other ranks.
std::string self_executable() {
  std::string path(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  path.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return path;
}

}  // namespace

int data_parallel_ranks(const plan::Plan& plan) {
  if (plan.execution.gpus <= 1 || plan.config.method != plan::Method::kSft) return 1;
  return plan.execution.gpus;
}

int run_other_rank(const Args& args, const engine::dist::World& world) {
  const std::string plan_path = args.get("plan");
  std::ifstream in(plan_path);
  std::stringstream text;
  text << in.rdbuf();
  auto plan = plan::parse_plan(text.str(), plan_path);
  if (!in || !plan.is_ok()) {
    std::fprintf(stderr, "trainer-job rank %d: %s: cannot read the plan\n", world.rank, plan_path.c_str());
    return 1;
  }
  // Rank 0 fetched the plan's store inputs into this node's cache before it started this rank.
  auto request = protocol::job_request_from_environment(std::getenv);
  if (!request.is_ok()) {
    std::fprintf(stderr, "trainer-job rank %d: %s\n", world.rank, request.status().describe().c_str());
    return 1;
  }
  if (Status st = fetch_plan_inputs(*plan, input_fetch_options(*request)); !st.is_ok()) {
    std::fprintf(stderr, "trainer-job rank %d: %s\n", world.rank, st.describe().c_str());
    return 1;
  }
  return run_rank(std::move(plan).value(), args.get("output"), world);
}

Result<std::unique_ptr<Ranks>> start_other_ranks(engine::TrainRequest& req, const std::string& plan_path,
                                                 EventWriter& writer) {
  const int ranks = data_parallel_ranks(req.plan);
  if (ranks <= 1) return std::unique_ptr<Ranks>();
  auto rendezvous = engine::dist::host_rendezvous(ranks);
  if (!rendezvous.is_ok()) return rendezvous.status();
  req.rendezvous = *rendezvous;
  req.world = engine::dist::World{.rank = 0,
                                  .size = ranks,
                                  .master_addr = engine::dist::kLoopback,
                                  .master_port = engine::dist::rendezvous_port(**rendezvous)};
  RanksOptions ro;
  ro.executable = self_executable();
  ro.args = {"run", "--plan", plan_path, "--output", req.output_dir};
  ro.world_size = ranks;
  ro.master_addr = req.world.master_addr;
  ro.master_port = req.world.master_port;
  if (!req.resume_weights_dir.empty()) {
    ro.env[kRankResumeWeightsVar] = req.resume_weights_dir;
    ro.env[kRankResumeStateVar] = req.resume_state_dir;
    if (req.branch) ro.env[kRankBranchVar] = "1";
  }
  // Rank 0 stuck where no collective notices the failed rank: report it and exit.
  ro.on_abandon = [&writer](const std::string& failure) {
    writer.write(protocol::Failed{failure});
    std::fprintf(stderr, "trainer-job run: failed: %s\n", failure.c_str());
    writer.flush(std::chrono::seconds(5));  // the failure reaches trainerd before the exit
    std::_Exit(1);
  };
  auto started = Ranks::start(std::move(ro));
  if (started.is_ok()) {
    std::fprintf(stderr, "trainer-job run: data parallel over %d ranks (rendezvous %s:%d)\n", ranks,
                 req.world.master_addr.c_str(), req.world.master_port);
  }
  return started;
}

std::optional<std::string> other_rank_failure(Ranks& others, const Result<engine::TrainResult>& result) {
  std::optional<std::string> failed;
  if (result.is_ok()) {
    failed = others.wait();
  } else if (result.status().code() == StatusCode::kUnavailable) {
    failed = others.failure(kOtherRankGrace);
  }
  if (failed && !result.is_ok()) *failed += "; rank 0: " + result.status().message();
  return failed;
}

}  // namespace trainer::job

// trainer-job run: trains a resolved plan locally (the job protocol of docs/api.md).
//
// Events go to --events FILE (stdout when absent) as JSON lines; human progress to stderr.
// The SFT metrics are recorded through the telemetry SDK as well (job_telemetry.h).
// SIGTERM (or SIGINT) stops the engine at the next step boundary: {"type":"cancelled"}, exit 143.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "job/args.h"
#include "job/commands.h"
#include "job/job_events.h"
#include "job/job_telemetry.h"
#include "plan/plan.h"

namespace trainer::job {
namespace {

constexpr const char* kUsage =
    "usage: trainer-job run --plan FILE --output DIR [--events FILE]\n"
    "Trains the plan's LoRA adapter into DIR/adapter. In a local plan, baseModel is a model folder\n"
    "and config.dataset a JSONL file. Job-protocol events (JSON lines) go to --events or stdout;\n"
    "progress goes to stderr. SIGTERM stops at the next step boundary (exit 143).\n";

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

}  // namespace

int cmd_run(int argc, char** argv) {
  Args args = parse_args(argc, argv, {"plan", "output", "events"}, {"help"});
  if (args.flags.count("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!args.error.empty() || !args.has("plan") || !args.has("output")) {
    std::fprintf(stderr, "trainer-job run: %s\n%s", args.error.empty() ? "--plan and --output are required" : args.error.c_str(), kUsage);
    return 2;
  }
  EventWriter writer;
  if (Status st = writer.open(args.get("events")); !st.is_ok()) {
    std::fprintf(stderr, "trainer-job run: %s\n", st.message().c_str());
    return 1;
  }
  auto fail = [&](const std::string& reason) {
    writer.write({{"type", "failed"}, {"reason", reason}});
    std::fprintf(stderr, "trainer-job run: failed: %s\n", reason.c_str());
    return 1;
  };
  const std::string plan_path = args.get("plan");
  std::ifstream in(plan_path);
  if (!in) return fail(plan_path + ": cannot read the plan file");
  std::stringstream text;
  text << in.rdbuf();
  auto plan = plan::parse_plan(text.str(), plan_path);
  if (!plan.is_ok()) {
    const Status& st = plan.status();
    return fail(st.field().empty() ? st.message() : plan_path + ": " + st.describe());
  }

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  engine::TrainRequest req;
  req.plan = std::move(plan).value();
  req.output_dir = args.get("output");
  req.stop = &g_stop;
  ProgressPrinter progress;
  JobTelemetry telemetry(req.plan, RunIdentity::from_environment());
  auto result = engine::train_sft(req, [&](const nlohmann::json& ev) {
    writer.write(ev);
    progress.on_event(ev);
    telemetry.on_event(ev);
  });
  if (!result.is_ok()) return fail(result.status().message());
  if (result->cancelled) {
    writer.write({{"type", "cancelled"}});
    std::fprintf(stderr, "trainer-job run: cancelled after step %lld of %lld\n", static_cast<long long>(result->steps),
                 static_cast<long long>(result->total_steps));
    return 143;
  }
  return 0;
}

}  // namespace trainer::job

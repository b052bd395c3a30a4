// `trainer runs pause RUN --checkpoint save|latest` and `trainer runs resume RUN`.
#include <string>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

int runs_pause(Context& ctx) {
  const std::string policy = ctx.inv.get_or("checkpoint", "");
  if (policy.empty()) {
    return ctx.fail("runs pause: --checkpoint is required: save (save at the next optimizer boundary, then stop) or "
                    "latest (stop against the newest committed snapshot, dropping later steps)",
                    kExitUsage);
  }
  if (policy != "save" && policy != "latest") {
    return ctx.fail("runs pause: --checkpoint must be save or latest, got '" + policy + "'", kExitUsage);
  }
  auto run = ctx.post("/v1/runs/" + seg(ctx.inv.positionals[0]) + "/pause", json{{"checkpoint", policy}});
  if (!run) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*run);
    return kExitOk;
  }
  const std::string id = short_id(run->value("runId", std::string()));
  out("Pause accepted for run " + id + " (--checkpoint " + policy + "); it is " + run->value("phase", std::string()) +
      ". `trainer runs get " + id + "` shows the save and when its devices are released.\n");
  return kExitOk;
}

int runs_resume(Context& ctx) {
  auto run = ctx.post("/v1/runs/" + seg(ctx.inv.positionals[0]) + "/resume", json::object());
  if (!run) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*run);
    return kExitOk;
  }
  const std::string id = short_id(run->value("runId", std::string()));
  const json pause = run->value("pause", json::object());
  out("Resumed run " + id + " as attempt " + std::to_string(run->value("attempt", 0)) + " from snapshot " +
      short_id(pause.value("snapshotId", std::string())) + " (step " +
      std::to_string(pause.value("savedStep", int64_t{0})) + "); it is " + run->value("phase", std::string()) +
      ". Follow it with `trainer runs wait " + id + "`.\n");
  return kExitOk;
}

}  // namespace

Command runs_pause_command() {
  Command c{"pause", {}, "Pause an active run against a checkpoint and release its devices", "RUN",
            "--checkpoint is required. save: the job saves its full state at the next optimizer boundary,\n"
            "the snapshot is committed, then it stops. latest: it stops at once against the newest\n"
            "committed snapshot with training state, dropping the steps trained since (refused when\n"
            "there is none). Returns once accepted: `runs get` shows PAUSING, then PAUSED with\n"
            "pause.resourcesReleased. A save that fails is recorded with its reason, never as success.",
            {{"checkpoint", 0, "save|latest", "save now, or stop against the newest committed snapshot", ""}},
            {}, runs_pause, 1, 1, {}};
  c.examples = {{"save at the next step, then pause", "trainer runs pause 7d496e82 --checkpoint save"},
                {"pause against the last committed snapshot", "trainer runs pause 7d496e82 --checkpoint latest"}};
  return c;
}

Command runs_resume_command() {
  Command c{"resume", {}, "Resume a paused run from the snapshot its pause stopped against", "RUN",
            "A new attempt of the same run: same id, metrics and snapshots, the same device count;\n"
            "its cost adds to the run's.",
            {}, {}, runs_resume, 1, 1, {}};
  c.examples = {{"resume a paused run (then follow it with `trainer runs wait`)", "trainer runs resume 7d496e82"}};
  return c;
}

}  // namespace trainer::cli

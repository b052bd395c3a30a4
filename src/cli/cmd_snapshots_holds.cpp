// `trainer snapshots pin|unpin SNAPSHOT [--kind K]` and `trainer snapshots release SNAPSHOT`:
// holds against retention (docs/lineage.md, "Holds and retention").
#include <string>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

int change_hold(Context& ctx, const std::string& action) {
  json body = json::object();
  if (auto kind = ctx.inv.get("kind")) {
    if (*kind != "weights" && *kind != "trainingState") {
      return ctx.fail("--kind must be weights or trainingState, got '" + *kind + "'", kExitUsage);
    }
    body["kinds"] = json::array({*kind});
  }
  auto doc = ctx.post("/v1/snapshots/" + seg(ctx.inv.positionals[0]) + "/" + action, body);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  std::string message = doc->value("message", std::string());
  if (!message.empty()) message[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(message[0])));
  out(message + ".\n");
  return kExitOk;
}

int snapshots_pin(Context& ctx) { return change_hold(ctx, "pin"); }
int snapshots_unpin(Context& ctx) { return change_hold(ctx, "unpin"); }
int snapshots_release(Context& ctx) { return change_hold(ctx, "release"); }

}  // namespace

std::vector<Command> snapshot_hold_commands() {
  const Flag kind{"kind", 0, "weights|trainingState", "only this artifact kind (default: both)", ""};
  Command pin{"pin", {}, "Hold a snapshot against retention (an operator pin)", "SNAPSHOT",
              "Both artifact kinds by default, all or nothing; refused when retention already began deleting\n"
              "one. Pinning a pinned snapshot again changes nothing. `snapshots get` shows the hold.",
              {kind}, {}, snapshots_pin, 1, 1, {}};
  pin.examples = {{"keep a snapshot whatever execution.keepAdapters says", "trainer snapshots pin 3f2a9c71bd04"},
                  {"keep only its weights", "trainer snapshots pin 3f2a9c71bd04 --kind weights"}};
  Command unpin{"unpin", {}, "Remove an operator pin; retention applies again", "SNAPSHOT",
                "Unpinning a snapshot that is not pinned says so and changes nothing.", {kind}, {}, snapshots_unpin,
                1, 1, {}};
  unpin.examples = {{"let retention delete it again", "trainer snapshots unpin 3f2a9c71bd04"}};
  Command release{"release", {}, "Drop leftover holds: a failed registration's, or an ended branch's", "SNAPSHOT",
                  "A running branch keeps its hold and a pin stays (use unpin); the answer names what still holds it.",
                  {}, {}, snapshots_release, 1, 1, {}};
  release.examples = {{"free a snapshot a failed registration still holds", "trainer snapshots release 3f2a9c71bd04"}};
  return {pin, unpin, release};
}

}  // namespace trainer::cli

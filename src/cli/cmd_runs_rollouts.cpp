// `trainer runs rollouts RUN`: what a reinforcement run sampled and how each completion was
// scored (GET /v1/runs/{id}/rollouts), to spot reward hacking.
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

constexpr long long kMaxRollouts = 200;     // the service's bound on one answer
constexpr size_t kShownTextChars = 600;     // of a prompt or completion in text output

// `text` cut to kShownTextChars (on a UTF-8 boundary), each line after the first indented by
// `indent` so that it stays under its label.
std::string shown_text(const std::string& text, const std::string& indent) {
  std::string t = text;
  std::string more;
  if (t.size() > kShownTextChars) {
    size_t cut = kShownTextChars;
    while (cut > 0 && (static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) --cut;
    more = " ... (" + std::to_string(t.size() - cut) + " more bytes; -o json shows all)";
    t.resize(cut);
  }
  std::string out;
  for (char c : t) {
    out += c;
    if (c == '\n') out += indent;
  }
  return out + more;
}

// "json-label-match 0.5 (1 x 0.5), format 0 (failed)": each term's share of the reward.
std::string terms_text(const json& rollout) {
  std::string s;
  for (const auto& t : rollout.value("terms", json::array())) {
    if (!t.is_object()) continue;
    std::string one = t.value("name", std::string("?")) + " " + format_number(t.value("share", 0.0));
    if (t.value("weight", 1.0) != 1.0) {
      one += " (" + format_number(t.value("weight", 1.0)) + " x " + format_number(t.value("raw", 0.0)) + ")";
    }
    if (t.value("failed", false)) one += " (no score)";
    s += (s.empty() ? "" : ", ") + one;
  }
  return s;
}

std::string rollout_block(const json& r) {
  const std::string pad(14, ' ');  // under the labels below
  std::string head = "#" + std::to_string(r.value("index", int64_t{0})) + "  prompt " +
                     std::to_string(r.value("promptIndex", int64_t{0})) + "  reward " +
                     format_number(r.value("reward", 0.0));
  const std::string terms = terms_text(r);
  if (!terms.empty()) head += "  [" + terms + "]";
  head += "  " + std::to_string(r.value("completionTokens", int64_t{0})) + " tokens";
  if (!r.value("terminated", true)) head += ", cut at maxCompletionLength";
  if (r.contains("toolCalls")) {
    const int64_t calls = r.value("toolCalls", int64_t{0}), failed = r.value("toolFailures", int64_t{0});
    head += ", " + std::to_string(calls) + (calls == 1 ? " tool call" : " tool calls");
    if (failed > 0) head += " (" + std::to_string(failed) + " failed)";
  }
  std::string block = head + "\n";
  block += "  prompt:     " + shown_text(r.value("prompt", std::string()), pad) + "\n";
  block += "  completion: " + shown_text(r.value("completion", std::string()), pad) + "\n";
  return block;
}

int runs_rollouts(Context& ctx) {
  const std::string ref = ctx.inv.positionals[0];
  std::string path = "/v1/runs/" + seg(ref) + "/rollouts";
  int code = kExitOk;
  for (const char* flag : {"step", "best", "worst", "limit"}) {
    auto v = int_flag(ctx, flag, &code);
    if (code != kExitOk) return code;
    if (!v) continue;
    const std::string name = flag;
    if (name != "step" && (*v < 1 || *v > kMaxRollouts)) {
      return ctx.fail("--" + name + " must be between 1 and " + std::to_string(kMaxRollouts) + " (the most rollouts one answer shows), got " +
                          std::to_string(*v),
                      kExitUsage);
    }
    if (name == "step" && *v < 1) return ctx.fail("--step must be at least 1 (steps count from 1), got 0", kExitUsage);
    append_query(&path, name, std::to_string(*v));
  }
  if (ctx.inv.has("best") && ctx.inv.has("worst")) {
    return ctx.fail("--best and --worst exclude each other: ask for one", kExitUsage);
  }
  auto doc = ctx.get(path);
  if (!doc) return ctx.last_failure_code();
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  const std::string id = short_id(doc->value("runId", ref));
  const json rollouts = doc->value("rollouts", json::array());
  if (!(*doc)["step"].is_number()) {
    out("No rollouts recorded yet: run " + id + " is " + doc->value("phase", std::string()) +
        (is_terminal_phase(doc->value("phase", std::string())) ? " and sampled none.\n"
                                                               : "; they appear after its first step.\n"));
    return kExitOk;
  }
  const int64_t step = (*doc)["step"].get<int64_t>();
  const int64_t total = doc->value("total", int64_t{0});
  const std::string order = doc->value("order", std::string("batch"));
  std::string head = "Run " + id + ", generation batch of step " + std::to_string(step) + ": ";
  if (order == "best") head += "the " + std::to_string(rollouts.size()) + " best of " + std::to_string(total) + " rollouts";
  else if (order == "worst") head += "the " + std::to_string(rollouts.size()) + " worst of " + std::to_string(total) + " rollouts";
  else head += std::to_string(rollouts.size()) + " of " + std::to_string(total) + " rollouts";
  out(head + " (reward = the sum of the terms' shares)\n\n");
  for (const auto& r : rollouts) out(rollout_block(r) + "\n");
  if (static_cast<int64_t>(rollouts.size()) < total && order == "batch") {
    out("More in this batch: --limit " + std::to_string(std::min<int64_t>(total, kMaxRollouts)) +
        "; or --best N / --worst N.\n");
  }
  return kExitOk;
}

}  // namespace

Command runs_rollouts_command() {
  Command c{"rollouts", {}, "Show a reinforcement run's rollouts: prompt, completion, reward and its terms", "RUN",
            "The rollouts of one generation batch (the latest unless --step): each prompt, the sampled\n"
            "completion, its reward and each reward term's share of it (weight x the term's score),\n"
            "so that a reward a completion earns without doing the task (reward hacking) shows.\n"
            "--step N shows the batch step N trained on. At most 200 rollouts are shown at once.\n"
            "Only grpo and gspo runs have rollouts; a running run shows those of its steps so far.",
            {{"step", 0, "N", "the generation batch step N trained on (default: the latest)", ""},
             {"best", 0, "N", "the N highest rewards, highest first", ""},
             {"worst", 0, "N", "the N lowest rewards, lowest first", ""},
             {"limit", 0, "N", "at most N rollouts (default 50, max 200)", ""}},
            {}, runs_rollouts, 1, 1, {}};
  c.examples = {{"the latest batch's rollouts", "trainer runs rollouts 7d496e82"},
                {"the 5 best-rewarded completions of step 12: do they earn it?", "trainer runs rollouts 7d496e82 --step 12 --best 5"},
                {"the worst ones, as JSON", "trainer runs rollouts 7d496e82 --worst 5 -o json"}};
  return c;
}

}  // namespace trainer::cli

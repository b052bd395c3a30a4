// `trainer runs metrics RUN` (per-step figures; reward columns for RL runs) and `trainer runs
// hparams RUN` (the recorded hyperparameters).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <random>
#include <span>
#include <string_view>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/list_command.h"
#include "cli/command_support.h"
#include "cli/format.h"
#include "cli/run_view.h"
#include "common/spelling.h"
#include "plan/plan.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

struct MetricColumn {
  const char* key;
  const char* header;
};

constexpr MetricColumn kDefaultMetricColumns[] = {
    {"step", "STEP"},
    {"loss", "LOSS"},
    {"learningRate", "LR"},
    {"gradNorm", "GRAD NORM"},
    {"tokenAccuracy", "TOKEN ACC"},
    {"tokensPerSecond", "TOK/S"},
    {"validationLoss", "VAL LOSS"},
};

// Reinforcement runs: the reward, and the shares of groups whose rewards do not spread (they
// teach nothing) and of rollouts scored zero and full.
constexpr MetricColumn kRlMetricColumns[] = {
    {"step", "STEP"},
    {"reward", "REWARD"},
    {"zeroSpreadGroupShare", "ZERO-SPREAD GROUPS"},
    {"zeroRewardShare", "SCORED 0"},
    {"fullRewardShare", "SCORED 1"},
    {"learningRate", "LR"},
    {"gradNorm", "GRAD NORM"},
    {"tokensPerSecond", "TOK/S"},
};

constexpr std::string_view kTermPrefix = "terms:";

bool is_rl_steps(const json& steps) {
  return std::any_of(steps.begin(), steps.end(), [](const json& s) { return s.is_object() && s.contains("reward"); });
}

// A step's figure by the name --fields takes: top level, under `measured`, or terms:NAME.
std::string cell(const json& row, const std::string& key) {
  const json* v = nullptr;
  if (key.rfind(kTermPrefix, 0) == 0) {
    const std::string term = key.substr(kTermPrefix.size());
    if (row.contains("rewardTerms") && row["rewardTerms"].is_object() && row["rewardTerms"].contains(term)) {
      v = &row["rewardTerms"][term];
    }
  } else if (row.contains(key)) {
    v = &row[key];
  } else if (row.contains("measured") && row["measured"].is_object() && row["measured"].contains(key)) {
    v = &row["measured"][key];
  }
  if (!v || v->is_null()) return "";
  if (v->is_number()) {
    if (key == "tokensPerSecond") return format_thousands(static_cast<int64_t>(v->get<double>() + 0.5));
    return format_number(v->get<double>());
  }
  if (v->is_string()) return v->get<std::string>();
  return v->dump();
}

// The metric names of recorded steps: top-level figures, those under `measured`, and
// terms:NAME for each reward term.
std::vector<std::string> metric_names(const json& steps) {
  std::vector<std::string> names;
  auto add = [&](const std::string& n) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  if (is_rl_steps(steps)) {
    for (const auto& c : kRlMetricColumns) add(c.key);
  } else {
    for (const auto& c : kDefaultMetricColumns) add(c.key);
  }
  for (const auto& s : steps) {
    if (!s.is_object()) continue;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "measured" && it->is_object()) {
        for (auto m = it->begin(); m != it->end(); ++m) add(m.key());
      } else if (it.key() == "rewardTerms" && it->is_object()) {
        for (auto m = it->begin(); m != it->end(); ++m) add(std::string(kTermPrefix) + m.key());
      } else if (!it->is_object() && !it->is_array()) {
        add(it.key());
      }
    }
  }
  return names;
}

std::vector<std::string> split_fields(const std::string& text) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    std::string f = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!f.empty()) fields.push_back(f);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return fields;
}

int runs_metrics(Context& ctx) {
  const std::string ref = ctx.inv.positionals[0];
  std::string path = "/v1/runs/" + seg(ref) + "/metrics";
  int code = kExitOk;
  auto limit = int_flag(ctx, "limit", &code);
  if (code != kExitOk) return code;
  if (limit) append_query(&path, "limit", std::to_string(*limit));
  auto doc = ctx.get(path);
  if (!doc) return ctx.last_failure_code();
  const json steps = doc->value("steps", json::array());
  const std::vector<std::string> requested = split_fields(ctx.inv.get_or("fields", ""));
  if (!requested.empty() && !steps.empty()) {
    // A name no step carries would print an empty column: refuse it, naming the valid ones.
    const std::vector<std::string> known = metric_names(steps);
    for (const auto& f : requested) {
      if (std::find(known.begin(), known.end(), f) != known.end()) continue;
      auto near = nearest_name(f, known);
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return ctx.fail("--fields: no metric named \"" + f + "\"" + (near ? " (did you mean " + *near + "?)" : "") +
                          "; the steps of this run carry: " + list,
                      kExitUsage);
    }
  }
  if (!ctx.text()) {
    ctx.print_json(*doc);
    return kExitOk;
  }
  if (steps.empty()) {
    // Say why there are none: a run that ended without a step is not "yet" going to have any.
    auto run = ctx.get("/v1/runs/" + seg(ref));
    if (!run) return ctx.last_failure_code();
    const std::string phase = run->value("phase", std::string());
    const std::string id = short_id(run->value("runId", ref));
    if (phase == "FAILED") {
      std::string reason = run->value("failureReason", std::string());
      reason = reason.substr(0, reason.find('\n'));
      out("No steps recorded: run " + id + " FAILED before its first step" + (reason.empty() ? "" : ": " + reason) +
          "\nSee `trainer runs get " + id + "` for its phases.\n");
    } else if (is_terminal_phase(phase)) {
      out("No steps recorded: run " + id + " ended " + phase + " before its first step.\n");
    } else {
      out("No steps recorded yet: run " + id + " is " + phase + "; follow it with `trainer runs wait " + id + "`.\n");
    }
    return kExitOk;
  }
  std::vector<std::string> keys, header;
  const bool rl = is_rl_steps(steps);
  for (const auto& c : rl ? std::span<const MetricColumn>(kRlMetricColumns) : std::span<const MetricColumn>(kDefaultMetricColumns)) {
    // Validation loss only when some step has it.
    if (std::string(c.key) == "validationLoss" &&
        std::none_of(steps.begin(), steps.end(), [](const json& s) { return s.contains("validationLoss"); })) {
      continue;
    }
    keys.push_back(c.key);
    header.push_back(c.header);
  }
  for (const auto& f : requested) {
    if (std::find(keys.begin(), keys.end(), f) != keys.end()) continue;
    keys.push_back(f);
    std::string h = f.rfind(kTermPrefix, 0) == 0 ? f.substr(kTermPrefix.size()) : f;
    for (auto& ch : h) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    header.push_back(h);
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : steps) {
    std::vector<std::string> row;
    for (const auto& k : keys) row.push_back(cell(s, k));
    rows.push_back(row);
  }
  out(render_table(header, rows));
  return kExitOk;
}

int runs_hparams(Context& ctx) {
  return show(ctx, "/v1/runs/" + seg(ctx.inv.positionals[0]) + "/hparams", [&](const json& doc) {
    std::vector<std::pair<std::string, std::string>> rows;
    rows.push_back({"sha", doc.value("sha", std::string())});
    if (doc.contains("hparams") && doc["hparams"].is_object()) {
      for (auto it = doc["hparams"].begin(); it != doc["hparams"].end(); ++it) {
        rows.push_back({it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump()});
      }
    }
    out(render_fields(rows));
  });
}

}  // namespace

Command runs_metrics_command() {
  Command metrics{"metrics", {}, "Show a run's per-step metrics", "RUN",
                  "Supervised runs show the loss; reinforcement (grpo, gspo) runs show the mean reward, the\n"
                  "share of groups whose rewards did not spread (they teach nothing), and the shares of\n"
                  "rollouts scored 0 and 1.\n"
                  "--fields adds columns by the names the steps carry: any figure (batchTokens, stepSeconds,\n"
                  "entropy, clipRatio, ...), kl, maxMemoryGb, maxMemoryReservedGb, maxDeviceMemoryGb,\n"
                  "trainerIdle, rolloutIdle, and terms:NAME for a reward term's weighted mean (terms:total\n"
                  "is the reward). A name no step carries is refused with the list of those it does.",
                  {{"limit", 0, "N", "only the last N steps", ""},
                   {"fields", 0, "A,B", "extra columns by metric name (e.g. batchTokens,kl,terms:json-label-match)", ""}},
                  {}, runs_metrics, 1, 1, {}};
  metrics.examples = {{"every step's loss, learning rate and rate", "trainer runs metrics 7d496e82"},
                      {"the last 5 steps with two more columns",
                       "trainer runs metrics 7d496e82 --limit 5 --fields batchTokens,stepSeconds"},
                      {"a reinforcement run's KL, idle fractions and one reward term",
                       "trainer runs metrics 7d496e82 --fields kl,trainerIdle,rolloutIdle,terms:json-label-match"}};
  return metrics;
}

Command runs_hparams_command() {
  Command hparams{"hparams", {}, "Show a run's recorded hyperparameters, flattened, and their sha", "RUN", "",
                  {}, {}, runs_hparams, 1, 1, {}};
  hparams.examples = {{"the settings a run trained with", "trainer runs hparams 7d496e82"},
                      {"as JSON, to compare two runs", "trainer runs hparams 7d496e82 -o json"}};
  return hparams;
}

}  // namespace trainer::cli

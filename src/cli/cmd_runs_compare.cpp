// `trainer runs compare RUN --baseline RUN2`: a supervised run's loss against a baseline's,
// window by window, with the gradient spikes of each and the first window past a margin. The
// figures come from the two runs' recorded steps (`/v1/runs/{id}/metrics`); nothing is stored.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

constexpr long long kDefaultWindow = 10;
constexpr double kDefaultSpikeFactor = 3.0;
constexpr double kDefaultMargin = 0.1;

// Plan fields two runs must share for their losses to be comparable step by step.
// config.engine: the same plan on two engines is how a user checks one engine against another
// (docs/engines.md); a plan that does not name its engine trains on the native one.
constexpr const char* kComparedPlanFields[] = {"baseModel", "config.method", "config.engine", "config.dataset",
                                               "config.maxSeqLength"};

const json* at_path(const json& doc, const std::string& dotted) {
  const json* cur = &doc;
  size_t start = 0;
  while (start <= dotted.size()) {
    const size_t dot = dotted.find('.', start);
    const std::string key = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!cur->is_object() || !cur->contains(key)) return nullptr;
    cur = &(*cur)[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

std::optional<double> parse_double(const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size() || !std::isfinite(v)) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

struct StepFigures {
  std::optional<double> loss, grad_norm;
};

std::map<int64_t, StepFigures> step_figures(const json& steps) {
  std::map<int64_t, StepFigures> out;
  for (const auto& s : steps) {
    if (!s.is_object() || !s.contains("step") || !s["step"].is_number_integer()) continue;
    StepFigures f;
    if (s.contains("loss") && s["loss"].is_number()) f.loss = s["loss"].get<double>();
    if (s.contains("gradNorm") && s["gradNorm"].is_number()) f.grad_norm = s["gradNorm"].get<double>();
    out[s["step"].get<int64_t>()] = f;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Steps whose pre-clip gradient norm is over `factor` times the run's median.
json spikes_of(const std::string& run_id, const std::map<int64_t, StepFigures>& steps, double factor) {
  std::vector<double> norms;
  for (const auto& [step, f] : steps) {
    if (f.grad_norm) norms.push_back(*f.grad_norm);
  }
  json out = json::array();
  if (norms.empty()) return out;
  const double med = median(norms);
  for (const auto& [step, f] : steps) {
    if (!f.grad_norm || !(med > 0) || !(*f.grad_norm > factor * med)) continue;
    out.push_back({{"runId", run_id}, {"step", step}, {"gradNorm", *f.grad_norm}, {"medianGradNorm", med},
                   {"factor", *f.grad_norm / med}});
  }
  return out;
}

// The text view of a comparison `result` (the document -o json prints).
void print_compare_text(const json& result) {
  const std::string run_id = result["runId"], base_id = result["baselineId"];
  const long long w = result["window"].get<long long>();
  const double spike_factor = result["spikeFactor"].get<double>(), margin = result["margin"].get<double>();
  const json& differences = result["planDifferences"];
  const json& windows = result["windows"];
  const json& first_past = result["firstPastMargin"];
  const json& spikes = result["spikes"];
  out("Run " + short_id(run_id) + " against baseline " + short_id(base_id) + ": mean loss by window of " +
      std::to_string(w) + " step" + (w == 1 ? "" : "s") + " (difference = run - baseline)\n");
  if (!differences.empty()) {
    for (const auto& d : differences) {
      out("  plans differ (--across-plans): " + d["field"].get<std::string>() + " " + d["run"].dump() + " vs " +
          d["baseline"].dump() + "\n");
    }
  }
  if (windows.empty()) {
    out("No step has a loss in both runs yet.\n");
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const auto& win : windows) {
      rows.push_back({std::to_string(win["firstStep"].get<int64_t>()) + "-" +
                          std::to_string(win["lastStep"].get<int64_t>()),
                      format_number(win["runLoss"].get<double>()), format_number(win["baselineLoss"].get<double>()),
                      format_number(win["difference"].get<double>())});
    }
    out(render_table({"STEPS", "RUN LOSS", "BASELINE LOSS", "DIFFERENCE"}, rows));
  }
  if (first_past.is_null()) {
    out("No window differs by more than the margin (" + format_number(margin) + ").\n");
  } else {
    out("First window past the margin (" + format_number(margin) + "): steps " +
        std::to_string(first_past["firstStep"].get<int64_t>()) + "-" +
        std::to_string(first_past["lastStep"].get<int64_t>()) + ", the run " +
        (first_past["direction"] == "worse" ? "worse" : "better") + " by " +
        format_number(std::fabs(first_past["difference"].get<double>())) + "\n");
  }
  if (spikes.empty()) {
    out("No gradient spikes (pre-clip norm over " + format_number(spike_factor) + "x its run's median).\n");
  } else {
    out("Gradient spikes (pre-clip norm over " + format_number(spike_factor) + "x its run's median):\n");
    std::vector<std::vector<std::string>> rows;
    for (const auto& s : spikes) {
      rows.push_back({short_id(s["runId"].get<std::string>()), std::to_string(s["step"].get<int64_t>()),
                      format_number(s["gradNorm"].get<double>()), format_number(s["medianGradNorm"].get<double>()),
                      format_number(s["factor"].get<double>()) + "x"});
    }
    out(render_table({"RUN", "STEP", "GRAD NORM", "MEDIAN", "FACTOR"}, rows));
  }
}

int runs_compare(Context& ctx) {
  const std::string ref = ctx.inv.positionals[0];
  const std::string baseline_ref = ctx.inv.get_or("baseline", "");
  if (baseline_ref.empty()) {
    return ctx.fail("runs compare: --baseline RUN is required (the run to compare against)", kExitUsage);
  }
  int code = kExitOk;
  const auto window = int_flag(ctx, "window", &code);
  if (code != kExitOk) return code;
  const long long w = window.value_or(kDefaultWindow);
  if (w < 1) return ctx.fail("runs compare: --window must be at least 1 step, got " + std::to_string(w), kExitUsage);
  double spike_factor = kDefaultSpikeFactor, margin = kDefaultMargin;
  if (ctx.inv.has("spike-factor")) {
    const auto v = parse_double(ctx.inv.get_or("spike-factor", ""));
    if (!v || *v <= 1) {
      return ctx.fail("runs compare: --spike-factor must be a number above 1, got '" +
                          ctx.inv.get_or("spike-factor", "") + "'",
                      kExitUsage);
    }
    spike_factor = *v;
  }
  if (ctx.inv.has("margin")) {
    const auto v = parse_double(ctx.inv.get_or("margin", ""));
    if (!v || *v < 0) {
      return ctx.fail("runs compare: --margin must be a non-negative loss difference, got '" +
                          ctx.inv.get_or("margin", "") + "'",
                      kExitUsage);
    }
    margin = *v;
  }
  const bool across_plans = ctx.inv.has("across-plans");

  auto run = ctx.get("/v1/runs/" + seg(ref));
  if (!run) return ctx.last_failure_code();
  auto base = ctx.get("/v1/runs/" + seg(baseline_ref));
  if (!base) return ctx.last_failure_code();
  const std::string run_id = run->value("runId", ref), base_id = base->value("runId", baseline_ref);
  if (run_id == base_id) {
    return ctx.fail("runs compare: " + short_id(run_id) + " is both the run and the baseline; name two runs", kExitUsage);
  }
  for (const json* r : {&*run, &*base}) {
    const std::string method = r->value("method", std::string("sft"));
    if (method != "sft") {
      return ctx.fail("runs compare: run " + short_id(r->value("runId", std::string())) + " trains by " + method +
                          "; runs compare reads supervised (sft) losses only (see `trainer runs metrics` for "
                          "reward)",
                      kExitUsage);
    }
  }
  const json plan = run->value("plan", json::object()), base_plan = base->value("plan", json::object());
  json differences = json::array();
  for (const char* field : kComparedPlanFields) {
    const json* a = at_path(plan, field);
    const json* b = at_path(base_plan, field);
    const json absent = std::string_view(field) == "config.engine" ? json("native") : json(nullptr);
    const json av = a ? *a : absent, bv = b ? *b : absent;
    if (av != bv) differences.push_back({{"field", field}, {"run", av}, {"baseline", bv}});
  }
  if (!differences.empty() && !across_plans) {
    std::string list;
    for (const auto& d : differences) {
      list += (list.empty() ? "" : "; ") + d["field"].get<std::string>() + " " + d["run"].dump() + " vs " +
              d["baseline"].dump();
    }
    return ctx.fail("runs compare: the runs train different plans (" + list +
                        "), so their losses are not comparable step by step; add --across-plans to compare anyway",
                    kExitUsage);
  }

  auto run_metrics = ctx.get("/v1/runs/" + seg(run_id) + "/metrics?limit=100000");
  if (!run_metrics) return ctx.last_failure_code();
  auto base_metrics = ctx.get("/v1/runs/" + seg(base_id) + "/metrics?limit=100000");
  if (!base_metrics) return ctx.last_failure_code();
  const auto a = step_figures(run_metrics->value("steps", json::array()));
  const auto b = step_figures(base_metrics->value("steps", json::array()));

  // Windows of `w` steps (1..w, w+1..2w, ...) over the steps both runs recorded a loss for.
  std::map<int64_t, std::pair<std::vector<double>, std::vector<double>>> by_window;
  for (const auto& [step, f] : a) {
    auto it = b.find(step);
    if (!f.loss || it == b.end() || !it->second.loss) continue;
    auto& cell = by_window[(step - 1) / w];
    cell.first.push_back(*f.loss);
    cell.second.push_back(*it->second.loss);
  }
  json windows = json::array();
  json first_past = nullptr;
  for (const auto& [index, losses] : by_window) {
    auto mean = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x;
      return s / static_cast<double>(v.size());
    };
    const double ra = mean(losses.first), rb = mean(losses.second);
    json win = {{"firstStep", index * w + 1}, {"lastStep", (index + 1) * w}, {"steps", losses.first.size()},
                {"runLoss", ra}, {"baselineLoss", rb}, {"difference", ra - rb}};
    if (first_past.is_null() && std::fabs(ra - rb) > margin) {
      first_past = win;
      first_past["direction"] = ra > rb ? "worse" : "better";
    }
    windows.push_back(std::move(win));
  }
  json spikes = spikes_of(run_id, a, spike_factor);
  for (auto& s : spikes_of(base_id, b, spike_factor)) spikes.push_back(std::move(s));

  const json result = {{"runId", run_id},          {"baselineId", base_id},      {"window", w},
                       {"spikeFactor", spike_factor}, {"margin", margin},       {"acrossPlans", across_plans},
                       {"planDifferences", differences}, {"windows", windows}, {"firstPastMargin", first_past},
                       {"spikes", spikes}};
  if (!ctx.text()) {
    ctx.print_json(result);
    return kExitOk;
  }
  print_compare_text(result);
  return kExitOk;
}

}  // namespace

Command runs_compare_command() {
  Command c{"compare", {}, "Compare a supervised run's loss with a baseline run's, window by window", "RUN",
            "Steps are matched by number; each window of --window steps shows both runs' mean loss and\n"
            "the difference (run - baseline). The first window whose difference is over --margin is\n"
            "named. A gradient spike is a step whose pre-clip gradient norm is over --spike-factor times\n"
            "its run's median. Both runs must be sft runs of the same base model, dataset and maximum\n"
            "sequence length; --across-plans compares runs that differ there anyway.",
            {{"baseline", 0, "RUN", "the run to compare against (required)", ""},
             {"window", 0, "N", "steps per window (default 10)", ""},
             {"spike-factor", 0, "X", "a spike is a gradient norm over X times its run's median (default 3)", ""},
             {"margin", 0, "LOSS", "a window is past the margin when |difference| is over it (default 0.1)", ""},
             {"across-plans", 0, "", "compare runs whose model, dataset or length differ", ""}},
            {}, runs_compare, 1, 1, {}};
  c.examples = {{"a run against the one it should beat", "trainer runs compare 7d496e82 --baseline 1f0c33a9"},
                {"wider windows and a stricter spike rule",
                 "trainer runs compare 7d496e82 --baseline 1f0c33a9 --window 20 --spike-factor 5"},
                {"the first window past the margin, in a script",
                 "trainer runs compare 7d496e82 --baseline 1f0c33a9 --jq .firstPastMargin"}};
  return c;
}

}  // namespace trainer::cli

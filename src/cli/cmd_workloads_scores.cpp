// `trainer workloads scores WORKLOAD [--dataset D] [--grader G]`: one table per base-model
// revision, the baseline's score beside one column per training configuration, under the
// workload's current evaluation setting or an older one the flags name.
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/list_command.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using json = nlohmann::json;

std::string signed_score(const json& v) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.4f", v.get<double>());
  return buf;
}

std::string who(const json& cell) {
  if (cell.value("modelId", json(nullptr)).is_string()) return "model " + short_id(cell["modelId"].get<std::string>());
  if (cell.value("runId", json(nullptr)).is_string()) return "run " + short_id(cell["runId"].get<std::string>());
  return "-";
}

// "[-0.0833, +0.4167] no clear difference": a column's interval against the baseline and its verdict.
std::string interval_text(const json& v) {
  if (!v.is_object() || !v.value("low", json(nullptr)).is_number()) return "-";
  return "[" + signed_score(v.value("low", json(nullptr))) + ", " + signed_score(v.value("high", json(nullptr))) + "] " +
         v.value("verdict", std::string());
}

std::vector<std::string> row_of(const std::string& name, const json& cell, bool baseline) {
  return {name, score_text(cell, "meanScore"), score_text(cell, "exactMatchRate"), signed_score(cell.value("delta", json(nullptr))),
          baseline ? "-" : interval_text(cell.value("versusBaseline", json(nullptr))), str(cell, "evaluations"), who(cell),
          short_id(str(cell, "evaluationId"))};
}

int workloads_scores(Context& ctx) {
  const std::string& workload = ctx.inv.positionals[0];
  std::string path = "/v1/workloads/" + seg(workload) + "/scores";
  if (auto d = ctx.inv.get("dataset")) append_query(&path, "dataset", *d);
  if (auto g = ctx.inv.get("grader")) append_query(&path, "grader", *g);
  return show(ctx, path, [&](const json& doc) {
    const json setting = doc.value("setting", json::object());
    out("Workload " + str(doc.value("workload", json::object()), "name") + ": dataset " +
        short_id(str(setting, "dataset")) + ", grader " + str(setting, "grader") +
        (setting.contains("graderInstructions") ? " (with judge instructions)" : "") +
        (setting.value("current", false) ? " (the current setting)" : " (an older setting)") + "\n");
    const json tables = doc.value("tables", json::array());
    if (tables.empty()) {
      out("No completed evaluations under this setting. Score a baseline with `trainer evaluations start --model "
          "BASE_MODEL --workload " + workload + "` and a candidate with `trainer evaluations start --model RUN`.\n");
    }
    for (const auto& t : tables) {
      out("\nBase model " + str(t, "baseModel") +
          (str(t, "revision").empty() ? "" : " (revision " + short_id(str(t, "revision")) + ")") + "\n");
      std::vector<std::vector<std::string>> rows;
      const json baseline = t.value("baseline", json(nullptr));
      if (baseline.is_object()) rows.push_back(row_of("baseline", baseline, true));
      else rows.push_back({"baseline", "-", "-", "-", "-", "0", "not evaluated", "-"});
      for (const auto& c : t.value("columns", json::array())) rows.push_back(row_of(str(c, "config"), c, false));
      out(render_table({"CONFIG", "SCORE", "EXACT", "VS BASELINE", "95% INTERVAL", "EVALS", "NEWEST OF", "EVALUATION"}, rows));
    }
    const json others = doc.value("otherSettings", json::array());
    if (!others.empty()) {
      out("\nOther settings with scores (see them with --dataset and --grader):\n");
      std::vector<std::vector<std::string>> rows;
      for (const auto& s : others) {
        rows.push_back({short_id(str(s, "dataset")), str(s, "grader") + (s.value("hasInstructions", false) ? " (instructions)" : ""),
                        str(s, "evaluations")});
      }
      out(render_table({"DATASET", "GRADER", "EVALUATIONS"}, rows));
    }
  });
}

}  // namespace

Command workloads_scores_command() {
  Command c{"scores", {}, "Show score tables: the baseline beside one column per training configuration", "WORKLOAD",
            "One table per base-model revision. A column is a training configuration (runs with the same settings); "
            "its header is the newest such run's config name (`trainer runs annotate --config-name`), with a short "
            "settings hash added where two configurations carry one name. Each cell is "
            "the newest completed evaluation of that configuration's models, with how many there were, and the "
            "95% paired-bootstrap interval of its score difference against the baseline's newest evaluation "
            "(better, worse, or no clear difference). Only "
            "evaluations on the workload's current dataset, grader and judge instructions appear unless --dataset "
            "and --grader name an older setting.",
            {{"dataset", 0, "DATASET", "an older setting's dataset (name or hash)", ""},
             {"grader", 0, "GRADER", "an older setting's grader", ""}},
            {},
            workloads_scores,
            1,
            1,
            {}};
  c.examples = {{"the current table", "trainer workloads scores sentiment-demo"},
                {"an older setting's table", "trainer workloads scores sentiment-demo --dataset sentiment-v1 --grader json-label-match"},
                {"the best configuration's score", "trainer workloads scores sentiment-demo --jq '.tables[0].columns[0].meanScore'"}};
  return c;
}

}  // namespace trainer::cli

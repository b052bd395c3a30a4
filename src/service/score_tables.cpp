// Workload score tables (`workloads scores`): a workload's completed evaluations under one
// evaluation setting (dataset, grader, judge instructions), one table per base-model revision,
// the baseline beside one column per training configuration. See docs/evaluations.md.
#include <algorithm>
#include <map>

#include "service/evaluation_rows.h"
#include "service/paired_bootstrap.h"
#include "service/registry.h"
#include "service/workloads.h"

namespace trainer::service {
namespace {

// The judge instructions a grader carries ("" = none).
std::string instructions_of(const json& grader) {
  return grader.is_object() ? grader.value("graderInstructions", std::string()) : std::string();
}

// One evaluation's place in a table: which base-model revision, and which column.
struct Placement {
  std::string base_model;
  std::string revision;   // the base model's content hash ("" = unknown)
  bool baseline = false;  // a base model's own answers
  std::string column;     // training configuration: the settings sha, or the imported model's id
  std::string config_name;
  double created_at = 0;  // the producing run's submission (the newest run names the column)
  std::string run_id;
};

double score_of(const json& report, const char* key) {
  const json v = report.is_object() ? report.value(key, json(nullptr)) : json(nullptr);
  return v.is_number() ? v.get<double>() : -1;
}

json cell_of(const std::vector<const json*>& evaluations) {
  // The newest evaluation speaks for the cell; the count says how many there were.
  const json* newest = evaluations.front();
  for (const json* e : evaluations) {
    if (e->value("endedAt", std::string()) > newest->value("endedAt", std::string())) newest = e;
  }
  const json report = newest->value("report", json::object());
  const json model = newest->value("model", json::object());
  json cell = {{"meanScore", report.value("meanScore", json(nullptr))},
               {"exactMatchRate", report.value("exactMatchRate", json(nullptr))},
               {"scoredRows", report.value("scoredRows", json(nullptr))},
               {"evaluationId", (*newest)["evaluationId"]},
               {"evaluatedAt", newest->value("endedAt", json(nullptr))},
               {"evaluations", evaluations.size()},
               {"modelId", model.value("modelId", json(nullptr))},
               {"runId", model.value("runId", json(nullptr))}};
  return cell;
}

}  // namespace

Result<json> Workloads::scores(const std::string& ref, const ScoreQuery& query) {
  std::lock_guard<std::mutex> lock(core_.mu);
  auto w = resolve(ref, "workload");
  if (!w.is_ok()) return w.status();
  const json current = w->value("evaluation", json::object());

  // The setting: the workload's current one, or the one the flags name.
  const std::string current_dataset =
      current.value("dataset", json(nullptr)).is_string() ? current["dataset"].get<std::string>() : "";
  const std::string current_grader = current.value("grader", std::string(kDefaultGrader));
  const std::string current_instructions = current.value("graderInstructions", std::string());
  std::string dataset = current_dataset, grader = current_grader, instructions = current_instructions;
  if (!query.dataset.empty()) {
    auto d = datasets_.resolve(query.dataset, "dataset");
    if (!d.is_ok()) return d.status();
    dataset = (*d)["hash"].get<std::string>();
  }
  if (!query.grader.empty()) {
    TRAINER_RETURN_IF_ERROR(check_grader("grader", query.grader));
    // Another grader's instructions are not this one's: name the grader, compare without them.
    if (query.grader != grader) instructions.clear();
    grader = query.grader;
  }
  if (dataset.empty()) {
    return invalid_field("dataset", "workload '" + (*w)["name"].get<std::string>() +
                                        "' has no evaluation dataset; name one with --dataset, or set one with "
                                        "`trainer workloads set-evaluation`");
  }
  const bool is_current =
      dataset == current_dataset && grader == current_grader && instructions == current_instructions;

  auto all = core_.store->list_evaluations({"COMPLETED"});
  if (!all.is_ok()) return all.status();
  const std::string workload_id = (*w)["id"].get<std::string>();

  // Where each evaluation of this workload and setting goes; other settings are counted, so a
  // user sees what older tables exist.
  std::map<std::string, std::map<std::string, std::vector<const json*>>> cells;  // table -> column -> evals
  std::map<std::string, Placement> columns;                                      // table|column -> placement
  std::map<std::string, std::pair<std::string, std::string>> tables;             // table -> base model, revision
  std::map<std::string, json> other_settings;
  std::map<std::string, std::optional<RunRecord>> runs;
  for (const json& e : *all) {
    if (!(e["workload"].is_object() && e["workload"].value("id", std::string()) == workload_id)) continue;
    const std::string e_dataset = e["dataset"].value("hash", std::string());
    const std::string e_grader = e["grader"].value("kind", std::string());
    const std::string e_instructions = instructions_of(e["grader"]);
    if (e_dataset != dataset || e_grader != grader || e_instructions != instructions) {
      const std::string key = e_dataset + "|" + e_grader + "|" + e_instructions;
      json& s = other_settings[key];
      if (s.is_null()) {
        s = {{"dataset", e_dataset}, {"grader", e_grader}, {"hasInstructions", !e_instructions.empty()}, {"evaluations", 0}};
      }
      s["evaluations"] = s["evaluations"].get<int64_t>() + 1;
      continue;
    }
    const json& m = e["model"];
    const std::string kind = m.value("kind", std::string());
    Placement p;
    p.base_model = m.value("baseModel", std::string());
    p.baseline = kind == "base" || kind == "registeredBase";
    std::optional<json> registered;
    if (m.contains("modelId")) {
      auto r = core_.store->get_trained_model(m["modelId"].get<std::string>());
      if (r.is_ok() && r->has_value()) registered = **r;
    }
    if (registered) p.revision = (*registered)["baseModel"].value("contentHash", std::string());
    if (p.baseline) {
      if (p.revision.empty()) {
        auto b = base_models_.resolve(p.base_model, "model");
        if (b.is_ok() && (*b)["contentHash"].is_string()) p.revision = (*b)["contentHash"].get<std::string>();
      }
      p.column = "baseline";
    } else {
      p.run_id = m.value("runId", std::string());
      if (p.run_id.empty() && registered) {
        p.run_id = (*registered).value("source", json::object()).value("runId", std::string());
      }
      if (!p.run_id.empty()) {
        if (!runs.count(p.run_id)) {
          auto r = core_.resolve_run(p.run_id, "run");
          runs[p.run_id] = r.is_ok() ? std::optional<RunRecord>(std::move(*r)) : std::nullopt;
        }
        const auto& run = runs[p.run_id];
        if (run) {
          const std::string sha = run->view.value("settingsSha", std::string());
          p.column = sha.empty() ? "run:" + run->id : sha;
          p.config_name = run->view.value("configName", std::string());
          p.created_at = run->created_at;
          if (p.revision.empty()) p.revision = run->base_model_sha.value_or("");
        }
      }
      if (p.column.empty()) p.column = "model:" + m.value("modelId", m.value("ref", std::string()));
    }
    const std::string table = p.base_model + "@" + p.revision;
    tables[table] = {p.base_model, p.revision};
    cells[table][p.column].push_back(&e);
    // The column's name: the newest run's configName that has one.
    Placement& known = columns[table + "|" + p.column];
    if (known.column.empty() || (!p.config_name.empty() && (known.config_name.empty() || p.created_at >= known.created_at))) {
      known = p;
    }
  }

  json out_tables = json::array();
  for (const auto& [table, base] : tables) {
    json baseline = nullptr;
    double baseline_score = -1;
    if (cells[table].count("baseline")) {
      baseline = cell_of(cells[table]["baseline"]);
      baseline_score = score_of(baseline, "meanScore");
    }
    json cols = json::array();
    for (const auto& [column, evaluations] : cells[table]) {
      if (column == "baseline") continue;
      const Placement& p = columns[table + "|" + column];
      json cell = cell_of(evaluations);
      std::string header = p.config_name;
      if (header.empty()) {
        header = column.rfind("model:", 0) == 0 ? "import " + column.substr(6, 12)
                 : column.rfind("run:", 0) == 0 ? "run " + column.substr(4, 12)
                                                : "config " + column.substr(0, 12);
      }
      cell["config"] = header;
      cell["configName"] = p.config_name.empty() ? json(nullptr) : json(p.config_name);
      cell["settingsSha"] = column.find(':') == std::string::npos ? json(column) : json(nullptr);
      const double score = score_of(cell, "meanScore");
      cell["delta"] = baseline_score >= 0 && score >= 0 ? json(score - baseline_score) : json(nullptr);
      // Whether the column beats the baseline by more than chance: the paired bootstrap of the
      // two newest evaluations' rows (the same dataset and grader, so the same lines).
      cell["versusBaseline"] = nullptr;
      if (baseline.is_object()) {
        auto mine = evaluation_row_scores(core_, cell["evaluationId"].get<std::string>());
        auto theirs = evaluation_row_scores(core_, baseline["evaluationId"].get<std::string>());
        if (mine.is_ok() && theirs.is_ok()) {
          if (auto iv = paired_bootstrap(paired_differences(*mine, *theirs))) cell["versusBaseline"] = bootstrap_json(*iv);
        }
      }
      cols.push_back(std::move(cell));
    }
    // Two training configurations never share a header: a name two settings hashes carry gets
    // each one's short hash (or run id) as a suffix.
    std::map<std::string, int> uses;
    for (const auto& c : cols) ++uses[c["config"].get<std::string>()];
    for (auto& c : cols) {
      if (uses[c["config"].get<std::string>()] < 2) continue;
      const std::string suffix = c["settingsSha"].is_string() ? c["settingsSha"].get<std::string>().substr(0, 8)
                                 : c["runId"].is_string()     ? "run " + c["runId"].get<std::string>().substr(0, 8)
                                                              : c.value("evaluationId", std::string()).substr(0, 8);
      c["config"] = c["config"].get<std::string>() + " (" + suffix + ")";
    }
    // Best first: the column a promotion decision looks at leads.
    std::stable_sort(cols.begin(), cols.end(), [](const json& a, const json& b) {
      return score_of(a, "meanScore") > score_of(b, "meanScore");
    });
    out_tables.push_back({{"baseModel", base.first},
                          {"revision", base.second.empty() ? json(nullptr) : json(base.second)},
                          {"baseline", baseline},
                          {"columns", cols}});
  }
  json others = json::array();
  for (auto& [key, s] : other_settings) others.push_back(std::move(s));
  json setting = {{"dataset", dataset}, {"grader", grader}, {"current", is_current}};
  if (!instructions.empty()) setting["graderInstructions"] = instructions;
  return json{{"workload", {{"id", (*w)["id"]}, {"name", (*w)["name"]}}},
              {"setting", setting},
              {"tables", out_tables},
              {"statistics", bootstrap_method_json()},
              {"otherSettings", others}};
}

}  // namespace trainer::service

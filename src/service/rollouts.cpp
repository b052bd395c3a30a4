// A reinforcement run's rollouts (`runs rollouts`): what each generation batch sampled and how
// it was scored, read from the rollouts.jsonl files its attempts' jobs append to
// (engine/rl/grpo.cpp; docs/rl.md, "Rollouts").
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/json_parse.h"
#include "service/service_state.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

// Longest line of a rollouts file taken (a completion is at most maxCompletionLength tokens).
constexpr size_t kMaxRolloutLineBytes = size_t{4} << 20;

// Rollouts by their generation batch's first step. A later attempt's batch replaces the same
// step of an earlier one (a resumed run samples from where it resumed).
using RolloutsByStep = std::map<int64_t, std::vector<json>>;

void read_rollouts_file(const fs::path& path, RolloutsByStep* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::map<int64_t, std::vector<json>> seen;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a last line without its newline is still being written
    if (line.empty() || line.size() > kMaxRolloutLineBytes) continue;
    auto doc = parse_json(line, "rollout");
    if (!doc.is_ok() || !doc->is_object() || !doc->contains("step") || !(*doc)["step"].is_number_integer()) continue;
    const int64_t step = (*doc)["step"].get<int64_t>();
    seen[step].push_back(std::move(*doc));
  }
  for (auto& [step, rows] : seen) (*out)[step] = std::move(rows);
}

// One rollout as the API shows it: its position in the batch, and each term's share of the
// reward (weight x raw score; the shares add up to the reward).
json present_rollout(json r, int64_t index) {
  r["index"] = index;
  if (r.contains("terms") && r["terms"].is_array()) {
    for (auto& t : r["terms"]) {
      if (!t.is_object()) continue;
      t["share"] = t.value("weight", 0.0) * t.value("raw", 0.0);
    }
  }
  return r;
}

}  // namespace

Result<json> ServiceImpl::run_rollouts(const std::string& ref, const RolloutQuery& q) {
  if (q.limit < 1 || q.limit > kMaxRollouts) {
    return invalid_field("limit", "must be between 1 and " + std::to_string(kMaxRollouts) + ", got " +
                                      std::to_string(q.limit));
  }
  for (const auto& [name, n] : {std::pair{"best", q.best}, std::pair{"worst", q.worst}}) {
    if (n && (*n < 1 || *n > kMaxRollouts)) {
      return invalid_field(name, "must be between 1 and " + std::to_string(kMaxRollouts) + ", got " + std::to_string(*n));
    }
  }
  if (q.best && q.worst) return invalid_field("worst", "ask for best or worst, not both");
  if (q.step && *q.step < 1) return invalid_field("step", "must be at least 1, got " + std::to_string(*q.step));
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  const RunRecord& run = *r;
  if (run.method != "grpo" && run.method != "gspo") {
    return field_status(StatusCode::kFailedPrecondition, "run",
                        "run " + run.id + " is a supervised (" + run.method +
                            ") run: only grpo and gspo runs sample rollouts; see its loss with `trainer runs metrics " +
                            run.id.substr(0, 8) + "`");
  }
  RolloutsByStep batches;
  for (int a = 1; a <= run.attempt; ++a) {
    read_rollouts_file(fs::path(opt_.data_dir) / "runs" / run.id / ("attempt-" + std::to_string(a)) / "output" /
                           "rollouts.jsonl",
                       &batches);
  }
  json out = {{"runId", run.id}, {"phase", phase_name(run.phase)}, {"step", nullptr}, {"total", 0},
              {"rollouts", json::array()}};
  json steps = json::array();
  for (const auto& [step, rows] : batches) steps.push_back(step);
  out["steps"] = steps;
  if (batches.empty()) {
    if (q.step) {
      return field_status(StatusCode::kNotFound, "step",
                          "run " + run.id + " has recorded no rollouts yet (it is " + phase_name(run.phase) + ")");
    }
    return out;
  }
  // The batch a step trained on: the last one generated at or before it.
  auto it = std::prev(batches.end());
  if (q.step) {
    const int64_t last = std::max<int64_t>(run.view.value("progress", json::object()).value("step", int64_t{0}),
                                           batches.rbegin()->first);
    auto after = batches.upper_bound(*q.step);
    if (*q.step > last || after == batches.begin()) {
      return field_status(StatusCode::kNotFound, "step",
                          "run " + run.id + " has no rollouts for step " + std::to_string(*q.step) +
                              "; it has them for steps " + std::to_string(batches.begin()->first) + " to " +
                              std::to_string(last));
    }
    it = std::prev(after);
  }
  std::vector<json> rows;
  for (size_t i = 0; i < it->second.size(); ++i) rows.push_back(present_rollout(it->second[i], static_cast<int64_t>(i)));
  out["step"] = it->first;
  out["total"] = rows.size();
  auto reward = [](const json& x) { return x.value("reward", 0.0); };
  int64_t take = q.limit;
  if (q.best) {
    std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) { return reward(a) > reward(b); });
    take = std::min(take, *q.best);
    out["order"] = "best";
  } else if (q.worst) {
    std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) { return reward(a) < reward(b); });
    take = std::min(take, *q.worst);
    out["order"] = "worst";
  } else {
    out["order"] = "batch";
  }
  if (static_cast<int64_t>(rows.size()) > take) rows.resize(static_cast<size_t>(take));
  out["rollouts"] = rows;
  return out;
}

}  // namespace trainer::service

// Answers against expected answers, and the evaluation's report (declared in eval/answers.h).
#include "engine/eval/answers.h"

#include <algorithm>
#include <map>

#include "engine/rl/rewards.h"

namespace trainer::engine::eval {
namespace {

using json = nlohmann::json;

std::string_view trimmed(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return {};
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

}  // namespace

AnswerMatch match_answer(std::string_view output, std::string_view expected) {
  AnswerMatch m;
  const std::optional<json> want = rl::extract_json(expected);
  if (!want) {
    m.exact = trimmed(output) == trimmed(expected);
    return m;
  }
  const std::optional<json> got = rl::extract_json(output);
  m.exact = got && *got == *want;
  if (want->is_object()) {
    for (auto it = want->begin(); it != want->end(); ++it) {
      bool same = false;
      if (got && got->is_object()) {
        auto g = got->find(it.key());
        same = g != got->end() && *g == it.value();
      }
      m.fields.emplace_back(it.key(), same);
    }
  }
  return m;
}

json row_json(const RowResult& row) {
  json fields = json::object();
  for (const auto& [name, same] : row.match.fields) fields[name] = same;
  json out = {{"line", row.line},
              {"prompt", row.prompt},
              {"input", row.input},
              {"output", row.output},
              {"expected", row.expected},
              {"score", row.score ? json(*row.score) : json(nullptr)},
              {"exactMatch", row.match.exact},
              {"fields", fields},
              {"outputTokens", row.output_tokens},
              {"truncated", row.truncated}};
  if (!row.unscored_cause.empty()) out["unscoredCause"] = row.unscored_cause;
  if (!row.detail.empty()) out["detail"] = row.detail;
  return out;
}

json report_json(const std::vector<RowResult>& rows) {
  int64_t scored = 0, exact = 0, tokens = 0, truncated = 0;
  double sum = 0;
  std::map<std::string, int64_t> unscored;
  std::map<std::string, std::pair<int64_t, int64_t>> per_field;  // name -> (correct, rows)
  for (const auto& r : rows) {
    tokens += r.output_tokens;
    if (r.truncated) ++truncated;
    if (!r.score) {
      ++unscored[r.unscored_cause.empty() ? "unknown" : r.unscored_cause];
      continue;
    }
    ++scored;
    sum += *r.score;
    if (r.match.exact) ++exact;
    for (const auto& [name, same] : r.match.fields) {
      auto& [correct, seen] = per_field[name];
      ++seen;
      if (same) ++correct;
    }
  }
  struct Field {
    std::string name;
    int64_t correct, rows;
    double accuracy;
  };
  std::vector<Field> fields;
  for (const auto& [name, cr] : per_field) {
    fields.push_back({name, cr.first, cr.second, static_cast<double>(cr.first) / static_cast<double>(cr.second)});
  }
  std::stable_sort(fields.begin(), fields.end(), [](const Field& a, const Field& b) { return a.accuracy < b.accuracy; });
  json field_list = json::array();
  for (const auto& f : fields) {
    field_list.push_back({{"field", f.name}, {"accuracy", f.accuracy}, {"correct", f.correct}, {"rows", f.rows}});
  }
  json causes = json::object();
  for (const auto& [cause, n] : unscored) causes[cause] = n;
  const int64_t total = static_cast<int64_t>(rows.size());
  return {{"rows", total},
          {"scoredRows", scored},
          {"unscoredRows", total - scored},
          {"meanScore", scored > 0 ? json(sum / static_cast<double>(scored)) : json(nullptr)},
          {"exactMatchRate", scored > 0 ? json(static_cast<double>(exact) / static_cast<double>(scored)) : json(nullptr)},
          {"perFieldAccuracy", field_list},
          {"unscored", causes},
          {"generatedTokens", tokens},
          {"truncatedRows", truncated}};
}

}  // namespace trainer::engine::eval

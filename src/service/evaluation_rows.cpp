// A completed evaluation's graded rows (evaluation_rows.h).
#include "service/evaluation_rows.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json_parse.h"
#include "common/sha256.h"
#include "plan/plan.h"
#include "protocol/inputs.h"
#include "storage/storage.h"

namespace trainer::service {

Result<std::string> evaluation_rows_text(ServiceCore& core, const std::string& id) {
  const std::filesystem::path file = std::filesystem::path(core.options.data_dir) / "evaluations" / id / "output" / "rows.jsonl";
  if (std::ifstream in(file); in) {
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  auto stored = core.artifacts().get(protocol::evaluation_rows_key(id));
  if (!stored.is_ok()) {
    return internal_error("evaluation " + id + ": its rows are neither in the data folder nor in the store (" +
                          stored.status().message() + ")");
  }
  return *stored;
}

std::string grader_file_sha256(const json& grader) {
  const std::string kind = grader.is_object() ? grader.value("kind", std::string()) : std::string();
  if (plan::term_kind(kind) != plan::TermKind::kRule) return "";
  const auto function = plan::scoring_function(kind);
  if (!function) return "";
  std::ifstream in(function->path, std::ios::binary);
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  return sha256_hex(text.str());
}

Result<std::map<int64_t, double>> evaluation_row_scores(ServiceCore& core, const std::string& id) {
  auto text = evaluation_rows_text(core, id);
  if (!text.is_ok()) return text.status();
  std::map<int64_t, double> out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto row = parse_json(line, "rows.jsonl");
    if (!row.is_ok()) return internal_error("evaluation " + id + ": " + row.status().message());
    const json score = row->value("score", json(nullptr));
    const json at = row->value("line", json(nullptr));
    if (score.is_number() && at.is_number_integer()) out[at.get<int64_t>()] = score.get<double>();
  }
  return out;
}

}  // namespace trainer::service

// How a distillation's source splits into decisions and chunks (distillation_chunks.h).
#include "service/distillation_chunks.h"

#include <algorithm>
#include <set>

#include "common/json_parse.h"
#include "service/datasets.h"
#include "service/distillations.h"

namespace trainer::service::distillation {
namespace {

// A dataset row as a chat row: a {prompt, completion} row becomes a user and an assistant message.
json as_chat(json row) {
  if (row.contains("messages")) return row;
  json out = {
      {"messages", json::array({{{"role", "user"}, {"content", row.value("prompt", json(""))}},
                                {{"role", "assistant"}, {"content", row.value("completion", json(""))}}})}};
  for (auto& [k, v] : row.items()) {
    if (k != "prompt" && k != "completion") out[k] = v;
  }
  return out;
}

}  // namespace

bool ended(const std::string& phase) {
  return phase == kCompleted || phase == kFailed || phase == kCancelled;
}

std::string at_of(const json& d) {
  return std::to_string(d.value("row", int64_t{0})) + ":" + std::to_string(d.value("message", int64_t{0}));
}

std::vector<json> decisions_of(const std::vector<json>& rows) {
  std::vector<json> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    const json& messages = rows[r]["messages"];
    for (size_t m = 0; m < messages.size(); ++m) {
      if (messages[m].value("role", std::string()) == "assistant") {
        out.push_back({{"row", static_cast<int64_t>(r)}, {"message", static_cast<int64_t>(m)}});
      }
    }
  }
  return out;
}

std::vector<json> smoke_of(const json& doc, const std::vector<json>& decisions) {
  const json listed = doc.value("smoke", json());
  if (listed.is_array()) {
    std::vector<json> out;
    for (const json& d : listed) out.push_back({{"row", d["row"]}, {"message", d["message"]}});
    return out;
  }
  const size_t n = std::min(decisions.size(), Distillations::kSmokeDecisions);
  return std::vector<json>(decisions.begin(), decisions.begin() + static_cast<std::ptrdiff_t>(n));
}

std::vector<json> chunk_of(const json& doc, const std::vector<json>& decisions, int64_t k) {
  const std::vector<json> smoke = smoke_of(doc, decisions);
  if (k == 0) return smoke;
  std::set<std::string> in_smoke;
  for (const json& d : smoke) in_smoke.insert(at_of(d));
  std::vector<json> rest;
  for (const json& d : decisions) {
    if (in_smoke.count(at_of(d)) == 0) rest.push_back(d);
  }
  const size_t from = static_cast<size_t>(k - 1) * Distillations::kChunkDecisions;
  if (from >= rest.size()) return {};
  const size_t to = std::min(rest.size(), from + Distillations::kChunkDecisions);
  return std::vector<json>(rest.begin() + static_cast<std::ptrdiff_t>(from),
                           rest.begin() + static_cast<std::ptrdiff_t>(to));
}

int64_t rest_chunks(int64_t decisions, int64_t smoke) {
  const int64_t rest = decisions - smoke;
  return (rest + static_cast<int64_t>(Distillations::kChunkDecisions) - 1) /
         static_cast<int64_t>(Distillations::kChunkDecisions);
}

Result<std::vector<json>> load_rows(ServiceCore& core, const json& doc) {
  const std::string hash = doc.value("source", json::object()).value("hash", std::string());
  TRAINER_ASSIGN_OR_RETURN(std::string text, core.storage->get(Datasets::key_of(hash)));
  std::vector<json> rows;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) {
      TRAINER_ASSIGN_OR_RETURN(
          json row, parse_json(std::string_view(text).substr(start, end - start), "a dataset row"));
      rows.push_back(as_chat(std::move(row)));
    }
    start = end + 1;
  }
  return rows;
}

}  // namespace trainer::service::distillation

// Sessions (sessions.h): the sources' names, the line loop the readers share, and the canonical
// reader.
#include "dataset/sessions.h"

#include "common/json_syntax.h"

namespace trainer::dataset {
namespace {

using json = nlohmann::json;

}  // namespace

std::optional<SessionSource> session_source(std::string_view name) {
  if (name == "oasst1") return SessionSource::kOasst1;
  if (name == "otel") return SessionSource::kOtel;
  if (name == "canonical") return SessionSource::kCanonical;
  return std::nullopt;
}

const char* session_source_name(SessionSource source) {
  switch (source) {
    case SessionSource::kOasst1: return "oasst1";
    case SessionSource::kOtel: return "otel";
    case SessionSource::kCanonical: return "canonical";
  }
  return "unknown";
}

Status SessionCandidates::status(const std::string& field) const {
  if (lines.bad_lines > 0) return lines.status(field);
  if (!candidates.empty()) return Status::ok();
  std::string why;
  for (const auto& [reason, n] : dropped) why += (why.empty() ? "" : ", ") + reason + ": " + std::to_string(n);
  return invalid_field(field, "no candidate conversation" +
                                  (why.empty() ? std::string(" (the file holds no records)") : " (dropped: " + why + ")"));
}

SessionCandidates read_session(SessionSource source, std::string_view text) {
  switch (source) {
    case SessionSource::kOasst1: return read_oasst1(text);
    case SessionSource::kOtel: return read_otel(text);
    case SessionSource::kCanonical: return read_canonical(text);
  }
  return {};
}

void for_each_json_line(std::string_view text, SessionCandidates& out,
                        const std::function<Status(int64_t line, const json& value)>& each) {
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    ++line_no;
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) {
      JsonSyntaxError syntax;
      std::optional<json> value = parse_json_or_error(line, &syntax);
      Status st = value ? each(line_no, *value)
                        : invalid_argument((syntax.column > 0 ? "column " + std::to_string(syntax.column) + ": "
                                                              : std::string()) +
                                           "not valid JSON: " + syntax.reason);
      if (!st.is_ok()) {
        ++out.lines.bad_lines;
        if (static_cast<int>(out.lines.errors.size()) < kMaxReportedLines) {
          out.lines.errors.push_back({line_no, std::move(st)});
        }
      }
    }
    if (end == text.size()) break;
  }
}

SessionCandidates read_canonical(std::string_view text) {
  SessionCandidates out;
  for_each_json_line(text, out, [&](int64_t, const json& record) -> Status {
    if (!record.is_object()) return invalid_argument("expected a JSON object, got " + std::string(record.type_name()));
    json row = record;
    bool complete = true;
    if (auto p = row.find("provenance"); p != row.end()) {
      if (!p->is_object()) return invalid_field("provenance", "expected an object, got " + std::string(p->type_name()));
      if (auto c = p->find("complete"); c != p->end()) {
        if (!c->is_boolean()) return invalid_field("provenance.complete", "expected true or false, got " + c->dump());
        complete = c->get<bool>();
      }
      row.erase("provenance");
    }
    TRAINER_ASSIGN_OR_RETURN(RowKind kind, check_row(row));
    if (kind != RowKind::kChat) {
      return invalid_field("messages", "a captured call is a chat row {\"messages\": [...]}, its last message the "
                                       "assistant's answer");
    }
    if (!complete) {
      ++out.dropped["incomplete_provenance"];
      return Status::ok();
    }
    out.candidates.push_back(std::move(row));
    return Status::ok();
  });
  return out;
}

}  // namespace trainer::dataset

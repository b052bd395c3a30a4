// Sessions (docs/curations.md): raw corpora of conversations a team already has, read into
// candidate conversations that a curation's judge scores. Three sources:
//   oasst1     OASST1 message-tree JSONL: each line a tree {"prompt": MESSAGE}, a MESSAGE being
//              {"text", "role": "prompter"|"assistant", "lang"?, "deleted"?, "replies"?: [MESSAGE]};
//              every assistant message is a candidate: the path from the root to it. A candidate
//              through a deleted message is dropped ("deleted"), one through a message whose
//              `lang` is not "en" is dropped ("non_english").
//   otel       OTLP/JSON logs: each line one ExportLogsServiceRequest; the GenAI semantic
//              conventions' events (gen_ai.system.message, gen_ai.user.message,
//              gen_ai.assistant.message, gen_ai.tool.message, gen_ai.choice), named by the
//              record's eventName or its event.name attribute, grouped into one call by
//              (traceId, spanId) in the order they come; the call's choice of index 0 ends it.
//   canonical  captured calls, one chat row per line (dataset/validator.h) with an optional
//              "provenance" object; a record with provenance.complete false is dropped
//              ("incomplete_provenance").
// Every candidate is a chat row {"messages": [...]} whose last message is the assistant's.
// Pure functions of their input.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "dataset/validator.h"

namespace trainer::dataset {

enum class SessionSource { kOasst1, kOtel, kCanonical };

// "oasst1", "otel" or "canonical"; nullopt for any other name.
std::optional<SessionSource> session_source(std::string_view name);
const char* session_source_name(SessionSource source);

struct SessionCandidates {
  std::vector<nlohmann::json> candidates;   // chat rows, in the order of the file
  std::map<std::string, int64_t> dropped;   // why candidates (or records) were left out: how many
  Validation lines;                         // the bad lines (its rows are unused)
  // OK when no line is bad and there is a candidate; else invalid_field(`field`, "line 3:
  // prompt.replies[0].role: ...") or, with no candidate, what was dropped.
  Status status(const std::string& field) const;
};

SessionCandidates read_session(SessionSource source, std::string_view text);
SessionCandidates read_oasst1(std::string_view text);
SessionCandidates read_otel(std::string_view text);
SessionCandidates read_canonical(std::string_view text);

// For the readers: calls `each(line, value)` for every non-blank line of JSONL that parses
// (nested at most 64 levels); a line that does not, or whose `each` returns an error, is recorded
// in out.lines as validate_jsonl records it.
void for_each_json_line(std::string_view text, SessionCandidates& out,
                        const std::function<Status(int64_t line, const nlohmann::json& value)>& each);

}  // namespace trainer::dataset

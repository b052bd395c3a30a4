// A JSON syntax error's place and reason, for callers that name the place themselves: one line of
// a JSONL file is parsed alone, and its error is "line 6, column 92: not valid JSON: ..." of the
// file, not "line 1" of the row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/json_parse.h"

namespace trainer {

struct JsonSyntaxError {
  int64_t line = 0;    // 1-based, within the text parsed; 0: no place (nested too deeply)
  int64_t column = 0;  // 1-based, within that line; 0: no place
  std::string reason;  // the parser's words: "syntax error while parsing object - ..."
};

// Parses `text` as JSON nested at most `max_depth` levels; nullopt with `*error` filled in when it
// is not valid JSON.
std::optional<nlohmann::json> parse_json_or_error(std::string_view text, JsonSyntaxError* error,
                                                  int max_depth = kMaxJsonDepth);

}  // namespace trainer

#include "common/json_parse.h"
#include "common/json_syntax.h"

#include <string>

namespace trainer {

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

namespace {

// The line and column of byte offset `pos` (1-based, as editors count).
void place_of(std::string_view text, size_t pos, int64_t* line_out, int64_t* column_out) {
  int64_t line = 1;
  int64_t column = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  *line_out = line;
  *column_out = column;
}

// "line 3, column 7" of byte offset `pos`.
std::string position_of(std::string_view text, size_t pos) {
  int64_t line = 0, column = 0;
  place_of(text, pos, &line, &column);
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// The parser's reason without its "[json.exception.parse_error.101] parse error at ...: " prefix.
std::string reason_of(const nlohmann::json::parse_error& e) {
  std::string reason = e.what();
  const size_t colon = reason.find(": ");
  if (colon != std::string::npos && reason.rfind("parse error", colon) != std::string::npos) {
    reason = reason.substr(colon + 2);
  }
  return reason;
}

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, std::string_view what, int max_depth) {
  const int depth = json_nesting_depth(text, max_depth);
  if (depth > max_depth) {
    return invalid_argument(std::string(what) + ": JSON nested more than " + std::to_string(max_depth) +
                            " levels deep; flatten the document");
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument(std::string(what) + ": not valid JSON at " + position_of(text, e.byte == 0 ? 0 : e.byte - 1) +
                            ": " + reason_of(e));
  }
}

std::optional<nlohmann::json> parse_json_or_error(std::string_view text, JsonSyntaxError* error, int max_depth) {
  if (json_nesting_depth(text, max_depth) > max_depth) {
    *error = {0, 0, "JSON nested more than " + std::to_string(max_depth) + " levels deep; flatten the document"};
    return std::nullopt;
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    error->reason = reason_of(e);
    place_of(text, e.byte == 0 ? 0 : e.byte - 1, &error->line, &error->column);
    return std::nullopt;
  }
}

}  // namespace trainer

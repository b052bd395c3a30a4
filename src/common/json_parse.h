// Parsing untrusted JSON (request bodies, stored documents, job events, configuration) with a
// bound on nesting, so that a document nested thousands of levels deep is refused before a
// recursive copy, dump or destructor can exhaust the stack.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer {

// Deep enough for every document the system writes (plans nest about 5 levels).
inline constexpr int kMaxJsonDepth = 64;

// The deepest nesting of arrays and objects in `text` (strings are skipped), stopping early
// once it passes `limit`. Does not check that `text` is valid JSON.
int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth);

// Parses `text` as JSON nested at most `max_depth` levels. Errors (kInvalidArgument) name
// `what` ("body", "stored run 1a2b", ...), the parser's reason and, where known, line and column.
Result<nlohmann::json> parse_json(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);

}  // namespace trainer

// Descriptors other than plans that users write in JSON or YAML (`trained-models register -f`):
// read into JSON the way plans are (plan.cpp holds the YAML reader both use).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::plan {

// A JSON or YAML document (detected from the text) as JSON. Errors are kInvalidArgument naming
// `source` and, for YAML, the line and column.
Result<nlohmann::json> parse_document(std::string_view text, std::string_view source);

}  // namespace trainer::plan

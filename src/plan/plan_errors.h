// Every error of a plan in one answer, not only the first (the CLI's `runs start`): the plan reader
// keeps an error and reads on, so that one bad plan takes one round trip.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "plan/plan.h"

namespace trainer::plan {

// parse_plan() and plan_from_json() that fill `errors` with every error of the plan (in the order
// the fields are read, which is the documented order) and return the first. An error that leaves
// the rest of its object unreadable (a reward term of no known kind) ends that object's reading
// only; a text that does not parse is one error.
Result<Plan> parse_plan(std::string_view text, std::string_view source, std::vector<Status>* errors);
Result<Plan> plan_from_json(const nlohmann::json& doc, std::string_view source, std::vector<Status>* errors);

}  // namespace trainer::plan

// Internal to src/plan: how a range bound of the field table reads in messages and docs.
#pragma once

#include <string>

namespace trainer::plan {

// A range bound as a person writes it: "4096", "0.5", "1e+06".
std::string field_bound_text(double v);

}  // namespace trainer::plan

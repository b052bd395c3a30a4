// The checks of a reward term's kind, shared by the plan reader (internal to src/plan; the kind's
// grammar itself, term_kind() and the rest, is in plan.h).
#pragma once

#include <string>

#include "common/status.h"

namespace trainer::plan {

// A known prefix, and something after it that can work (a URL, a Python function name, ...);
// invalid_field AT.kind otherwise.
Status check_term_kind(const std::string& at, const std::string& kind);

}  // namespace trainer::plan

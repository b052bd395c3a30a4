#include "plan/plan.h"

namespace trainer::plan {

Result<Plan> parse_plan(std::string_view, std::string_view source) {
  return internal_error(std::string(source) + ": plan parsing is not built yet");
}

}  // namespace trainer::plan

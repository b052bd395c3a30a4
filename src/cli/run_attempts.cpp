// A run's attempts in words (declared in cli/run_view.h): "attempt 2 of 3, resumed from step 6
// (attempt 1: killed, code 137)".
#include "cli/format.h"
#include "cli/run_fields.h"
#include "cli/run_view.h"

namespace trainer::cli {

using namespace run_fields;  // str, num, integer, field

namespace {

// How an attempt's entry says it ended: "killed, code 137".
std::string attempt_end_text(const json& entry) {
  std::string out = str(entry, "cause");
  if (auto code = num(entry, "exitCode")) out += ", code " + format_number(*code);
  return out;
}

bool lost_cause(const std::string& cause) {
  return cause == "killed" || cause == "crashed" || cause == "lost" || cause == "stopped" || cause == "hung";
}

}  // namespace

// The run's attempts as a person reads them, when it had more than one or lost one: "attempt 2 of 3,
// resumed from step 6 (attempt 1: killed, code 137)". `brief`: the first part alone ("attempt 2 of
// 3"). execution.maxAttempts counts from the submission or from the last resume.
std::string attempts_text(const json& run, bool brief) {
  const json& list = field(run, "attempts");
  const int64_t current = integer(run, "attempt");
  if (!list.is_array() || list.empty()) return "";
  bool lost = false;
  int64_t base = 1;
  for (const json& a : list) {
    if (lost_cause(str(a, "cause"))) lost = true;
    if (str(a, "cause") == "paused") base = integer(a, "number") + 1;
  }
  if (current <= 1 && !lost) return "";
  const json& max_field = field(field(field(run, "plan"), "execution"), "maxAttempts");
  const int64_t max = max_field.is_number_integer() ? max_field.get<int64_t>() : 3;
  std::string text = "attempt " + format_number(static_cast<double>(current));
  if (base == 1) {
    text += " of " + format_number(static_cast<double>(max));
  } else {
    text += " (" + format_number(static_cast<double>(current - base + 1)) + " of " +
            format_number(static_cast<double>(max)) + " since the resume)";
  }
  if (brief) return text;
  std::string ended;
  for (const json& a : list) {
    const int64_t n = integer(a, "number");
    if (n == current) {
      if (auto step = num(a, "resumedFromStep")) text += ", resumed from step " + format_number(*step);
      if (!lost_cause(str(a, "cause"))) continue;  // its own end is the run's phase
    }
    if (str(a, "cause").empty()) continue;
    ended += (ended.empty() ? "" : "; ") + std::string("attempt ") + format_number(static_cast<double>(n)) + ": " +
             attempt_end_text(a);
  }
  if (!ended.empty()) text += " (" + ended + ")";
  return text;
}

}  // namespace trainer::cli

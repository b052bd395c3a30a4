// A task kind's phase table: its phases, the transitions allowed between them, which phases end
// the task, which hold a claim on devices, and which wait idle for an outside change. One table per
// kind is the single source the kernel checks every phase change against (docs/architecture.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::tasks {

struct PhaseSpec {
  std::string name;          // as stored and shown, e.g. "WAITING_FOR_DEVICES"
  bool terminal = false;     // the task ends here: no step, no transition out
  bool holds_claim = false;  // a task here holds, or waits for, a claim on devices
  bool idle = false;         // nothing to do until something outside wakes the task (PAUSED)
  // Nothing to do until admission grants the task's claim: stepped when a grant wakes it
  // (TaskKernel::wake_claim_owner), else only every KernelOptions::claim_recheck_seconds
  // (WAITING_FOR_DEVICES). Implies holds_claim.
  bool waits_for_claim = false;
};

// The phases a task may move to from `from`.
struct Transition {
  std::string from;
  std::vector<std::string> to;
};

class PhaseTable {
 public:
  // Checks the table: a kind name, phases named once each, at least one terminal phase, every
  // transition between named phases, none out of a terminal phase, and every non-terminal phase
  // with a way out. An error names the kind and what is wrong.
  static Result<PhaseTable> make(std::string kind, std::vector<PhaseSpec> phases, std::vector<Transition> transitions);

  const std::string& kind() const { return kind_; }
  const std::vector<PhaseSpec>& phases() const { return phases_; }
  // The phase named `name`; null when the table has none.
  const PhaseSpec* find(std::string_view name) const;
  bool allows(std::string_view from, std::string_view to) const;
  // ok when the table allows from -> to; else internal_error naming the kind and both phases (a
  // phase change the code makes is a broken invariant, never a user's mistake).
  Status check(std::string_view from, std::string_view to) const;
  bool terminal(std::string_view name) const;
  bool idle(std::string_view name) const;
  bool waits_for_claim(std::string_view name) const;
  // Whether any phase waits for its claim.
  bool has_claim_waits() const;
  // {kind, phases: [{name, terminal, holdsClaim, idle, waitsForClaim, to: [...]}]}: for docs and `trainer info`.
  nlohmann::json to_json() const;

 private:
  PhaseTable() = default;
  int index(std::string_view name) const;  // -1 when absent

  std::string kind_;
  std::vector<PhaseSpec> phases_;
  std::vector<std::vector<bool>> allowed_;  // allowed_[from][to]
};

}  // namespace trainer::tasks

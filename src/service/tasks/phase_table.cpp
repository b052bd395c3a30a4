// A task kind's phase table (declared in service/tasks/phase_table.h).
#include "service/tasks/phase_table.h"

#include <set>

namespace trainer::tasks {

Result<PhaseTable> PhaseTable::make(std::string kind, std::vector<PhaseSpec> phases,
                                    std::vector<Transition> transitions) {
  if (kind.empty()) return internal_error("phase table: a task kind needs a name");
  const std::string where = "phase table of task kind '" + kind + "': ";
  PhaseTable t;
  t.kind_ = std::move(kind);
  std::set<std::string> names;
  bool any_terminal = false;
  for (const PhaseSpec& p : phases) {
    if (p.name.empty()) return internal_error(where + "a phase has no name");
    if (!names.insert(p.name).second) return internal_error(where + "phase " + p.name + " is listed twice");
    if (p.terminal && (p.idle || p.holds_claim)) {
      return internal_error(where + "terminal phase " + p.name + " cannot be idle or hold a claim");
    }
    if (p.waits_for_claim && (!p.holds_claim || p.idle)) {
      return internal_error(where + "phase " + p.name + " waits for its claim, so it holds one and is not idle");
    }
    any_terminal = any_terminal || p.terminal;
  }
  if (!any_terminal) return internal_error(where + "no phase ends the task");
  t.phases_ = std::move(phases);
  const size_t n = t.phases_.size();
  t.allowed_.assign(n, std::vector<bool>(n, false));
  for (const Transition& tr : transitions) {
    const int from = t.index(tr.from);
    if (from < 0) return internal_error(where + "a transition leaves " + tr.from + ", which is not a phase");
    if (t.phases_[from].terminal) return internal_error(where + "a transition leaves terminal phase " + tr.from);
    for (const std::string& to : tr.to) {
      const int i = t.index(to);
      if (i < 0) return internal_error(where + "a transition from " + tr.from + " enters " + to + ", which is not a phase");
      if (i == from) return internal_error(where + "phase " + to + " cannot move to itself");
      t.allowed_[from][i] = true;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (t.phases_[i].terminal) continue;
    bool out = false;
    for (size_t j = 0; j < n; ++j) out = out || t.allowed_[i][j];
    if (!out) return internal_error(where + "phase " + t.phases_[i].name + " has no way out");
  }
  return t;
}

int PhaseTable::index(std::string_view name) const {
  for (size_t i = 0; i < phases_.size(); ++i) {
    if (phases_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const PhaseSpec* PhaseTable::find(std::string_view name) const {
  const int i = index(name);
  return i < 0 ? nullptr : &phases_[i];
}

bool PhaseTable::allows(std::string_view from, std::string_view to) const {
  const int a = index(from);
  const int b = index(to);
  return a >= 0 && b >= 0 && allowed_[a][b];
}

Status PhaseTable::check(std::string_view from, std::string_view to) const {
  if (allows(from, to)) return Status::ok();
  std::string why = index(from) < 0 ? std::string(from) + " is not one of its phases"
                    : index(to) < 0 ? std::string(to) + " is not one of its phases"
                                    : "its phase table does not allow it";
  return internal_error("a " + kind_ + " cannot move from " + std::string(from) + " to " + std::string(to) + ": " + why);
}

bool PhaseTable::terminal(std::string_view name) const {
  const PhaseSpec* p = find(name);
  return p && p->terminal;
}

bool PhaseTable::idle(std::string_view name) const {
  const PhaseSpec* p = find(name);
  return p && p->idle;
}

bool PhaseTable::waits_for_claim(std::string_view name) const {
  const PhaseSpec* p = find(name);
  return p && p->waits_for_claim;
}

bool PhaseTable::has_claim_waits() const {
  for (const PhaseSpec& p : phases_) {
    if (p.waits_for_claim) return true;
  }
  return false;
}

nlohmann::json PhaseTable::to_json() const {
  nlohmann::json phases = nlohmann::json::array();
  for (size_t i = 0; i < phases_.size(); ++i) {
    nlohmann::json to = nlohmann::json::array();
    for (size_t j = 0; j < phases_.size(); ++j) {
      if (allowed_[i][j]) to.push_back(phases_[j].name);
    }
    phases.push_back({{"name", phases_[i].name},
                      {"terminal", phases_[i].terminal},
                      {"holdsClaim", phases_[i].holds_claim},
                      {"idle", phases_[i].idle},
                      {"waitsForClaim", phases_[i].waits_for_claim},
                      {"to", std::move(to)}});
  }
  return {{"kind", kind_}, {"phases", std::move(phases)}};
}

}  // namespace trainer::tasks

// The grammar of reward-term kinds (declared in plan/plan.h and plan/reward_terms.h):
// json-label-match, rule:PATH, bundle:PATH[#MODULE][:FUNCTION], http:URL and model:NAME; what each
// names, its scoring function, its label, and where a judge's instructions come from.
#include <algorithm>
#include <cctype>

#include "plan/plan.h"
#include "plan/reward_terms.h"

#include "common/spelling.h"

namespace trainer::plan {
namespace {

// Reward term kinds and the prefixes that introduce the external ones.
constexpr std::pair<const char*, TermKind> kTermPrefixes[] = {
    {"rule:", TermKind::kRule}, {"bundle:", TermKind::kBundle}, {"http:", TermKind::kHttp}, {"model:", TermKind::kModel}};
constexpr const char* kLabelMatch = "json-label-match";

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

Status check_term_kind(const std::string& at, const std::string& kind) {
  const std::optional<TermKind> k = term_kind(kind);
  if (!k) {
    // A misspelt kind: the nearest whole kind, or the nearest prefix with what follows the colon.
    std::string hint;
    const size_t colon = kind.find(':');
    if (colon == std::string::npos) {
      if (auto near = nearest_name(kind, {"json-label-match"})) hint = "did you mean " + *near + "? ";
    } else if (auto near = nearest_name(kind.substr(0, colon), {"rule", "bundle", "http", "model"})) {
      hint = "did you mean " + *near + kind.substr(colon) + "? ";
    }
    return invalid_field(at + ".kind", "\"" + kind + "\" is not a reward term kind; " + hint +
                                           "use json-label-match, rule:PATH, bundle:PATH, http:URL or model:NAME");
  }
  const std::string target = term_target(kind);
  if (*k != TermKind::kLabelMatch && target.empty()) {
    return invalid_field(at + ".kind", "\"" + kind + "\" names nothing after the colon");
  }
  if (*k == TermKind::kHttp && target.rfind("http://", 0) != 0 && target.rfind("https://", 0) != 0) {
    return invalid_field(at + ".kind", "\"" + kind +
                                           "\" does not name an http:// or https:// URL; write http:http://HOST:PORT/PATH");
  }
  if (*k == TermKind::kBundle) {
    const size_t hash = target.find('#');
    if (hash != std::string::npos && (hash == 0 || hash + 1 == target.size() || target[hash + 1] == ':')) {
      return invalid_field(at + ".kind", "\"" + kind + "\": a bundle is bundle:FILE.py[:FUNCTION] or bundle:FOLDER#MODULE[:FUNCTION]");
    }
  }
  if (auto f = scoring_function(kind)) {
    if (!is_identifier(f->function)) {
      return invalid_field(at + ".kind", "\"" + kind + "\": '" + f->function +
                                             "' is not a Python function name (write ...:FUNCTION, default compute_score)");
    }
  }
  return Status::ok();
}

const char* grader_instructions_source(const RewardTermSpec& term) {
  if (term.graderInstructions) return "term";
  if (term.planGraderInstructions) return "plan";
  return "built-in";
}

std::optional<TermKind> term_kind(std::string_view kind) {
  if (kind == kLabelMatch) return TermKind::kLabelMatch;
  if (kind.rfind("https://", 0) == 0) return TermKind::kHttp;  // the URL alone (http:// matches "http:")
  for (const auto& [prefix, k] : kTermPrefixes) {
    if (kind.rfind(prefix, 0) == 0) return k;
  }
  return std::nullopt;
}

std::string term_target(std::string_view kind) {
  // http: terms name a URL, written after the prefix or as the whole kind ("http://HOST/PATH").
  if (kind.rfind("http://", 0) == 0 || kind.rfind("https://", 0) == 0) return std::string(kind);
  for (const auto& [prefix, k] : kTermPrefixes) {
    const std::string_view p(prefix);
    if (kind.rfind(p, 0) == 0) return std::string(kind.substr(p.size()));
  }
  return "";
}

std::optional<ScoringFunction> scoring_function(std::string_view kind) {
  const std::optional<TermKind> k = term_kind(kind);
  if (k != TermKind::kRule && k != TermKind::kBundle) return std::nullopt;
  ScoringFunction out;
  std::string target = term_target(kind);
  const size_t hash = k == TermKind::kBundle ? target.find('#') : std::string::npos;
  std::string* named = &out.path;  // the part that may end in :FUNCTION
  if (hash != std::string::npos) {
    out.path = target.substr(0, hash);
    out.module = target.substr(hash + 1);
    named = &out.module;
  } else {
    out.path = target;
  }
  // A module's ":FUNCTION" is always one; a file's only after ".py" (paths may hold colons).
  const size_t colon = named->rfind(':');
  const bool in_module = hash != std::string::npos;
  if (colon != std::string::npos && (in_module || (colon >= 3 && named->compare(colon - 3, 3, ".py") == 0))) {
    out.function = named->substr(colon + 1);
    named->resize(colon);
  } else {
    out.function = kDefaultScoringFunction;
  }
  return out;
}

std::string term_label(const RewardTermSpec& term) {
  if (!term.name.empty()) return term.name;
  const std::optional<TermKind> k = term_kind(term.kind);
  if (k == TermKind::kRule || k == TermKind::kBundle) {
    std::string target = term_target(term.kind);
    const size_t hash = target.find('#');
    if (hash != std::string::npos) return (k == TermKind::kRule ? "rule:" : "bundle:") + target.substr(hash + 1);
    const size_t slash = target.find_last_of('/');
    if (slash != std::string::npos) target = target.substr(slash + 1);
    return (k == TermKind::kRule ? "rule:" : "bundle:") + target;
  }
  return term.kind;
}

}  // namespace trainer::plan

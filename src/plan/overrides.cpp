#include "plan/overrides.h"

#include <string_view>

namespace trainer::plan {
namespace {

using json = nlohmann::json;

constexpr std::string_view kConfig = "config";
constexpr const char* kMaxSteps = "config.hyperparams.training.maxSteps";
constexpr const char* kMethod = "config.method";
constexpr const char* kRewardTerms = "config.reward.terms";

// What a child turned from an SFT run into an RL run is shown when it names no reward.
constexpr const char* kRlOverridesExample =
    "method: grpo\n"
    "reward:\n"
    "  terms:\n"
    "    - {kind: json-label-match, weight: 1}   # or rule:PATH, bundle:PATH, http:URL, model:NAME (docs/graders.md)\n"
    "rlHyperparams:                            # optional: the defaults of docs/plans.md otherwise\n"
    "  groupSize: 8\n"
    "  promptsPerStep: 4\n"
    "  maxCompletionLength: 256               # below config.maxSeqLength\n"
    "  optimizer: {learningRate: 1.0e-5}\n";

Status refuse(const std::string& path, const std::string& message) {
  // Users write paths relative to config; errors name them as written in the document.
  std::string shown = path.rfind("config.", 0) == 0 ? path.substr(7) : path;
  return invalid_field("overrides." + shown, message);
}

bool starts_a_field(const std::string& path) {
  const std::string prefix = path + ".";
  for (const auto& f : plan_fields()) {
    if (f.path.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// A group written as a list of objects (config.reward.terms: its fields are "PATH[].kind", ...):
// an override gives the whole list.
bool is_list_of_groups(const std::string& path) {
  const std::string prefix = path + "[].";
  for (const auto& f : plan_fields()) {
    if (f.path.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

Status flatten(const json& value, const std::string& path, std::map<std::string, json>& out) {
  const FieldSpec* spec = find_field(path);
  if (value.is_array() && spec != nullptr && is_list_of_groups(path)) {
    if (!out.emplace(path, value).second) return refuse(path, "is given twice");
    return Status::ok();
  }
  if (value.is_object() && (spec == nullptr || spec->type == FieldType::kObject)) {
    if (spec == nullptr && !starts_a_field(path)) {
      return refuse(path, "is not a declared plan field; see docs/plans.md for the fields of config");
    }
    for (const auto& [key, v] : value.items()) TRAINER_RETURN_IF_ERROR(flatten(v, path + "." + key, out));
    return Status::ok();
  }
  if (spec == nullptr) return refuse(path, "is not a declared plan field; see docs/plans.md for the fields of config");
  if (spec->type == FieldType::kObject) return refuse(path, "is a group of fields: give an object, or name its fields");
  if (value.is_null()) return refuse(path, "has no value; give the new value, or leave the field out to keep the parent's");
  if (!out.emplace(path, value).second) return refuse(path, "is given twice");
  return Status::ok();
}

void set_path(json& doc, const std::string& path, const json& value) {
  json* at = &doc;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) {
      (*at)[key] = value;
      return;
    }
    if (!at->contains(key) || !(*at)[key].is_object()) (*at)[key] = json::object();
    at = &(*at)[key];
    start = dot + 1;
  }
}

// The learning rate of the parent's method: the one field a trainingState child may change.
std::string active_learning_rate(const json& parent_plan) {
  const json config = parent_plan.value("config", json::object());
  const std::string method = config.value("method", std::string("sft"));
  return method == "sft" ? "config.hyperparams.optimizer.learningRate" : "config.rlHyperparams.optimizer.learningRate";
}

// Removes the field at `path` (dotted, below the object `doc`); true when it was there.
bool erase_path(json& doc, std::string_view path) {
  json* at = &doc;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    const std::string key(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!at->is_object() || !at->contains(key)) return false;
    if (dot == std::string_view::npos) {
      at->erase(key);
      return true;
    }
    at = &(*at)[key];
    start = dot + 1;
  }
}

// The value at `path` (dotted, below `doc`); null when absent.
json value_at(const json& doc, std::string_view path) {
  const json* at = &doc;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    const std::string key(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
    if (dot == std::string_view::npos) return *at;
    start = dot + 1;
  }
}

// The method the overrides change the child to; nullopt when they keep the parent's, or name no
// method there is (the plan parser refuses that value as config.method).
std::optional<Method> changed_method(const std::map<std::string, json>& flat, Method parent) {
  auto it = flat.find(kMethod);
  if (it == flat.end() || !it->second.is_string()) return std::nullopt;
  auto to = method_from_name(it->second.get<std::string>());
  if (!to || *to == parent) return std::nullopt;
  return to;
}

}  // namespace

const char* restore_name(Restore r) { return r == Restore::kTrainingState ? "trainingState" : "weights"; }

std::vector<std::string> drop_method_fields(json& config, Method from, Method to) {
  std::vector<std::string> dropped;
  if (is_rl_method(from) == is_rl_method(to)) return dropped;
  for (const MethodField& f : method_only_fields()) {
    if (f.rl != is_rl_method(from)) continue;
    const std::string_view below = f.path.substr(std::string_view("config.").size());
    const bool held = !value_at(config, below).is_null();
    if (erase_path(config, below) && held) dropped.emplace_back(f.path);
  }
  return dropped;
}

std::string dropped_fields_text(const MethodChange& change) {
  if (change.dropped.empty()) return "";
  std::string out = "dropped ";
  for (size_t i = 0; i < change.dropped.size(); ++i) out += (i == 0 ? "" : ", ") + change.dropped[i];
  return out + ": " + (is_rl_method(change.from) ? "reinforcement-learning fields an " : "SFT fields a ") +
         method_name(change.to) + " run does not have";
}

Result<std::map<std::string, json>> flatten_overrides(const json& doc) {
  std::map<std::string, json> out;
  if (doc.is_null()) return out;
  if (!doc.is_object()) return invalid_field("overrides", "must be a mapping of config fields to new values");
  for (const auto& [key, value] : doc.items()) {
    const std::string head = key.substr(0, key.find('.'));
    if (head != kConfig && find_field(head) != nullptr) {
      return invalid_field("overrides." + key, "a child inherits its parent's " + head +
                                                   "; an override document names only fields of config");
    }
    TRAINER_RETURN_IF_ERROR(flatten(value, head == kConfig ? key : "config." + key, out));
  }
  return out;
}

Result<ChildPlan> child_plan(const json& parent_plan, const json& overrides, const ChildRules& rules, int64_t steps) {
  if (!parent_plan.is_object() || !parent_plan.contains("config") || !parent_plan["config"].is_object()) {
    return failed_precondition("the parent run has no resolved plan to inherit");
  }
  if (steps < 1) return invalid_field("steps", "must be at least 1 (the child's budget of optimizer updates)");
  TRAINER_ASSIGN_OR_RETURN(auto flat, flatten_overrides(overrides));
  const std::string learning_rate = active_learning_rate(parent_plan);
  const std::string restore = restore_name(rules.restore);
  const Method parent_method =
      method_from_name(parent_plan["config"].value("method", std::string("sft"))).value_or(Method::kSft);
  const std::optional<Method> to = changed_method(flat, parent_method);
  const bool kind_changes = to && is_rl_method(*to) != is_rl_method(parent_method);
  if (kind_changes && rules.restore == Restore::kTrainingState) {
    const std::string why = std::string("the child changes method from ") + method_name(parent_method) + " to " +
                            method_name(*to) + ", and a " + method_name(parent_method) +
                            " training state (its optimizer's moments, data position) cannot seed a " +
                            method_name(*to) + " run: the child starts from the snapshot's weights alone";
    if (rules.continuation) {
      return refuse(kMethod, "cannot change when continuing: " + why + "; use runs branch RUN --snapshot SNAPSHOT "
                             "--method " + method_name(*to));
    }
    return invalid_field("restore", "trainingState is refused: " + why + "; drop --restore trainingState "
                                    "(weights is the default)");
  }
  if (kind_changes && is_rl_method(*to) && !flat.contains(kRewardTerms)) {
    return refuse(kRewardTerms, std::string("required: the child changes method from ") + method_name(parent_method) +
                                    " to " + method_name(*to) + ", and an " + method_name(parent_method) +
                                    " run has no reward to inherit; name the reward terms that score its completions "
                                    "in the overrides (rlHyperparams take their defaults unless given), e.g.:\n" +
                                    kRlOverridesExample);
  }
  for (const auto& [path, value] : flat) {
    if (path == "config.hyperparams.training.epochs" || path == kMaxSteps) {
      return refuse(path, "cannot be overridden: the child's budget is --steps");
    }
    if (rules.restore == Restore::kTrainingState) {
      const bool allowed = path == learning_rate ||
                           (rules.continuation && path == "config.hyperparams.training.validationFrequencySteps");
      if (!allowed) {
        return refuse(path, std::string("cannot change when the child restores trainingState: only ") +
                                learning_rate.substr(7) +
                                (rules.continuation ? " and hyperparams.training.validationFrequencySteps may" : " may") +
                                " (even an equal value of another field is refused); branch with --restore weights "
                                "to change it");
      }
    } else if (path == "config.hyperparams.lora.rank" || path == "config.hyperparams.lora.targetModules") {
      return refuse(path, "cannot change: the child loads the snapshot's " + restore +
                              ", whose adapter has the parent's shape");
    }
  }
  ChildPlan child{.plan = parent_plan, .method_change = std::nullopt};
  if (to) {
    MethodChange change{.from = parent_method, .to = *to, .dropped = {}};
    change.dropped = drop_method_fields(child.plan["config"], parent_method, *to);
    child.method_change = std::move(change);
  }
  for (const auto& [path, value] : flat) set_path(child.plan, path, value);
  set_path(child.plan, kMaxSteps, steps);
  child.plan.erase("submissionId");
  return child;
}

}  // namespace trainer::plan

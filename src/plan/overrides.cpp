#include "plan/overrides.h"

#include <string_view>

#include "plan/plan.h"

namespace trainer::plan {
namespace {

using json = nlohmann::json;

constexpr std::string_view kConfig = "config";
constexpr const char* kMaxSteps = "config.hyperparams.training.maxSteps";

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

Status flatten(const json& value, const std::string& path, std::map<std::string, json>& out) {
  const FieldSpec* spec = find_field(path);
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

}  // namespace

const char* restore_name(Restore r) { return r == Restore::kTrainingState ? "trainingState" : "weights"; }

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

Result<json> child_plan(const json& parent_plan, const json& overrides, const ChildRules& rules, int64_t steps) {
  if (!parent_plan.is_object() || !parent_plan.contains("config") || !parent_plan["config"].is_object()) {
    return failed_precondition("the parent run has no resolved plan to inherit");
  }
  if (steps < 1) return invalid_field("steps", "must be at least 1 (the child's budget of optimizer updates)");
  TRAINER_ASSIGN_OR_RETURN(auto flat, flatten_overrides(overrides));
  const std::string learning_rate = active_learning_rate(parent_plan);
  const std::string restore = restore_name(rules.restore);
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
  json child = parent_plan;
  for (const auto& [path, value] : flat) set_path(child, path, value);
  set_path(child, kMaxSteps, steps);
  child.erase("submissionId");
  return child;
}

}  // namespace trainer::plan

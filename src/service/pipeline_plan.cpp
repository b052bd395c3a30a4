// The stage-type table and the checks of a pipeline plan (pipeline_plan.h).
#include "service/pipeline_plan.h"

#include <cctype>
#include <map>

namespace trainer::service::pipeline {
namespace {

namespace tel = trainer::telemetry;

constexpr std::string_view kModelPrefix = "model:";

// The keys of a stage every type shares.
const char* const kStageKeys[] = {"name", "type", "gate"};

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > kMaxStageNameLength || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

// "stages[2]"
std::string stage_field(size_t i) { return "stages[" + std::to_string(i) + "]"; }

std::string stage_label(size_t i, const std::string& name) {
  return name.empty() ? "stage " + std::to_string(i) : "stage '" + name + "'";
}

// The name a value refers to ("" when it is no reference): `@NAME`, or `model:@NAME`.
std::string referenced_name(const std::string& value, bool* model_prefixed) {
  *model_prefixed = false;
  if (!value.empty() && value[0] == '@') return value.substr(1);
  if (value.rfind(kModelPrefix, 0) == 0 && value.size() > kModelPrefix.size() && value[kModelPrefix.size()] == '@') {
    *model_prefixed = true;
    return value.substr(kModelPrefix.size() + 1);
  }
  return "";
}

// Every string of `value` with its path as a slot names it ("config.reward.terms[].kind"), its
// full path ("config.reward.terms[0].kind") and its JSON pointer.
struct Leaf {
  std::string slot_path, path, pointer, value;
};

void collect(const json& value, const std::string& slot_path, const std::string& path, const std::string& pointer,
             std::vector<Leaf>& out) {
  if (value.is_string()) {
    out.push_back({slot_path, path, pointer, value.get<std::string>()});
  } else if (value.is_object()) {
    for (const auto& [k, v] : value.items()) {
      const std::string sep = path.empty() ? "" : ".";
      collect(v, slot_path + sep + k, path + sep + k, pointer + "/" + k, out);
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      collect(value[i], slot_path + "[]", path + "[" + std::to_string(i) + "]", pointer + "/" + std::to_string(i), out);
    }
  }
}

}  // namespace

std::string_view output_name(Output o) {
  switch (o) {
    case Output::kModel:
      return "a model";
    case Output::kDataset:
      return "a dataset";
    case Output::kNone:
      break;
  }
  return "nothing";
}

const std::vector<StageType>& stage_types() {
  static const std::vector<StageType> types = {
      // The rest of a curate stage is {curation: a curation request without its curationId}; its
      // output is the dataset version its curation registers.
      {"curate", true, Output::kDataset, false, {}, tel::PipelineStageType::kCurate},
      // The rest of a distill stage is {distillation: a distillation request}; its output is the
      // dataset version its distillation registers. The telemetry registry's stage types have no
      // value of its own for it: it counts as curation (it makes a dataset).
      {"distill",
       true,
       Output::kDataset,
       false,
       {{"distillation.from", Output::kDataset}},
       tel::PipelineStageType::kCurate},
      {"train",
       true,
       Output::kModel,
       false,
       {{"config.dataset", Output::kDataset},
        {"config.validationDataset", Output::kDataset},
        {"warmStartModelId", Output::kModel},
        {"grader", Output::kModel, true},
        {"config.reward.terms[].kind", Output::kModel, true}},
       tel::PipelineStageType::kTrain},
      {"evaluate",
       true,
       Output::kNone,
       true,
       {{"model", Output::kModel}, {"dataset", Output::kDataset}, {"grader", Output::kModel, true}},
       tel::PipelineStageType::kEvaluate},
  };
  return types;
}

const StageType* find_stage_type(std::string_view name) {
  for (const auto& t : stage_types()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<std::vector<Stage>> check_pipeline_plan(const json& plan) {
  if (!plan.is_object()) return invalid_field("plan", "must be a JSON or YAML object {kind: pipeline, stages: [...]}");
  for (const auto& [k, v] : plan.items()) {
    if (k != "kind" && k != "stages" && k != "description") {
      return invalid_field(k, "is not a field of a pipeline plan (fields: kind, description, stages)");
    }
  }
  if (!plan.contains("kind") || plan["kind"] != "pipeline") {
    return invalid_field("kind", "must be \"pipeline\", got " + (plan.contains("kind") ? plan["kind"].dump() : "none"));
  }
  if (plan.contains("description") && !plan["description"].is_string()) {
    return invalid_field("description", "must be a string");
  }
  if (!plan.contains("stages") || !plan["stages"].is_array() || plan["stages"].empty()) {
    return invalid_field("stages", "required: a list of at least one stage {name, type, ...}");
  }
  const json& stages = plan["stages"];
  if (stages.size() > kMaxStages) {
    return invalid_field("stages", "has " + std::to_string(stages.size()) + " stages; a pipeline may have at most " +
                                       std::to_string(kMaxStages));
  }
  // Every name first: a reference to a later stage is told apart from one to no stage.
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < stages.size(); ++i) {
    const json& s = stages[i];
    const std::string field = stage_field(i);
    if (!s.is_object()) return invalid_field(field, "must be an object {name, type, ...}");
    if (!s.contains("name") || !s["name"].is_string() || !valid_name(s["name"].get<std::string>())) {
      return invalid_field(field + ".name", "stage " + std::to_string(i) +
                                                " needs a name: 1-63 letters, digits, '-' or '_', starting with a letter "
                                                "or digit");
    }
    const std::string name = s["name"].get<std::string>();
    if (auto [it, fresh] = index.emplace(name, i); !fresh) {
      return invalid_field(field + ".name", "stage '" + name + "' is named twice (stages " + std::to_string(it->second) +
                                                " and " + std::to_string(i) + "); each stage needs a name of its own");
    }
  }
  std::vector<Stage> out;
  for (size_t i = 0; i < stages.size(); ++i) {
    const json& s = stages[i];
    const std::string field = stage_field(i);
    Stage stage;
    stage.name = s["name"].get<std::string>();
    const std::string label = stage_label(i, stage.name);
    if (!s.contains("type") || !s["type"].is_string()) {
      return invalid_field(field + ".type", label + " needs a type: curate, distill, train or evaluate");
    }
    const std::string type = s["type"].get<std::string>();
    stage.type = find_stage_type(type);
    if (!stage.type) {
      return invalid_field(field + ".type", label + " has type '" + type + "'; the types are curate, distill, train and evaluate");
    }
    if (!stage.type->available) {
      std::string available;
      for (const auto& t : stage_types()) {
        if (t.available) available += (available.empty() ? "" : ", ") + std::string(t.name);
      }
      return invalid_field(field + ".type", label + " is a " + type + " stage: the " + type +
                                                " stage type is not available yet on this trainerd (available: " +
                                                available + ")");
    }
    if (s.contains("gate")) {
      const json& g = s["gate"];
      if (!stage.type->gates) {
        return invalid_field(field + ".gate", label + " is a " + type + " stage, which has no mean score to gate on; put "
                                                  "the gate on an evaluate stage");
      }
      if (!g.is_object() || g.size() != 1 || !g.contains("minMeanScore") || !g["minMeanScore"].is_number() ||
          g["minMeanScore"].get<double>() < 0 || g["minMeanScore"].get<double>() > 1) {
        return invalid_field(field + ".gate", label + ": a gate is {minMeanScore: a number in [0, 1]}, got " + g.dump());
      }
      stage.min_mean_score = g["minMeanScore"].get<double>();
    }
    stage.body = json::object();
    for (const auto& [k, v] : s.items()) {
      bool shared = false;
      for (const char* key : kStageKeys) shared = shared || k == key;
      if (!shared) stage.body[k] = v;
    }
    std::vector<Leaf> leaves;
    collect(stage.body, "", "", "", leaves);
    for (const Leaf& leaf : leaves) {
      bool prefixed = false;
      const std::string target = referenced_name(leaf.value, &prefixed);
      if (target.empty() && !(leaf.value.size() == 1 && leaf.value[0] == '@')) continue;
      const std::string where = field + "." + leaf.path;
      const RefSlot* slot = nullptr;
      for (const RefSlot& r : stage.type->slots) {
        if (r.path == leaf.slot_path && r.model_prefixed == prefixed) slot = &r;
      }
      if (!slot) {
        std::string allowed;
        for (const RefSlot& r : stage.type->slots) {
          allowed += (allowed.empty() ? "" : ", ") + std::string(r.path) + (r.model_prefixed ? " (model:@NAME)" : "");
        }
        return invalid_field(where, label + ": an @ reference is not allowed here; a " + type + " stage takes them in " +
                                        (allowed.empty() ? std::string("no field") : allowed));
      }
      auto it = index.find(target);
      if (it == index.end()) {
        return invalid_field(where, label + " refers to @" + target + ", but no stage is named '" + target + "'");
      }
      if (it->second >= i) {
        return invalid_field(where, label + " refers to @" + target + (it->second == i ? ", itself" : ", a later stage") +
                                        ": a stage may refer only to stages before it (this would make a cycle)");
      }
      const StageType* source = find_stage_type(stages[it->second]["type"].get<std::string>());
      if (source->output != slot->expects) {
        return invalid_field(where, label + " refers to @" + target + ", a " + std::string(source->name) +
                                        " stage, which produces " + std::string(output_name(source->output)) +
                                        "; this field needs " + std::string(output_name(slot->expects)));
      }
      stage.references.push_back({where, leaf.pointer, it->second, slot});
    }
    out.push_back(std::move(stage));
  }
  return out;
}

json resolve_references(const Stage& stage, const std::vector<std::string>& outputs) {
  json body = stage.body;
  for (const Reference& r : stage.references) {
    const std::string value = outputs.at(r.stage);
    body[json::json_pointer(r.json_path)] = r.slot->model_prefixed ? std::string(kModelPrefix) + value : value;
  }
  return body;
}

}  // namespace trainer::service::pipeline

// A pipeline plan (docs/pipelines.md): `{kind: pipeline, description?, stages: [...]}`, each
// stage `{name, type, gate?, ...}` where the rest is what its type starts (a train stage's run
// plan, an evaluate stage's evaluation request, a curate stage's `curation` request, a distill
// stage's `distillation` request). A stage refers to an earlier stage's output as
// `@NAME` (or `model:@NAME` in a grader or reward term) in the places its type's row allows.
//
// The stage types are one table (stage_types()): what each produces, where it takes references,
// whether it may gate, and whether this trainerd runs it yet. check_pipeline_plan() refuses bad
// input naming the stage and the field; it reads nothing but the plan.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "telemetry/instruments.h"

namespace trainer::service::pipeline {

using json = nlohmann::json;

// The most stages one pipeline may have.
inline constexpr size_t kMaxStages = 64;
// The longest stage name.
inline constexpr size_t kMaxStageNameLength = 63;

// What a stage hands the stages after it.
enum class Output { kNone, kModel, kDataset };
std::string_view output_name(Output o);  // "nothing", "a model", "a dataset"

// A place in a stage where `@NAME` may stand, and what it expects there. `path` is the field's
// path inside the stage, arrays written `[]` ("config.reward.terms[].kind"); `model_prefixed`: the
// value is a grader or term kind, `model:@NAME`.
struct RefSlot {
  std::string_view path;
  Output expects;
  bool model_prefixed = false;
};

// One row of the stage-type table.
struct StageType {
  std::string_view name;  // as written in `type`
  bool available;         // false: refused at submission, "not available yet"
  Output output;          // what its completion hands on
  bool gates;             // whether it may carry `gate: {minMeanScore}` (it has a mean score)
  std::vector<RefSlot> slots;
  telemetry::PipelineStageType metric_type;  // the stage duration histogram's type
};

const std::vector<StageType>& stage_types();
const StageType* find_stage_type(std::string_view name);

// One `@NAME` found in a stage: where (its full field path, "stages[2].config.dataset"), the
// stage index it names, and the slot it fills.
struct Reference {
  std::string field;       // e.g. "stages[2].config.dataset"
  std::string json_path;   // a JSON pointer inside the stage, e.g. "/config/dataset"
  size_t stage;            // the index of the stage it names
  const RefSlot* slot;
};

// A checked stage.
struct Stage {
  std::string name;
  const StageType* type;
  std::optional<double> min_mean_score;  // the gate, when it has one
  json body;                             // the stage without name, type and gate
  std::vector<Reference> references;
};

// Checks the whole plan: kind, stages (1 to kMaxStages), each stage's name (unique), type (known
// and available), gate, and every `@` reference (only where its type's row allows one, naming an
// earlier stage whose output is what the place expects). Errors name the field
// ("stages[1].config.dataset") and the stage.
Result<std::vector<Stage>> check_pipeline_plan(const json& plan);

// The stage's body with every reference replaced by the output `outputs[stage]` (a model or
// dataset id), as its type starts it.
json resolve_references(const Stage& stage, const std::vector<std::string>& outputs);

}  // namespace trainer::service::pipeline

// Pipelines (pipelines.h): submission and its checks, reading, resume, cancel, annotate, and the
// phase table; the kernel's step is in pipeline_steps.cpp.
#include "service/pipelines.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "plan/plan.h"
#include "service/pipeline_doc.h"
#include "service/registry.h"
#include "service/workloads.h"

namespace trainer::service {

using namespace pipeline_doc;

namespace {

// The longest description.
constexpr size_t kMaxDescription = 4096;

// A field of a stage's own request, blamed on the stage ("stages[1].config.dataset").
Status blame_stage(const Status& st, size_t index, const std::string& name) {
  const std::string prefix = "stages[" + std::to_string(index) + "]";
  std::string field = st.field();
  if (field.rfind("plan.", 0) == 0) field = field.substr(5);
  if (field == "plan") field.clear();
  return Status(st.code(), field.empty() ? prefix : prefix + "." + field, "stage '" + name + "': " + st.message());
}

}  // namespace

const tasks::PhaseTable& pipeline_phase_table() {
  static const tasks::PhaseTable table = *tasks::PhaseTable::make(
      kKind,
      {{kRunning}, {kInterrupted, false, false, true}, {kCompleted, true}, {kFailed, true}, {kCancelled, true}},
      {{kRunning, {kInterrupted, kCompleted, kFailed, kCancelled}}, {kInterrupted, {kRunning, kCancelled}}});
  return table;
}

Pipelines::Pipelines(ServiceCore& core, Datasets& datasets, Evaluations& evaluations, Curations& curations,
                     Distillations& distillations, Hooks hooks)
    : core_(core),
      datasets_(datasets),
      evaluations_(evaluations),
      curations_(curations),
      distillations_(distillations),
      hooks_(std::move(hooks)),
      tasks_(pipeline_phase_table(), [this](tasks::Step& s) { return step_task(s); }) {}

Result<json> Pipelines::check_stage(const pipeline::Stage& stage, size_t index, bool show_resolved) {
  json out = {{"name", stage.name}, {"type", std::string(stage.type->name)}};
  json refs = json::array();
  for (const auto& r : stage.references) refs.push_back({{"field", r.field}, {"stage", r.stage}});
  out["references"] = refs;
  if (stage.min_mean_score) out["gate"] = {{"minMeanScore", *stage.min_mean_score}};
  if (stage.type->name == "train") {
    if (stage.references.empty()) {
      auto dry = hooks_.dry_run(run_plan_of(stage.body));
      if (!dry.is_ok()) return blame_stage(dry.status(), index, stage.name);
      out["resolution"] = "checked against the service: it would start now";
      if (show_resolved) out["plan"] = (*dry)["plan"];
      if (dry->contains("warnings")) out["warnings"] = (*dry)["warnings"];
    } else {
      // Its shape only: what it refers to does not exist yet (a model: term or grader keeps its
      // form, naming a stand-in the plan parser takes as any model).
      json shaped = run_plan_of(stage.body);
      for (const auto& r : stage.references) {
        if (r.slot->model_prefixed) shaped[json::json_pointer(r.json_path)] = "model:stage-output";
      }
      auto parsed = plan::plan_from_json(shaped, "plan");
      if (!parsed.is_ok()) return blame_stage(parsed.status(), index, stage.name);
      out["resolution"] = "its plan's shape is checked; the rest once the stages it refers to have their outputs";
    }
    return out;
  }
  if (stage.type->name == "curate") {
    const json& b = stage.body;
    Status fields = check_fields(b, {"curation"});
    if (!fields.is_ok()) return blame_stage(fields, index, stage.name);
    if (!b.contains("curation") || !b["curation"].is_object()) {
      return blame_stage(invalid_field("curation", "required: the curation request {sessionHashes, source, threshold, "
                                                   "dataset, judge, systemPrompt?, graderInstructions?} "
                                                   "(docs/curations.md), without a curationId"),
                         index, stage.name);
    }
    Status checked = curations_.check(b["curation"]);
    if (!checked.is_ok()) {
      const std::string field = checked.field().empty() ? "curation" : "curation." + checked.field();
      return blame_stage(Status(checked.code(), field, checked.message()), index, stage.name);
    }
    out["resolution"] = "checked: its sessions and its judge are found; its curation registers a version of dataset '" +
                        b["curation"]["dataset"].get<std::string>() + "'";
    return out;
  }
  if (stage.type->name == "distill") {
    const json& b = stage.body;
    Status fields = check_fields(b, {"distillation"});
    if (!fields.is_ok()) return blame_stage(fields, index, stage.name);
    if (!b.contains("distillation") || !b["distillation"].is_object()) {
      return blame_stage(invalid_field("distillation", "required: the distillation request {workload, teacher, from, "
                                                       "to, replicas?, maxTokens?, temperature?, topP?, seed?, "
                                                       "instructions?, smoke?} (docs/distillations.md)"),
                         index, stage.name);
    }
    const bool source_later = !stage.references.empty();  // its only slot: distillation.from
    Status checked = distillations_.check(b["distillation"], source_later);
    if (!checked.is_ok()) {
      const std::string field = checked.field().empty() ? "distillation" : "distillation." + checked.field();
      return blame_stage(Status(checked.code(), field, checked.message()), index, stage.name);
    }
    out["resolution"] = std::string(source_later ? "checked but for its source, an earlier stage's output"
                                                 : "checked: its source and its teacher are found") +
                        "; its distillation registers a version of dataset '" +
                        b["distillation"]["to"].get<std::string>() + "'";
    return out;
  }
  // evaluate
  const json& b = stage.body;
  auto fields = check_fields(b, {"model", "dataset", "grader", "graderInstructions", "workload", "maxNewTokens", "description"});
  if (!fields.is_ok()) return blame_stage(fields, index, stage.name);
  if (!b.contains("model") || !b["model"].is_string() || b["model"].get<std::string>().empty()) {
    return blame_stage(invalid_field("model", "required: a registered model's id, a completed run's id, a base model's "
                                              "name, or @STAGE of an earlier train stage"),
                       index, stage.name);
  }
  auto referenced = [&](const char* key) {
    return std::any_of(stage.references.begin(), stage.references.end(),
                       [&](const pipeline::Reference& r) { return r.json_path == std::string("/") + key; });
  };
  std::map<std::string, std::string> given;  // the string fields present
  for (const char* key : {"dataset", "grader", "graderInstructions", "workload", "description"}) {
    auto v = optional_string(b, key);
    if (!v.is_ok()) return blame_stage(v.status(), index, stage.name);
    if (*v) given[key] = **v;
  }
  if (!referenced("model")) {
    auto m = evaluations_.resolve_model(b["model"].get<std::string>());
    if (!m.is_ok()) return blame_stage(m.status(), index, stage.name);
  }
  if (given.count("dataset") && !referenced("dataset")) {
    auto d = datasets_.resolve(given["dataset"], "dataset");
    if (!d.is_ok()) return blame_stage(d.status(), index, stage.name);
  }
  if (given.count("grader") && !referenced("grader")) {
    Status g = check_grader("grader", given["grader"]);
    if (!g.is_ok()) return blame_stage(g, index, stage.name);
  }
  out["resolution"] = referenced("model") ? "evaluates the output of an earlier stage" : "checked: its model resolves now";
  return out;
}

Result<std::pair<json, bool>> Pipelines::start(const json& plan, bool dry_run, bool show_resolved) {
  TRAINER_ASSIGN_OR_RETURN(std::vector<pipeline::Stage> stages, pipeline::check_pipeline_plan(plan));
  if (plan.contains("description") && plan["description"].get<std::string>().size() > kMaxDescription) {
    return invalid_field("description", "is longer than " + std::to_string(kMaxDescription) + " characters");
  }
  // Every stage is checked before anything is created.
  json checked = json::array();
  for (size_t i = 0; i < stages.size(); ++i) {
    TRAINER_ASSIGN_OR_RETURN(json c, check_stage(stages[i], i, show_resolved));
    checked.push_back(std::move(c));
  }
  if (dry_run) return std::make_pair(json{{"dryRun", true}, {"stages", checked}}, false);

  const double t = core_.now();
  json doc = {{"pipelineId", random_hex(16)},
              {"phase", kRunning},
              {"description", plan.value("description", json(nullptr))},
              {"createdAt", rfc3339(t)},
              {"updatedAt", rfc3339(t)},
              {"endedAt", nullptr},
              {"failureReason", nullptr},
              {"currentStage", nullptr},
              {"phaseHistory", json::array({{{"phase", kRunning}, {"time", rfc3339(t)}}})},
              {"plan", plan}};
  json out_stages = json::array();
  for (const auto& s : stages) {
    json st = {{"name", s.name},
               {"type", std::string(s.type->name)},
               {"state", kStagePending},
               {"runId", nullptr},
               {"evaluationId", nullptr},
               {"curationId", nullptr},
               {"distillationId", nullptr},
               {"output", nullptr},
               {"meanScore", nullptr},
               {"startedAt", nullptr},
               {"endedAt", nullptr},
               {"previousAttempts", json::array()}};
    if (s.min_mean_score) st["gate"] = {{"minMeanScore", *s.min_mean_score}, {"passed", nullptr}};
    out_stages.push_back(std::move(st));
  }
  doc["stages"] = out_stages;
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
      TRAINER_RETURN_IF_ERROR(core_.store->put_pipeline(doc));
      return core_.kernel->create(kKind, doc["pipelineId"].get<std::string>(), kRunning);
    }));
  }
  core_.kernel->wake();
  refresh_active();
  core_.notify();
  return std::make_pair(present(doc), true);
}

Result<json> Pipelines::resolve_locked(const std::string& ref) {
  if (!is_hex(ref)) return field_status(StatusCode::kNotFound, "pipeline", "no pipeline with id '" + ref + "' (pipeline ids are lowercase hex)");
  TRAINER_ASSIGN_OR_RETURN(std::vector<std::string> ids, core_.store->pipeline_ids_with_prefix(ref, 10));
  std::string id = ref;
  if (std::find(ids.begin(), ids.end(), ref) == ids.end()) {
    if (ids.size() > 1) return invalid_field("pipeline", "'" + ref + "' is an ambiguous id prefix");
    if (ids.empty()) return field_status(StatusCode::kNotFound, "pipeline", "no pipeline with id '" + ref + "'");
    id = ids.front();
  }
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> doc, core_.store->get_pipeline(id));
  if (!doc) return field_status(StatusCode::kNotFound, "pipeline", "no pipeline with id '" + ref + "'");
  return std::move(*doc);
}

Result<json> Pipelines::list(const std::string& phase) {
  std::vector<std::string> phases;
  if (phase == "open") {
    phases = {kRunning, kInterrupted};
  } else if (!phase.empty()) {
    if (!pipeline_phase_table().find(phase)) {
      return invalid_field("phase", "'" + phase + "' is not a pipeline phase (RUNNING, INTERRUPTED, COMPLETED, FAILED, "
                                    "CANCELLED, or open)");
    }
    phases = {phase};
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> all, core_.store->list_pipelines(phases));
  json out = json::array();
  for (const auto& d : all) out.push_back(present(d));
  return json{{"pipelines", out}};
}

Result<json> Pipelines::get(const std::string& ref) {
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve_locked(ref));
  return present(doc);
}

Result<json> Pipelines::resume(const std::string& ref) {
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve_locked(ref));
  const std::string id = doc["pipelineId"].get<std::string>();
  if (doc["phase"] != kInterrupted) {
    return json{{"resumed", false},
                {"message", "pipeline " + id + " is " + doc["phase"].get<std::string>() + ", not interrupted; nothing to resume"},
                {"pipeline", present(doc)}};
  }
  // The stage that did not complete starts again as a new run or evaluation; finished ones stay.
  for (auto& st : doc["stages"]) {
    if (st["state"] != kStageFailed && st["state"] != kStageCancelled) continue;
    json previous = {{"state", st["state"]}, {"failure", st.value("failure", json(nullptr))}};
    for (const char* key : kStageIds) {
      previous[key] = st.value(key, json(nullptr));
      st[key] = nullptr;
    }
    st["previousAttempts"].push_back(std::move(previous));
    st["state"] = kStagePending;
    st["startedAt"] = nullptr;
    st["endedAt"] = nullptr;
    st.erase("failure");
  }
  const std::string t = core_.now_rfc3339();
  doc["phase"] = kRunning;
  doc["failureReason"] = nullptr;
  doc["updatedAt"] = t;
  doc["phaseHistory"].push_back({{"phase", kRunning}, {"time", t}});
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->put_pipeline(doc));
    return core_.kernel->move(kKind, id, kRunning);
  }));
  core_.kernel->wake();
  core_.notify();
  return json{{"resumed", true}, {"pipeline", present(doc)}};
}

Result<json> Pipelines::cancel(const std::string& ref) {
  std::unique_lock<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve_locked(ref));
  const std::string id = doc["pipelineId"].get<std::string>();
  const std::string phase = doc["phase"].get<std::string>();
  if (pipeline_phase_table().terminal(phase)) {
    return field_status(StatusCode::kFailedPrecondition, "pipeline",
                        "pipeline " + id + " already ended " + phase + "; there is nothing to cancel");
  }
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    for (auto& st : doc["stages"]) {
      if (st["state"] == kStageRunning) {
        // The running stage ends: its run, evaluation or distillation is cancelled, which frees
        // its claim. One past the point of no return (a run FINALIZING, a distillation
        // ASSEMBLING, one that just ended) and a curation (never cancelled) run to their end; the
        // stage says so, and no later stage starts.
        std::string refusal;
        auto refused = [&](const Status& st_) -> Status {
          if (st_.is_ok()) return Status::ok();
          if (st_.code() != StatusCode::kFailedPrecondition) return st_;
          refusal = st_.message();
          return Status::ok();
        };
        if (st["runId"].is_string()) {
          TRAINER_RETURN_IF_ERROR(refused(hooks_.cancel_run_locked(st["runId"].get<std::string>()).status()));
        } else if (st["evaluationId"].is_string()) {
          TRAINER_RETURN_IF_ERROR(refused(evaluations_.cancel_locked(st["evaluationId"].get<std::string>())));
        } else if (has_id(st, "distillationId")) {
          TRAINER_RETURN_IF_ERROR(refused(distillations_.cancel_locked(st["distillationId"].get<std::string>()).status()));
        } else if (has_id(st, "curationId")) {
          refusal = "its curation " + st["curationId"].get<std::string>() + " cannot be cancelled and runs to completion";
        }
        st["state"] = kStageCancelled;
        st["failure"] = "the pipeline was cancelled" + (refusal.empty() ? std::string() : "; " + refusal);
        stage_ended(st, false);
      } else if (st["state"] == kStagePending) {
        st["state"] = kStageSkipped;
      }
    }
    doc["failureReason"] = "cancelled by request";
    return end_locked(doc, kCancelled);
  }));
  lock.unlock();
  core_.kernel->wake();
  refresh_active();
  return present(doc);
}

Result<json> Pipelines::annotate(const std::string& ref, const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"description"}));
  TRAINER_ASSIGN_OR_RETURN(std::optional<std::string> description, optional_string(body, "description"));
  if (!body.contains("description")) return invalid_field("description", "is required (an empty string clears it)");
  if (description && description->size() > kMaxDescription) {
    return invalid_field("description", "is longer than " + std::to_string(kMaxDescription) + " characters");
  }
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve_locked(ref));
  doc["description"] = description && !description->empty() ? json(*description) : json(nullptr);
  doc["updatedAt"] = core_.now_rfc3339();
  TRAINER_RETURN_IF_ERROR(core_.store->put_pipeline(doc));
  core_.notify();
  return present(doc);
}

void Pipelines::refresh_active() {
  auto open = core_.store->list_pipelines({kRunning, kInterrupted});
  if (open.is_ok()) core_.metrics.set_pipelines_active(static_cast<int>(open->size()));
}

json Pipelines::present(const json& doc) {
  json out = json::object();
  for (const auto& [k, v] : doc.items()) {
    if (!k.empty() && k[0] == '_') continue;
    out[k] = v;
  }
  for (auto& st : out["stages"]) {
    for (auto it = st.begin(); it != st.end();) {
      it = !it.key().empty() && it.key()[0] == '_' ? st.erase(it) : std::next(it);
    }
  }
  return out;
}

}  // namespace trainer::service

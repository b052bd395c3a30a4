// Pipelines (pipelines.h): submission, reading, resume, cancel, and the kernel's "pipeline" kind.
#include "service/pipelines.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "common/sha256.h"
#include "plan/plan.h"
#include "service/registry.h"
#include "service/workloads.h"

namespace trainer::service {
namespace {

constexpr const char* kKind = "pipeline";
// Pipeline phases.
constexpr const char* kRunning = "RUNNING";
constexpr const char* kInterrupted = "INTERRUPTED";
constexpr const char* kCompleted = "COMPLETED";
constexpr const char* kFailed = "FAILED";
constexpr const char* kCancelled = "CANCELLED";
// Stage states.
constexpr const char* kStagePending = "PENDING";
constexpr const char* kStageRunning = "RUNNING";
constexpr const char* kStageCompleted = "COMPLETED";
constexpr const char* kStageFailed = "FAILED";
constexpr const char* kStageCancelled = "CANCELLED";
constexpr const char* kStageSkipped = "SKIPPED";  // never started: an earlier stage stopped the pipeline
// The longest description.
constexpr size_t kMaxDescription = 4096;

std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string stage_label(const json& stage) { return "stage '" + text(stage, "name") + "'"; }

// A run plan's fields as a train stage holds them: the stage's body with kind "run".
json run_plan_of(const json& body) {
  json plan = body;
  plan["kind"] = "run";
  return plan;
}

// A field of a stage's own request, blamed on the stage ("stages[1].config.dataset").
Status blame_stage(const Status& st, size_t index, const std::string& name) {
  const std::string prefix = "stages[" + std::to_string(index) + "]";
  std::string field = st.field();
  if (field.rfind("plan.", 0) == 0) field = field.substr(5);
  if (field == "plan") field.clear();
  return Status(st.code(), field.empty() ? prefix : prefix + "." + field, "stage '" + name + "': " + st.message());
}

// The id of the curation that attempt `attempt` (1, 2, ...) of curate stage `stage` starts: the
// same for every step, restart and resume that finds the attempt, so it is never started twice.
std::string curation_id_of(const std::string& pipeline_id, const std::string& stage, size_t attempt) {
  return "pipeline-" + pipeline_id + "-" + stage + (attempt > 1 ? "-attempt-" + std::to_string(attempt) : "");
}

// The id of the distillation that attempt `attempt` of distill stage `stage` starts (a
// distillation id is 12 hex digits): the same for every step that finds the attempt.
std::string distillation_id_of(const std::string& pipeline_id, const std::string& stage, size_t attempt) {
  return sha256_hex("pipeline " + pipeline_id + " stage " + stage + " attempt " + std::to_string(attempt)).substr(0, 12);
}

// The id fields a stage records, one per kind of thing a stage starts.
const char* const kStageIds[] = {"runId", "evaluationId", "curationId", "distillationId"};

// Whether the stage has started `key`'s kind of thing (documents from before a kind existed lack it).
bool has_id(const json& stage, const char* key) { return stage.value(key, json(nullptr)).is_string(); }

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

void Pipelines::stage_ended(json& stage, bool success) {
  const double t = core_.now();
  stage["endedAt"] = rfc3339(t);
  const double started = stage.value("_startedAt", t);
  if (const pipeline::StageType* type = pipeline::find_stage_type(text(stage, "type"))) {
    core_.metrics.pipeline_stage_ended(type->metric_type, success, std::max(0.0, t - started));
  }
}

Status Pipelines::end_locked(json& doc, const std::string& phase) {
  const std::string t = core_.now_rfc3339();
  doc["phase"] = phase;
  doc["updatedAt"] = t;
  if (pipeline_phase_table().terminal(phase)) doc["endedAt"] = t;
  doc["currentStage"] = nullptr;
  doc["phaseHistory"].push_back({{"phase", phase}, {"time", t}});
  TRAINER_RETURN_IF_ERROR(core_.store->put_pipeline(doc));
  TRAINER_RETURN_IF_ERROR(core_.kernel->move(kKind, doc["pipelineId"].get<std::string>(), phase));
  core_.notify();
  return Status::ok();
}

Status Pipelines::start_stage_locked(json& doc, size_t i) {
  json& st = doc["stages"][i];
  const std::string id = doc["pipelineId"].get<std::string>();
  const std::string name = text(st, "name");
  // The plan as submitted (already checked), its references replaced by earlier outputs.
  auto stages = pipeline::check_pipeline_plan(doc["plan"]);
  if (!stages.is_ok()) return internal_error("pipeline " + id + " holds a plan that no longer checks: " + stages.status().describe());
  std::vector<std::string> outputs;
  for (const auto& s : doc["stages"]) {
    const json o = s.value("output", json(nullptr));
    outputs.push_back(o.is_object() ? text(o, "id") : std::string());
  }
  const json body = pipeline::resolve_references((*stages)[i], outputs);
  const double t = core_.now();
  Result<json> started = internal_error("no stage type");
  if (st["type"] == "train") {
    started = hooks_.start_run_locked(run_plan_of(body), id, name);
    if (started.is_ok()) st["runId"] = (*started)["runId"];
  } else if (st["type"] == "curate") {
    json request = body.value("curation", json::object());
    request["curationId"] = curation_id_of(id, name, st["previousAttempts"].size() + 1);
    auto applied = curations_.apply_locked(request);
    if (applied.is_ok()) {
      st["curationId"] = request["curationId"];
      started = std::move(applied->first);
    } else {
      started = applied.status();
    }
  } else if (st["type"] == "distill") {
    const std::string did = distillation_id_of(id, name, st["previousAttempts"].size() + 1);
    started = distillations_.create_locked(body.value("distillation", json::object()), did);
    if (started.is_ok()) st["distillationId"] = did;
  } else {
    json request = body;
    if (!request.contains("description")) request["description"] = "pipeline " + id + " stage " + name;
    started = evaluations_.start_locked(request);
    if (started.is_ok()) {
      const std::string eid = (*started)["evaluationId"].get<std::string>();
      st["evaluationId"] = eid;
      TRAINER_ASSIGN_OR_RETURN(std::optional<json> e, core_.store->get_evaluation(eid));
      if (e) {
        (*e)["pipeline"] = {{"pipelineId", id}, {"stage", name}};
        TRAINER_RETURN_IF_ERROR(core_.store->put_evaluation(*e));
      }
    }
  }
  st["startedAt"] = rfc3339(t);
  st["_startedAt"] = t;
  doc["currentStage"] = name;
  if (!started.is_ok()) {
    st["state"] = kStageFailed;
    st["failure"] = "it could not start: " + started.status().describe();
    stage_ended(st, false);
    doc["failureReason"] = stage_label(st) + " could not start: " + started.status().describe() +
                           "; fix what it names, then `trainer pipelines resume " + id + "`";
    return end_locked(doc, kInterrupted);
  }
  st["state"] = kStageRunning;
  return Status::ok();
}

Result<bool> Pipelines::follow_stage_locked(json& doc, size_t i) {
  json& st = doc["stages"][i];
  std::string phase, failure;
  json output = nullptr;
  json mean = nullptr;
  if (st["runId"].is_string()) {
    const std::string run_id = st["runId"].get<std::string>();
    TRAINER_ASSIGN_OR_RETURN(RunRecord run, core_.resolve_run(run_id, "run"));
    if (!is_terminal(run.phase)) return false;
    phase = phase_name(run.phase);
    failure = run.failure_reason.value_or("");
    if (run.phase == Phase::kCompleted) {
      // The model its completion registers is the output, once REGISTERED (a warm start needs
      // that); a registration that failed leaves the run's adapter, by the run's id.
      const std::string model_id = run.view.value("modelId", std::string());
      output = {{"kind", "model"}, {"id", run_id}, {"runId", run_id}};
      if (!model_id.empty()) {
        TRAINER_ASSIGN_OR_RETURN(std::optional<json> model, core_.store->get_trained_model(model_id));
        const std::string status = model ? text(*model, "status") : std::string(kModelFailed);
        if (status != kModelRegistered && status != kModelFailed) return false;  // still registering
        if (status == kModelRegistered) {
          output["id"] = model_id;
          output["modelId"] = model_id;
        }
      }
    }
  } else if (st["evaluationId"].is_string()) {
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> e, core_.store->get_evaluation(st["evaluationId"].get<std::string>()));
    if (!e) return internal_error("evaluation " + st["evaluationId"].get<std::string>() + " of a pipeline is missing");
    phase = text(*e, "phase");
    if (phase != "COMPLETED" && phase != "FAILED" && phase != "CANCELLED") return false;
    failure = text(*e, "failureReason");
    if (phase == "COMPLETED") {
      mean = e->value("report", json::object()).value("meanScore", json(nullptr));
      output = {{"kind", "score"}, {"evaluationId", (*e)["evaluationId"]}, {"meanScore", mean}};
    }
  } else if (st.value("curationId", json(nullptr)).is_string()) {
    const std::string cid = st["curationId"].get<std::string>();
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> c, core_.store->get_curation(cid));
    if (!c) return internal_error("curation " + cid + " of a pipeline is missing");
    phase = text(*c, "phase");
    if (phase != "COMPLETED" && phase != "FAILED") return false;
    failure = text(*c, "failureReason");
    if (phase == "COMPLETED") {
      // The output is the dataset version it registered, by its content hash: a later stage's
      // @NAME trains or evaluates on exactly these rows, wherever the dataset's name moves.
      const json dataset = c->value("result", json::object()).value("dataset", json::object());
      output = {{"kind", "dataset"}, {"id", text(dataset, "hash")}, {"curationId", cid}, {"dataset", dataset}};
    }
  } else if (has_id(st, "distillationId")) {
    const std::string did = st["distillationId"].get<std::string>();
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> d, core_.store->get_distillation(did));
    if (!d) return internal_error("distillation " + did + " of a pipeline is missing");
    phase = text(*d, "phase");
    if (phase != "COMPLETED" && phase != "FAILED" && phase != "CANCELLED") return false;
    failure = text(*d, "failureReason");
    if (phase == "COMPLETED") {
      const json dataset = d->value("result", json::object()).value("dataset", json::object());
      output = {{"kind", "dataset"}, {"id", text(dataset, "hash")}, {"distillationId", did}, {"dataset", dataset}};
    }
  } else {
    return internal_error("a running stage of pipeline " + text(doc, "pipelineId") +
                          " has no run, evaluation, curation or distillation");
  }
  const bool completed = phase == "COMPLETED";
  st["state"] = completed ? kStageCompleted : kStageFailed;
  st["output"] = output;
  st["meanScore"] = mean;
  const char* what = st["runId"].is_string()          ? "run"
                     : st["evaluationId"].is_string() ? "evaluation"
                     : has_id(st, "curationId")       ? "curation"
                                                      : "distillation";
  if (!completed) st["failure"] = "its " + std::string(what) + " ended " + phase +
                                   (failure.empty() ? "" : ": " + failure);
  stage_ended(st, completed);
  return true;
}

Status Pipelines::step_task(tasks::Step& step) {
  const std::string id = step.task().id;
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_pipeline(id));
  if (!stored) return internal_error("pipeline " + id + " has a task but no document");
  json doc = std::move(*stored);
  if (doc["phase"] != kRunning) return Status::ok();
  const json before = doc;
  json& stages = doc["stages"];
  for (size_t i = 0; i < stages.size(); ++i) {
    json& st = stages[i];
    if (st["state"] == kStageCompleted) continue;
    if (st["state"] == kStagePending) {
      TRAINER_RETURN_IF_ERROR(start_stage_locked(doc, i));
      if (doc["phase"] != kRunning) return Status::ok();  // ended: written
      break;
    }
    if (st["state"] != kStageRunning) {
      return internal_error("pipeline " + id + " is RUNNING with " + stage_label(st) + " " + text(st, "state"));
    }
    TRAINER_ASSIGN_OR_RETURN(bool ended, follow_stage_locked(doc, i));
    if (!ended) break;
    if (st["state"] != kStageCompleted) {
      doc["failureReason"] = stage_label(st) + " did not complete: " + text(st, "failure") +
                             "; `trainer pipelines resume " + id + "` starts it again";
      return end_locked(doc, kInterrupted);
    }
    if (st.contains("gate")) {
      const double min = st["gate"]["minMeanScore"].get<double>();
      const bool passed = st["meanScore"].is_number() && st["meanScore"].get<double>() >= min;
      st["gate"]["passed"] = passed;
      if (!passed) {
        for (size_t j = i + 1; j < stages.size(); ++j) stages[j]["state"] = kStageSkipped;
        const std::string score = st["meanScore"].is_number() ? std::to_string(st["meanScore"].get<double>())
                                                              : std::string("none (no row was scored)");
        doc["failureReason"] = "the gate of " + stage_label(st) + " stopped the pipeline: mean score " + score +
                               " is below its minMeanScore " + std::to_string(min);
        TRAINER_RETURN_IF_ERROR(end_locked(doc, kFailed));
        refresh_active();
        return Status::ok();
      }
    }
    if (i + 1 == stages.size()) {
      TRAINER_RETURN_IF_ERROR(end_locked(doc, kCompleted));
      refresh_active();
      return Status::ok();
    }
  }
  if (doc == before) return Status::ok();
  doc["updatedAt"] = core_.now_rfc3339();
  TRAINER_RETURN_IF_ERROR(core_.store->put_pipeline(doc));
  core_.notify();
  return Status::ok();
}

}  // namespace trainer::service

// Pipelines (pipelines.h): the kernel's step, which starts each stage's run, evaluation, curation or
// distillation in turn, follows it to its end, checks gates, and ends the pipeline.
#include "service/pipelines.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "common/sha256.h"
#include "service/pipeline_doc.h"
#include "service/registry.h"

namespace trainer::service {

using namespace pipeline_doc;

namespace {

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

}  // namespace

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

// Comparisons as tasks of the kernel (its "comparison" kind): each step, inside the kernel's
// transaction with core_.mu held, starts the evaluation of every target whose model is REGISTERED (the
// evaluation and its id on the target commit together), reads the ended ones, and ends the
// comparison once every target has an outcome: PREPARING, RUNNING, then COMPLETED, PARTIAL or FAILED.
#include <cstdio>
#include <map>
#include <optional>

#include "plan/plan.h"

#include "service/comparison_names.h"
#include "service/registry.h"
#include "service/comparisons.h"
#include "service/evaluation_rows.h"
#include "service/paired_bootstrap.h"

namespace trainer::service {
namespace {

namespace tel = trainer::telemetry;
using namespace comparison;  // NOLINT: the phases, target statuses and readers this file is about

constexpr int64_t kOpenScan = 1000;  // the most open comparisons given their task at start()

// The description an evaluation started for target `index` of comparison `id` carries: how a
// comparison of an older store finds the evaluation it started before it could record it.
std::string evaluation_tag(const std::string& id, size_t index) {
  return "comparison " + id + " target " + std::to_string(index);
}

// The comparison's phase from its targets' statuses.
std::string phase_of(const json& targets) {
  bool waiting = false;
  bool evaluating = false;
  size_t completed = 0;
  for (const auto& t : targets) {
    waiting = waiting || t["status"] == kTargetWaiting;
    evaluating = evaluating || t["status"] == kTargetEvaluating;
    completed += t["status"] == kTargetCompleted ? 1 : 0;
  }
  return waiting ? kPreparing : evaluating ? kRunning : completed == targets.size() ? kCompleted : completed > 0 ? kPartial : kFailed;
}

// The judge instructions a grader carries ("" = none).
std::string instructions_of(const json& grader) {
  return grader.is_object() && grader.contains("graderInstructions") && grader["graderInstructions"].is_string()
             ? grader["graderInstructions"].get<std::string>()
             : "";
}

// An evaluation that scored model `model_id` under exactly the comparison's contract (dataset
// hash, grader and its instructions, the rule file's content, the token ceiling) and did not fail:
// the newest COMPLETED one, else an open one; null when none.
json reusable_evaluation(const std::vector<json>& all, const std::string& model_id, const json& contract) {
  const json& grader = contract["grader"];
  const std::string rule_sha = grader_file_sha256(grader);
  const bool rule = plan::term_kind(grader.value("kind", std::string())) == plan::TermKind::kRule;
  if (rule && rule_sha.empty()) return nullptr;  // a rule file that cannot be read now is not known to be the same
  const json* completed = nullptr;
  const json* open = nullptr;
  for (const auto& e : all) {
    const std::string phase = text_of(e, "phase");
    if (phase != "COMPLETED" && phase != "QUEUED" && phase != "RUNNING") continue;
    const json m = e.contains("model") && e["model"].is_object() ? e["model"] : json::object();
    if (text_of(m, "modelId") != model_id) continue;
    if (text_of(e.value("dataset", json::object()), "hash") != text_of(contract["dataset"], "hash")) continue;
    if (text_of(e.value("grader", json::object()), "kind") != text_of(grader, "kind")) continue;
    if (instructions_of(e.value("grader", json::object())) != instructions_of(grader)) continue;
    if (e.value("maxNewTokens", json(nullptr)) != contract["maxNewTokens"]) continue;
    if (text_of(e, "graderFileSha256") != rule_sha) continue;
    if (phase == "COMPLETED") {
      if (!completed || text_of(e, "endedAt") > text_of(*completed, "endedAt")) completed = &e;
    } else if (!open) {
      open = &e;
    }
  }
  return completed ? *completed : open ? *open : json(nullptr);
}

// Each completed target's paired-bootstrap interval against the source (`versusSource`), and the
// outcome: a COMPLETED comparison names the target with the highest mean score only when its
// interval against every other target lies above zero ("winner"); otherwise none is named
// ("noClearWinner", with the leader shown). A comparison that did not complete is "incomplete".
void judge_comparison(ServiceCore& core, json& doc, const std::string& phase) {
  json& targets = doc["targets"];
  std::map<size_t, std::map<int64_t, double>> scores;
  for (size_t i = 0; i < targets.size(); ++i) {
    json& t = targets[i];
    t["versusSource"] = nullptr;
    if (t["status"] != kTargetCompleted || !t["evaluationId"].is_string()) continue;
    auto rows = evaluation_row_scores(core, t["evaluationId"].get<std::string>());
    if (rows.is_ok()) {
      scores[i] = std::move(*rows);
    } else {
      std::fprintf(stderr, "trainerd: comparison %s: %s\n", text_of(doc, "comparisonId").c_str(),
                   rows.status().describe().c_str());
    }
  }
  auto interval = [&](size_t a, size_t b) -> std::optional<BootstrapInterval> {
    if (!scores.count(a) || !scores.count(b)) return std::nullopt;
    return paired_bootstrap(paired_differences(scores[a], scores[b]));
  };
  for (size_t i = 1; i < targets.size(); ++i) {
    if (auto iv = interval(i, 0)) targets[i]["versusSource"] = bootstrap_json(*iv);
  }
  doc["statistics"] = bootstrap_method_json();
  doc["winner"] = nullptr;
  doc["leader"] = nullptr;
  if (phase != kCompleted) {
    doc["outcome"] = "incomplete";
    return;
  }
  std::optional<size_t> best;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!targets[i]["meanScore"].is_number()) continue;
    if (!best || targets[i]["meanScore"].get<double>() > targets[*best]["meanScore"].get<double>()) best = i;
  }
  if (!best) {
    doc["outcome"] = "noClearWinner";
    return;
  }
  bool clear = true;
  for (size_t i = 0; i < targets.size() && clear; ++i) {
    if (i == *best) continue;
    const auto iv = interval(*best, i);
    clear = iv && iv->low > 0;
  }
  const json& b = targets[*best];
  const json named = {{"target", b["target"]}, {"kind", b["kind"]}, {"modelId", b["modelId"]}, {"meanScore", b["meanScore"]}};
  doc["outcome"] = clear ? "winner" : "noClearWinner";
  doc[clear ? "winner" : "leader"] = named;
}


// The comparison in its source run's trace (a child of the run's root span, which may have ended
// before it): from its acceptance to its end, linked to the root spans of the other runs it measured.
void trace_comparison(ServiceCore& core, const json& doc, const std::string& phase) {
  if (!core.traces.enabled()) return;
  auto source = core.resolve_run(doc["source"].value("runId", std::string()), "source");
  if (!source.is_ok()) return;
  std::vector<tel::SpanContext> links;
  for (const auto& t : doc["targets"]) {
    const std::string run_id = t.value("runId", std::string());
    if (run_id.empty() || run_id == source->id) continue;
    if (auto r = core.resolve_run(run_id, "target"); r.is_ok() && !r->trace_id.empty()) {
      links.push_back(RunTraces::root_of(*r));
    }
  }
  core.traces.operation(*source, kComparisonSpan, number_of(doc, "_acceptedAt"), core.now(),
                        {{"trainer.comparison.id", doc.value("comparisonId", std::string())},
                         {"trainer.comparison.phase", phase},
                         {"trainer.comparison.targets", static_cast<int64_t>(doc["targets"].size())}},
                        phase == kFailed ? Status(StatusCode::kUnavailable, "the comparison failed") : Status::ok(),
                        std::move(links));
}

}  // namespace

// The kernel's "comparison" kind: PREPARING while a target's model registers, RUNNING while its
// evaluations run, then COMPLETED, PARTIAL or FAILED. It holds no claim (its evaluations do).
const tasks::PhaseTable& comparison_phase_table() {
  static const tasks::PhaseTable table = *tasks::PhaseTable::make(
      "comparison", {{kPreparing}, {kRunning}, {kCompleted, true}, {kPartial, true}, {kFailed, true}},
      {{kPreparing, {kRunning, kCompleted, kPartial, kFailed}}, {kRunning, {kCompleted, kPartial, kFailed}}});
  return table;
}

// Open comparisons of a store from before the kernel stepped them get their task.
Status Comparisons::resume() {
  auto open = core_.store->list_comparisons("", {kPreparing, kRunning}, kOpenScan, 0);
  if (!open.is_ok()) return open.status();
  std::lock_guard<std::mutex> lock(core_.mu);
  // enter(): a task of this trainerd's kernel is where its comparison is; an older store's is made.
  return core_.store->transaction([&]() -> Status {
    for (const json& doc : open->comparisons) {
      TRAINER_RETURN_IF_ERROR(core_.kernel->enter("comparison", doc.value("comparisonId", std::string()),
                                             doc.value("phase", std::string(kPreparing))));
    }
    return Status::ok();
  });
}

// Target `index` of comparison `doc` one step on: its evaluation started once its model is
// registered, its outcome read once the evaluation ended (core_.mu held, inside the step's transaction).
Status Comparisons::step_comparison_target_locked(const json& doc, size_t index, json& t) {
  const json& contract = doc["contract"];
  const std::string id = doc["comparisonId"].get<std::string>();
  if (t["status"] == kTargetWaiting) {
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> model, core_.store->get_trained_model(t["modelId"].get<std::string>()));
    if (!model) {
      t["status"] = kTargetFailed;
      t["failure"] = "model " + t["modelId"].get<std::string>() + " is no longer in the registry";
      return Status::ok();
    }
    const std::string status = text_of(*model, "status");
    if (status == kModelFailed) {
      t["status"] = kTargetFailed;
      t["failure"] = "registering model " + t["modelId"].get<std::string>() + " failed: " +
                     text_of(*model, "failureReason", "no reason recorded");
      return Status::ok();
    }
    if (status != kModelRegistered) return Status::ok();  // still registering
    // An evaluation an older trainerd started and did not record is taken up, never doubled.
    const std::string tag = evaluation_tag(id, index);
    TRAINER_ASSIGN_OR_RETURN(std::vector<json> all, core_.store->list_evaluations({}));
    for (const auto& e : all) {
      if (text_of(e, "description") == tag) t["evaluationId"] = e["evaluationId"];
    }
    // An evaluation of this model under exactly this contract is reused, not run again.
    if (t["evaluationId"].is_null()) {
      const json reused = reusable_evaluation(all, t["modelId"].get<std::string>(), contract);
      if (reused.is_object()) {
        t["evaluationId"] = reused["evaluationId"];
        t["reused"] = true;
      }
    }
    if (t["evaluationId"].is_null()) {
      json request = {{"model", t["modelId"]},
                      {"dataset", contract["dataset"]["hash"]},
                      {"grader", contract["grader"]["kind"]},
                      {"maxNewTokens", contract["maxNewTokens"]},
                      {"description", tag}};
      if (contract["grader"].contains("graderInstructions")) {
        request["graderInstructions"] = contract["grader"]["graderInstructions"];
      }
      if (text_of(model->value("workload", json(nullptr)), "id").empty()) request["workload"] = doc["workload"]["id"];
      auto started = evaluations_.start_locked(request);
      core_.metrics.operation_attempt(
          {.operation = tel::ServiceOperation::kCompare,
           .stage = tel::ServiceStage::kLaunchTarget,
           .outcome = started.is_ok() ? tel::ServiceOutcome::kSuccess : tel::ServiceOutcome::kFailure,
           .reason = started.is_ok() ? std::nullopt : std::optional(tel::ServiceFailureReason::kProvider)});
      if (!started.is_ok()) {
        t["status"] = kTargetFailed;
        t["failure"] = "its evaluation could not start: " + started.status().describe();
        return Status::ok();
      }
      t["evaluationId"] = (*started)["evaluationId"];
    }
    t["status"] = kTargetEvaluating;
  }
  if (t["status"] != kTargetEvaluating) return Status::ok();
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> e, core_.store->get_evaluation(t["evaluationId"].get<std::string>()));
  if (!e) return Status::ok();
  const std::string phase = text_of(*e, "phase");
  if (phase == "COMPLETED") {
    const json report = e->value("report", json::object());
    t["status"] = kTargetCompleted;
    t["meanScore"] = report.value("meanScore", json(nullptr));
    t["exactMatch"] = report.value("exactMatchRate", json(nullptr));
  } else if (phase == "FAILED" || phase == "CANCELLED") {
    t["status"] = kTargetFailed;
    t["failure"] = "evaluation " + t["evaluationId"].get<std::string>() + " ended " + phase +
                   (text_of(*e, "failureReason").empty() ? "" : ": " + text_of(*e, "failureReason"));
  }
  return Status::ok();
}

// One step of a comparison (the kernel's "comparison" kind, core_.mu held, inside the step's transaction).
Status Comparisons::step_comparison_task(tasks::Step& step) {
  const std::string id = step.task().id;
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_comparison(id));
  if (!stored) return internal_error("comparison " + id + " has a task but no stored document");
  json doc = std::move(*stored);
  const json before = doc;
  for (size_t i = 0; i < doc["targets"].size(); ++i) {
    TRAINER_RETURN_IF_ERROR(step_comparison_target_locked(doc, i, doc["targets"][i]));
  }
  const std::string phase = phase_of(doc["targets"]);
  const bool ends = phase == kCompleted || phase == kPartial || phase == kFailed;
  if (phase != doc["phase"]) {
    doc["phase"] = phase;
    doc["phaseHistory"].push_back({{"phase", phase}, {"time", core_.now_rfc3339()}});
  }
  if (ends) {
    doc["endedAt"] = core_.now_rfc3339();
    judge_comparison(core_, doc, phase);
  }
  if (doc == before) return Status::ok();
  TRAINER_RETURN_IF_ERROR(core_.store->update_comparison(doc));
  TRAINER_RETURN_IF_ERROR(core_.kernel->move("comparison", id, phase));
  if (ends) {
    // The operation ends once: a comparison that names no winner is a failure of the provider
    // (a target's registration or evaluation), not of the comparison's own bookkeeping.
    const bool won = phase == kCompleted;
    core_.metrics.operation_ended(tel::ServiceOperation::kCompare, won ? tel::ServiceOutcome::kSuccess : tel::ServiceOutcome::kFailure,
                             core_.now() - number_of(doc, "_acceptedAt"),
                             won ? std::nullopt : std::optional(tel::ServiceFailureReason::kProvider));
    trace_comparison(core_, doc, phase);
  }
  return Status::ok();
}

}  // namespace trainer::service

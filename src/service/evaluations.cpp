// Evaluations (docs/evaluations.md): what is evaluated, with what, and the evaluation's record
// through QUEUED, RUNNING and one of COMPLETED, FAILED, CANCELLED (a task of the kernel:
// evaluation_tasks.cpp moves it). The job itself is `trainer-job evaluate`, started through the
// backend; the evaluation keeps what follows it in `_job`, which users do not see (shown()).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json_parse.h"
#include "plan/plan.h"
#include "protocol/inputs.h"
#include "service/evaluation_rows.h"
#include "service/input_staging.h"
#include "service/judges.h"
#include "service/registry.h"
#include "service/evaluations.h"
#include "service/phases.h"
#include "storage/storage.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDefaultMaxNewTokens = 256;
constexpr int64_t kMaxMaxNewTokens = 4096;
constexpr int64_t kMaxRowsPage = 500;

bool evaluation_ended(const std::string& phase) {
  return phase == "COMPLETED" || phase == "FAILED" || phase == "CANCELLED";
}

// An evaluation as users see it: without `_job` (its job's handle, attempt and events cursor).
json shown(json doc) {
  doc.erase("_job");
  doc.erase("_report");  // the report of a job not yet ended
  return doc;
}

// A status about config.reward.terms[0] (the reward-term checks), about `grader` instead.
Status as_grader_field(const Status& st) {
  const std::string prefix = "config.reward.terms[0]";
  std::string field = st.field();
  if (field.rfind(prefix, 0) == 0) field = "grader" + field.substr(prefix.size());
  if (field == "grader.kind") field = "grader";
  return Status(st.code(), field, st.message());
}

}  // namespace

Evaluations::Evaluations(ServiceCore& core, BaseModels& base_models, Datasets& datasets, Bundles& bundles,
                         Capacity& capacity, Workloads& workloads, ModelRegistry& registry)
    : core_(core),
      base_models_(base_models),
      datasets_(datasets),
      bundles_(bundles),
      capacity_(capacity),
      workloads_(workloads),
      registry_(registry),
      tasks_(evaluation_phase_table(), [this](tasks::Step& s) { return step_evaluation_task(s); }) {}

std::string Evaluations::evaluation_dir(const std::string& id) const {
  return (fs::path(core_.options.data_dir) / "evaluations" / id).string();
}

Result<json> Evaluations::resolve_evaluation(const std::string& ref, const std::string& field) {
  if (!is_hex(ref)) {
    return field_status(StatusCode::kNotFound, field, "no evaluation with id '" + ref + "' (evaluation ids are lowercase hex)");
  }
  auto ids = core_.store->evaluation_ids_with_prefix(ref, 10);
  if (!ids.is_ok()) return ids.status();
  std::string id = ref;
  if (std::find(ids->begin(), ids->end(), ref) == ids->end()) {
    if (ids->size() > 1) return invalid_field(field, "'" + ref + "' is an ambiguous id prefix");
    if (ids->empty()) return field_status(StatusCode::kNotFound, field, "no evaluation with id '" + ref + "'");
    id = ids->front();
  }
  auto doc = core_.store->get_evaluation(id);
  if (!doc.is_ok()) return doc.status();
  if (!doc->has_value()) return field_status(StatusCode::kNotFound, field, "no evaluation with id '" + ref + "'");
  return **doc;
}

// What `model` names: a registered model (docs/registry.md), a completed run's adapter on its
// base model, or a ready base model; in that order.
Result<json> Evaluations::resolve_model(const std::string& ref) {
  if (is_hex(ref)) {
    auto registered = registry_.resolve(ref, "model");
    if (registered.is_ok()) return evaluated_registered_model(ref, *registered);
    if (registered.status().code() != StatusCode::kNotFound) return registered.status();
  }
  if (is_hex(ref)) {
    auto run = core_.resolve_run(ref, "model");
    if (run.is_ok()) {
      if (run->phase != Phase::kCompleted) {
        return field_status(StatusCode::kFailedPrecondition, "model",
                            "run " + run->id + " is " + phase_name(run->phase) + "; only a COMPLETED run has an adapter to evaluate");
      }
      const std::string adapter = run->view.value("adapterPath", std::string());
      if (adapter.empty() || !run->base_model_sha) {
        return field_status(StatusCode::kFailedPrecondition, "model", "run " + run->id + " left no adapter to evaluate");
      }
      json out = {{"ref", ref},
                  {"kind", "runAdapter"},
                  {"runId", run->id},
                  {"baseModel", run->base_model},
                  {"baseModelHash", *run->base_model_sha},
                  {"adapterPath", adapter},
                  {"workloadId", run->workload_id}};
      // The same adapter's other identity: the model its completion registered (the evaluation
      // shows under the model too, and `evaluations list --model MODEL` finds it).
      if (const json id = run->view.value("modelId", json(nullptr)); id.is_string()) out["modelId"] = id;
      return out;
    }
    if (run.status().code() != StatusCode::kNotFound) return run.status();
  }
  auto m = base_models_.resolve(ref, "model");
  if (!m.is_ok()) {
    return field_status(StatusCode::kNotFound, "model",
                        "'" + ref + "' is neither a completed run's id nor a selected base model's name");
  }
  if (m->value("status", std::string()) != "ready") {
    return field_status(StatusCode::kFailedPrecondition, "model",
                        "base model '" + ref + "' is " + m->value("status", std::string("unknown")) + "; wait until it is ready");
  }
  return json{{"ref", ref},
              {"kind", "base"},
              {"baseModel", m->value("name", ref)},
              {"baseModelHash", m->value("contentHash", std::string())}};
}

Result<json> Evaluations::evaluated_registered_model(const std::string& ref, const json& model) {
  const std::string id = model.value("modelId", std::string());
  if (model.value("status", std::string()) != kModelRegistered) {
    return field_status(StatusCode::kFailedPrecondition, "model",
                        "model " + id + " is " + model.value("status", std::string("unknown")) +
                            "; only a REGISTERED model can be evaluated (trainer trained-models get " + id + ")");
  }
  const std::string base_name = model.value("baseModel", json::object()).value("name", std::string());
  auto base = base_models_.resolve(base_name, "model");
  if (!base.is_ok() || base->value("status", std::string()) != "ready") {
    return field_status(StatusCode::kFailedPrecondition, "model",
                        "model " + id + "'s base model '" + base_name + "' is not selected and ready; select it first");
  }
  json out = {{"ref", ref},
              {"kind", model.value("variant", std::string()) == kVariantBase ? "registeredBase" : "registeredAdapter"},
              {"modelId", id},
              {"baseModel", base_name},
              {"baseModelHash", base->value("contentHash", std::string())}};
  if (model["workload"].is_object()) out["workloadId"] = model["workload"].value("id", std::string());
  // The same adapter's other identity: the run whose completion registered it (not a model
  // registered from one of its earlier snapshots), so `evaluations list --model RUN` finds it.
  const std::string source_run = model.value("source", json::object()).value("runId", std::string());
  if (!source_run.empty()) {
    if (auto run = core_.resolve_run(source_run, "model"); run.is_ok() && run->view.value("modelId", std::string()) == id) {
      out["runId"] = run->id;
    }
  }
  if (out["kind"] == "registeredAdapter") {
    const json artifact = model.value("artifact", json::object());
    out["artifactKey"] = artifact.value("key", std::string());
    out["artifactUri"] = artifact.value("uri", std::string());
  }
  return out;
}

// The adapter folder an evaluation's job reads: a run's folder, or a registered model's copy
// (fetched from the artifact store into the evaluation's folder when it is not on this disk).
Result<std::string> Evaluations::evaluation_adapter(const json& model, const std::string& dir) {
  std::string key;
  std::string uri;
  if (model.contains("adapterPath")) {
    const std::string path = model["adapterPath"].get<std::string>();
    if (fs::path(path).is_absolute()) return path;
    // A cluster run's adapter: its final snapshot's weights, by storage key in the artifact store.
    key = path;
    uri = core_.artifact_uri(key);
  } else {
    if (!model.contains("artifactKey")) return std::string();
    uri = model.value("artifactUri", std::string());
    if (uri.rfind("file://", 0) == 0) return uri.substr(7);
    key = model["artifactKey"].get<std::string>();
  }
  const fs::path local = fs::path(dir) / "adapter";
  std::error_code ec;
  fs::create_directories(local, ec);
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
    auto bytes = core_.artifacts().get(key + "/" + file);
    if (!bytes.is_ok()) return Status(bytes.status().code(), "model", uri + "/" + file + ": " + bytes.status().message());
    TRAINER_RETURN_IF_ERROR(write_file_atomic((local / file).string(), *bytes));
  }
  return local.string();
}

Result<json> Evaluations::start(const json& body) {
  std::lock_guard<std::mutex> lock(core_.mu);
  return start_locked(body);
}

Result<json> Evaluations::start_locked(const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"model", "dataset", "grader", "graderInstructions", "workload",
                                              "maxNewTokens", "description"}));
  auto model_ref = optional_string(body, "model");
  if (!model_ref.is_ok()) return model_ref.status();
  if (!*model_ref || (*model_ref)->empty()) return invalid_field("model", "is required: a completed run's id or a base model's name");
  for (const char* key : {"dataset", "grader", "graderInstructions", "workload", "description"}) {
    auto v = optional_string(body, key);
    if (!v.is_ok()) return v.status();
  }
  int64_t max_new = kDefaultMaxNewTokens;
  if (body.contains("maxNewTokens")) {
    const json& v = body["maxNewTokens"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxMaxNewTokens) {
      return invalid_field("maxNewTokens", "must be an integer in [1, " + std::to_string(kMaxMaxNewTokens) + "], got " + v.dump());
    }
    max_new = v.get<int64_t>();
  }

  auto model = resolve_model(**model_ref);
  if (!model.is_ok()) return model.status();

  // The workload: a run's adapter carries its own; a base model needs one named.
  std::optional<json> workload;
  const std::string workload_ref = body.value("workload", std::string());
  if (!workload_ref.empty()) {
    auto w = workloads_.resolve(workload_ref, "workload");
    if (!w.is_ok()) return w.status();
    workload = *w;
  }
  const bool carries_workload = model->contains("workloadId") && (*model)["kind"] != "base";
  if (carries_workload) {
    const std::string own = (*model)["workloadId"].get<std::string>();
    if (workload && (*workload)["id"] != own) {
      auto theirs = core_.store->get_workload(own);
      const std::string their_name =
          theirs.is_ok() && theirs->has_value() ? (**theirs).value("name", own) : own;
      const std::string what = model->contains("runId") ? "run " + (*model)["runId"].get<std::string>()
                                                         : "model " + (*model)["modelId"].get<std::string>();
      return invalid_field("workload", what + " belongs to workload '" + their_name +
                                           "', not '" + (*workload)["name"].get<std::string>() +
                                           "'; leave workload out (a candidate carries its own)");
    }
    if (!workload) {
      auto w = core_.store->get_workload(own);
      if (!w.is_ok()) return w.status();
      if (w->has_value()) workload = **w;
    }
  } else if (!workload) {
    return invalid_field("workload", "is required: this model carries no workload (a base model, or an import without "
                                     "one); name the workload whose baseline it is");
  }

  if (workload) TRAINER_RETURN_IF_ERROR(Workloads::check_takes_work(*workload, "workload"));

  // The dataset: named, else the workload's evaluation dataset.
  std::string dataset_ref = body.value("dataset", std::string());
  if (dataset_ref.empty() && workload) {
    const json ds = workload->value("evaluation", json::object()).value("dataset", json(nullptr));
    if (ds.is_string()) dataset_ref = ds.get<std::string>();
  }
  if (dataset_ref.empty()) {
    return invalid_field("dataset", "is required (the workload names no evaluation dataset; `trainer workloads set-evaluation` sets one)");
  }
  auto dataset = datasets_.resolve(dataset_ref, "dataset");
  if (!dataset.is_ok()) return dataset.status();

  // The grader: named, else the workload's (with its judge instructions), else json-label-match.
  std::string grader_kind = body.value("grader", std::string());
  std::string instructions = body.value("graderInstructions", std::string());
  std::string instructions_source = instructions.empty() ? "" : "request";
  if (grader_kind.empty() && workload) {
    const json setting = workload->value("evaluation", json::object());
    grader_kind = setting.value("grader", std::string());
    if (instructions.empty() && setting.value("graderInstructions", json(nullptr)).is_string()) {
      instructions = setting["graderInstructions"].get<std::string>();
      instructions_source = "workload";
    }
  }
  if (grader_kind.empty()) grader_kind = kDefaultGrader;
  // A registered bundle is resolved now: the evaluation grades with the version named today.
  TRAINER_ASSIGN_OR_RETURN(grader_kind, bundles_.resolve_kind(grader_kind, "grader"));
  json term = {{"kind", grader_kind}};
  if (!instructions.empty()) term["graderInstructions"] = instructions;
  auto spec = plan::parse_reward_term(term, "grader");
  if (!spec.is_ok()) return as_grader_field(spec.status());
  if (!instructions.empty() && plan::term_kind(grader_kind) != plan::TermKind::kModel) {
    return invalid_field("graderInstructions", "apply to model: graders (judges); this grader is " + grader_kind);
  }
  plan::RunConfig check;
  check.method = plan::Method::kGrpo;
  check.rewardTerms = {*spec};
  Status st = check_reward_terms(check, core_.options.config);
  if (!st.is_ok()) return as_grader_field(st);
  // Refused before anything is written: inside a comparison's step, nothing rolls a half back.
  TRAINER_RETURN_IF_ERROR(capacity_.choose_pool(1, 1).status());

  const std::string id = random_hex(16);
  json doc = {{"evaluationId", id},
              {"phase", "QUEUED"},
              {"model", *model},
              {"dataset", {{"hash", (*dataset)["hash"]}, {"ref", dataset_ref}, {"rows", dataset->value("rows", json(nullptr))}}},
              {"grader", term},
              {"graderInstructionsSource", instructions.empty() ? (plan::term_kind(grader_kind) == plan::TermKind::kModel
                                                                       ? "built-in" : "none")
                                                                 : instructions_source},
              {"workload", workload ? json{{"id", (*workload)["id"]}, {"name", (*workload)["name"]}} : json(nullptr)},
              {"maxNewTokens", max_new},
              {"description", body.value("description", std::string())},
              {"createdAt", core_.now_rfc3339()},
              {"progress", {{"rowsDone", 0}, {"rowsTotal", dataset->value("rows", json(nullptr))}}},
              {"report", nullptr}};
  // A rule file may change under its name: the hash says which file this evaluation graded with.
  if (const std::string sha = grader_file_sha256(term); !sha.empty()) doc["graderFileSha256"] = sha;
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->put_evaluation(doc));
    TRAINER_RETURN_IF_ERROR(core_.kernel->create("evaluation", id, "QUEUED"));
    return claim_evaluation_locked(doc);
  }));
  return doc;
}

Status Evaluations::launch_evaluation_locked(json& doc, const store::ClaimRow& claim) {
  const std::string id = doc["evaluationId"].get<std::string>();
  // Each start of its job is an attempt of its own (its own events file), as a run's are.
  const int64_t attempt = doc["_job"].is_object() ? doc["_job"].value("attempt", int64_t{0}) + 1 : 1;
  // The attempt's identity to the API, durable before its job starts.
  TRAINER_ASSIGN_OR_RETURN(std::optional<std::string> token,
                           core_.durable_job_token(id + "-" + std::to_string(attempt), "evaluation", id));
  if (!token) return Status::ok();  // registered now; the job starts on the next step
  const fs::path dir = evaluation_dir(id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  json term = doc["grader"];
  // The job's grader carries the judge's endpoint (the deployment's, never the record's).
  if (plan::term_kind(term.value("kind", std::string())) == plan::TermKind::kModel) {
    if (const JudgeConfig* j = find_judge(core_.options.config, plan::term_target(term["kind"].get<std::string>()))) {
      term["judge"] = judge_endpoint_json(*j);
    }
  }
  auto dataset = datasets_.resolve(doc["dataset"]["hash"].get<std::string>(), "dataset");
  if (!dataset.is_ok()) return dataset.status();
  // The stored hash, found in this host's model cache (an evaluation an older trainerd stored
  // names the folder instead).
  const json& model = doc["model"];
  const std::string base_path = model.contains("baseModelHash")
                                    ? base_models_.cache_path(model.value("baseModelHash", std::string()))
                                    : model.value("baseModelPath", std::string());
  json spec = {{"baseModel", base_path},
               {"dataset", datasets_.local_path(*dataset)},
               {"grader", term},
               {"maxNewTokens", doc["maxNewTokens"]}};
  auto adapter = evaluation_adapter(doc["model"], dir.string());
  if (!adapter.is_ok()) return adapter.status();
  if (!adapter->empty()) spec["adapter"] = *adapter;
  // A cluster job reads its inputs from the S3 store, not from trainerd's data folder.
  if (core_.artifact_store && core_.backend->name() != "local") {
    auto staged = stage_evaluation_inputs(*core_.artifact_store, core_.options.config.artifact_store.uri,
                                          model.value("baseModelHash", std::string()), spec);
    if (!staged.is_ok()) {
      return end_evaluation_locked(doc, "FAILED", "could not stage the evaluation's inputs: " + staged.status().message());
    }
  }
  backend::JobSpec job = evaluation_job_spec(doc, claim, attempt, &spec);
  // The attempt's identity to the API: its posts of events and log lines carry it (job_reports.cpp).
  job.job_token = *token;
  job.outbound_allow = outbound_policy_json(core_.options.config.outbound).dump();
  job.outbound_proxy = core_.options.config.outbound.proxy;
  // A job started before a crash whose handle was never committed is adopted, not started twice.
  std::optional<backend::JobHandle> handle = core_.backend->find(job);
  if (!handle) {
    TRAINER_RETURN_IF_ERROR(write_file_atomic(job.plan_path, spec.dump(2) + "\n"));
    TRAINER_RETURN_IF_ERROR(core_.kernel->recheck_lease());  // fenced, as a run's job (driver.cpp)
    auto started = core_.backend->start(job);
    if (!started.is_ok()) {
      return end_evaluation_locked(doc, "FAILED", "the evaluation job did not start: " + started.status().message());
    }
    handle = *started;
  }
  doc["_job"] = {{"handle", handle->value}, {"attempt", attempt},   {"jobId", job.job_id},
                {"events", job.events_path}, {"seq", 0},          {"cursor", 0}};
  doc["phase"] = "RUNNING";
  doc.erase("nextAttemptAt");
  // Its cost counts from its first attempt's start: the claim stays held between attempts.
  // One clock read: the first attempt's start is the evaluation's, to the millisecond.
  const double now = core_.now();
  if (!doc.contains("startedAtSeconds")) {
    doc["startedAt"] = rfc3339(now);
    doc["startedAtSeconds"] = now;
  }
  if (!doc["attempts"].is_array()) doc["attempts"] = json::array();
  doc["attempts"].push_back({{"number", attempt}, {"started", rfc3339(now)}, {"ended", nullptr}, {"cause", nullptr}});
  TRAINER_RETURN_IF_ERROR(core_.store->put_evaluation(doc));
  return core_.kernel->move("evaluation", id, "RUNNING");
}

void Evaluations::record_model_evaluation(const json& evaluation) {
  const std::string id = evaluation["model"].value("modelId", std::string());
  if (id.empty()) return;
  auto model = core_.store->get_trained_model(id);
  if (!model.is_ok() || !model->has_value()) return;
  json m = **model;
  if (!m.contains("evaluations") || !m["evaluations"].is_array()) m["evaluations"] = json::array();
  for (const auto& e : m["evaluations"]) {
    if (e.value("evaluationId", std::string()) == evaluation["evaluationId"]) return;
  }
  m["evaluations"].push_back({{"evaluationId", evaluation["evaluationId"]},
                              {"dataset", evaluation["dataset"].value("hash", std::string())},
                              {"grader", evaluation["grader"].value("kind", std::string())},
                              {"meanScore", evaluation["report"].value("meanScore", json(nullptr))},
                              {"endedAt", evaluation.value("endedAt", json(nullptr))}});
  (void)core_.store->update_trained_model(m);
}

Result<json> Evaluations::list(const EvaluationListQuery& query) {
  if (query.limit < 1 || query.limit > 1000) return invalid_field("limit", "must be in [1, 1000], got " + std::to_string(query.limit));
  std::vector<std::string> phases;
  if (query.phase == "open") {
    phases = {"QUEUED", "RUNNING"};
  } else if (!query.phase.empty()) {
    static const char* const kPhases[] = {"QUEUED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"};
    if (std::find(std::begin(kPhases), std::end(kPhases), query.phase) == std::end(kPhases)) {
      return invalid_field("phase", "'" + query.phase + "' is not an evaluation phase (QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED, or open)");
    }
    phases = {query.phase};
  }
  std::string workload_id;
  if (!query.workload.empty()) {
    auto w = workloads_.resolve(query.workload, "workload");
    if (!w.is_ok()) return w.status();
    workload_id = (*w)["id"].get<std::string>();
  }
  auto all = core_.store->list_evaluations(phases);
  if (!all.is_ok()) return all.status();
  json out = json::array();
  for (auto& d : *all) {
    if (!workload_id.empty() && !(d["workload"].is_object() && d["workload"]["id"] == workload_id)) continue;
    if (!query.model.empty()) {
      const json& m = d["model"];
      const bool base = m.value("kind", std::string()) == "base";
      const bool match = m.value("ref", std::string()) == query.model ||
                         (m.contains("modelId") && m["modelId"].get<std::string>().rfind(query.model, 0) == 0) ||
                         (!base && m.value("runId", std::string()).rfind(query.model, 0) == 0) ||
                         (base && m.value("baseModel", std::string()) == query.model);
      if (!match) continue;
    }
    out.push_back(shown(std::move(d)));
    if (static_cast<int64_t>(out.size()) >= query.limit) break;
  }
  return json{{"evaluations", out}};
}

Result<json> Evaluations::get(const std::string& ref) {
  auto doc = resolve_evaluation(ref, "evaluation");
  if (!doc.is_ok()) return doc.status();
  TRAINER_RETURN_IF_ERROR(show_claim_state(&*doc));
  return shown(std::move(*doc));
}

Result<json> Evaluations::report(const std::string& ref) {
  auto doc = resolve_evaluation(ref, "evaluation");
  if (!doc.is_ok()) return doc.status();
  if ((*doc)["phase"] != "COMPLETED") {
    return field_status(StatusCode::kFailedPrecondition, "evaluation",
                        "evaluation " + (*doc)["evaluationId"].get<std::string>() + " is " +
                            (*doc)["phase"].get<std::string>() + "; its report comes when it is COMPLETED");
  }
  json report = (*doc)["report"];
  report["evaluationId"] = (*doc)["evaluationId"];
  report["model"] = (*doc)["model"];
  report["grader"] = (*doc)["grader"];
  report["dataset"] = (*doc)["dataset"];
  return report;
}

Result<json> Evaluations::rows(const std::string& ref, int64_t limit, int64_t offset) {
  if (limit < 1 || limit > kMaxRowsPage) return invalid_field("limit", "must be in [1, " + std::to_string(kMaxRowsPage) + "], got " + std::to_string(limit));
  if (offset < 0) return invalid_field("offset", "must be >= 0, got " + std::to_string(offset));
  auto doc = resolve_evaluation(ref, "evaluation");
  if (!doc.is_ok()) return doc.status();
  const std::string id = (*doc)["evaluationId"].get<std::string>();
  if ((*doc)["phase"] != "COMPLETED") {
    return field_status(StatusCode::kFailedPrecondition, "evaluation",
                        "evaluation " + id + " is " + (*doc)["phase"].get<std::string>() + "; its rows come when it is COMPLETED");
  }
  auto text = evaluation_rows_text(core_, id);
  if (!text.is_ok()) return text.status();
  std::istringstream in(*text);
  json rows = json::array();
  int64_t n = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (n >= offset && n < offset + limit) {
      auto r = parse_json(line, "rows.jsonl");
      if (!r.is_ok()) return internal_error("evaluation " + id + ": " + r.status().message());
      rows.push_back(std::move(*r));
    }
    ++n;
  }
  json out = {{"evaluationId", id}, {"rows", rows}, {"total", n}};
  if (offset + limit < n) out["nextOffset"] = offset + limit;
  return out;
}

Result<json> Evaluations::cancel(const std::string& ref) {
  std::lock_guard<std::mutex> lock(core_.mu);
  auto doc = resolve_evaluation(ref, "evaluation");
  if (!doc.is_ok()) return doc.status();
  const std::string phase = (*doc)["phase"].get<std::string>();
  if (evaluation_ended(phase)) {
    return field_status(StatusCode::kFailedPrecondition, "evaluation",
                        "evaluation " + (*doc)["evaluationId"].get<std::string>() + " already ended " + phase);
  }
  TRAINER_RETURN_IF_ERROR(cancel_evaluation_locked(*doc));
  return shown(std::move(*doc));
}

Status Evaluations::cancel_locked(const std::string& id) {
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> doc, core_.store->get_evaluation(id));
  if (!doc || evaluation_ended((*doc)["phase"].get<std::string>())) return Status::ok();
  return cancel_evaluation_locked(*doc);
}

Result<json> Evaluations::annotate(const std::string& ref, const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"description"}));
  auto description = optional_string(body, "description");
  if (!description.is_ok()) return description.status();
  if (!*description) return invalid_field("description", "is required");
  std::lock_guard<std::mutex> lock(core_.mu);
  auto doc = resolve_evaluation(ref, "evaluation");
  if (!doc.is_ok()) return doc.status();
  (*doc)["description"] = **description;
  TRAINER_RETURN_IF_ERROR(core_.store->put_evaluation(*doc));
  return shown(std::move(*doc));
}

}  // namespace trainer::service

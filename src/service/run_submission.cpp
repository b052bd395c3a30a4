// Runs in: a plan validated and resolved into a new run (or a replay of a submissionId);
// cancelling and annotating a run.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include "plan/engine_capabilities.h"
#include "plan/plan.h"
#include "plan/plan_warnings.h"
#include "service/judges.h"
#include "service/service_state.h"
#include "service/trainable_models.h"

namespace trainer::service {
namespace {

bool is_field_path(const std::string& s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' || c == ']';
  });
}

// The plan parser's error, blaming the plan's field (without the "plan" source).
Status plan_error(const Status& st) {
  if (!st.field().empty()) {
    std::string field = st.field();
    if (field.rfind("plan.", 0) == 0) field = field.substr(5);
    return Status(st.code(), field, st.message());
  }
  // The plan parser still writes "plan: FIELD: message" (until it reports fields as Status fields).
  std::string msg = st.message();
  if (msg.rfind("plan: ", 0) == 0) msg = msg.substr(6);
  const size_t colon = msg.find(": ");
  if (colon != std::string::npos && is_field_path(msg.substr(0, colon))) {
    return Status(st.code(), msg.substr(0, colon), msg.substr(colon + 2));
  }
  return Status(st.code(), msg);
}

// What this deployment offers the engines beyond the native one. No configuration declares a
// GPU rollout engine yet: verl is refused, naming it (and the Ray backend where it is not the one).
plan::EngineDeployment engine_deployment(const DeploymentConfig& config) {
  return {.ray_backend = config.compute.backend == "ray", .gpu_rollout_engine = false};
}

int64_t count(const json& m, const char* key) {
  auto it = m.find(key);
  return it != m.end() && it->is_number() ? it->get<int64_t>() : 0;
}

// How the dataset's rows fit config.maxSeqLength, from trainer-job analyze's answer: an error
// when no row would keep anything to train, warnings when rows would be cut or dropped.
Status check_fit(const json& m, int max_seq_length, json& warnings) {
  const int64_t rows = count(m, "rows");
  const int64_t nothing = count(m, "rowsWithNothingToTrain");
  const int64_t cut = std::max<int64_t>(0, count(m, "rowsOverMaxSeqLength") - nothing);
  const std::string len = std::to_string(max_seq_length);
  const std::string need = "the rows are up to " + std::to_string(count(m, "maxTokens")) + " tokens long (p90 " +
                           std::to_string(count(m, "p90")) + ", p99 " + std::to_string(count(m, "p99")) + ")";
  if (rows > 0 && nothing >= rows) {
    return invalid_field("config.maxSeqLength",
                         len + " tokens leaves all " + std::to_string(rows) +
                             " rows of the dataset with nothing to train (the prompt fills the whole length); " +
                             need + ": raise config.maxSeqLength to at least " + std::to_string(count(m, "maxTokens")) +
                             " to keep every row whole");
  }
  if (nothing > 0) {
    warnings.push_back({{"field", "config.maxSeqLength"},
                        {"message", std::to_string(nothing) + " of " + std::to_string(rows) +
                                        " rows would have nothing left to train within " + len +
                                        " tokens and would be dropped; " + need}});
  }
  if (cut > 0) {
    warnings.push_back({{"field", "config.maxSeqLength"},
                        {"message", std::to_string(cut) + " of " + std::to_string(rows) + " rows are longer than " +
                                        len + " tokens and would be cut; " + need}});
  }
  return Status::ok();
}

// The base model a plan trains: the one it names, else its workload's `base` ref; "" when neither.
std::string base_model_ref(const plan::Plan& p, const json& workload) {
  if (p.baseModel) return *p.baseModel;
  const json base =
      workload.contains("refs") && workload["refs"].is_object() ? workload["refs"].value("base", json(nullptr)) : json();
  if (base.is_object() && base.contains("name") && base["name"].is_string()) return base["name"].get<std::string>();
  return "";
}

}  // namespace

std::optional<json> ServiceImpl::measure_plan(const plan::Plan& p) {
  auto w = resolve_workload(p.workload, "workload");
  if (!w.is_ok()) return std::optional<json>();
  const std::string base_ref = base_model_ref(p, *w);
  auto m = base_models_.resolve(base_ref, "baseModel");
  // A model still preparing cannot be measured yet: the run's own sizing step measures it.
  if (!m.is_ok() || (*m)["status"] != "ready") return std::optional<json>();
  auto d = datasets_.resolve(p.config.dataset, "config.dataset");
  if (!d.is_ok()) return std::optional<json>();
  // A job binary that cannot measure (or a measurement that fails) leaves the check to the
  // run's own sizing step, which reports the same thing later.
  auto fit = datasets_.measure_cached(*d, *m, p.config.maxSeqLength);
  if (!fit.is_ok()) return std::optional<json>();
  return std::optional<json>(*fit);
}

Result<std::pair<json, bool>> ServiceImpl::submit_run(const json& body, bool dry_run) {
  return submit_plan(body, dry_run, nullptr, json::object());
}

Result<plan::Plan> ServiceImpl::parse_run_plan(const json& body) {
  if (!body.is_object()) return invalid_field("plan", "must be a JSON object");
  auto parsed = plan::plan_from_json(body, "plan");
  if (!parsed.is_ok()) return plan_error(parsed.status());
  plan::Plan p = std::move(*parsed);
  if (p.kind != "run") return invalid_field("kind", "must be \"run\", got \"" + p.kind + "\"");
  TRAINER_RETURN_IF_ERROR(plan::check_engine_capabilities(p, engine_deployment(opt_.config)));
  if (p.grader) {
    TRAINER_RETURN_IF_ERROR(check_grader("grader", *p.grader));
    TRAINER_RETURN_IF_ERROR(check_term_path(*p.grader, opt_.config, "grader"));
  }
  TRAINER_RETURN_IF_ERROR(bundles_.resolve_terms(p));
  TRAINER_RETURN_IF_ERROR(
      check_reward_terms(p.config, opt_.config, [this](const std::string& name) { return endpoints_.servable(name); }));
  return p;
}

Result<std::pair<json, bool>> ServiceImpl::submit_plan(const json& body, bool dry_run,
                                                       const std::function<Status(RunRecord&)>& on_insert,
                                                       const json& dry_extra) {
  TRAINER_ASSIGN_OR_RETURN(plan::Plan p, parse_run_plan(body));
  // The plan's fit to its dataset, measured before the lock: trainer-job analyze takes a while
  // the first time a dataset, model and length meet (then it is cached).
  auto fit = measure_plan(p);

  std::lock_guard<std::mutex> lock(mu_);
  return admit_plan_locked(body, std::move(p), fit, dry_run, on_insert, dry_extra);
}

Result<json> ServiceImpl::submit_stage_run_locked(const json& body, const std::function<Status(RunRecord&)>& on_insert) {
  TRAINER_ASSIGN_OR_RETURN(plan::Plan p, parse_run_plan(body));
  // Not measured here (the driver holds the lock): the run's own sizing step measures the fit.
  TRAINER_ASSIGN_OR_RETURN(auto admitted, admit_plan_locked(body, std::move(p), std::nullopt, false, on_insert, json::object()));
  return std::move(admitted.first);
}

Result<std::pair<json, bool>> ServiceImpl::admit_plan_locked(const json& body, plan::Plan p,
                                                              const std::optional<json>& fit, bool dry_run,
                                                              const std::function<Status(RunRecord&)>& on_insert,
                                                              const json& dry_extra) {
  const std::string request = body.dump();
  if (p.submissionId) {
    if (p.submissionId->empty() || p.submissionId->size() > 255) {
      return invalid_field("submissionId", "must be 1-255 characters");
    }
    auto seen = store_->run_by_submission(*p.submissionId);
    if (!seen.is_ok()) return seen.status();
    if (seen->has_value()) {
      auto run = RunRecord::from_json(**seen);
      if (!run.is_ok()) return internal_error("the run of submissionId '" + *p.submissionId + "' cannot be read: " +
                                              run.status().describe());
      if (run->request != request) {
        return field_status(StatusCode::kAlreadyExists, "submissionId",
                            "'" + *p.submissionId + "' was used by run " + run->id +
                                " with a different plan; use a new submissionId");
      }
      return std::make_pair(present_run(*run), false);
    }
  }

  auto w = resolve_workload(p.workload, "workload");
  if (!w.is_ok()) return w.status();
  TRAINER_RETURN_IF_ERROR(Workloads::check_takes_work(*w, "workload"));
  const std::string base_ref = base_model_ref(p, *w);
  if (base_ref.empty()) {
    return invalid_field("baseModel", "required: the plan names none and workload '" +
                                          w->value("name", std::string()) + "' has no base ref");
  }
  auto m = base_models_.resolve(base_ref, "baseModel");
  if (!m.is_ok()) return m.status();
  if ((*m)["status"] == "failed") {
    return field_status(StatusCode::kFailedPrecondition, "baseModel",
                        "'" + base_ref + "' failed to prepare: " + m->value("failure", std::string("unknown")) +
                            "; select it again");
  }
  // A model selected before its folder changed (or by a trainerd without the check) whose folder
  // holds an architecture the engine does not train is refused now, not when the job starts.
  if (const AllowedBaseModel* allowed = base_models_.find_allowed(m->value("name", std::string()))) {
    std::error_code ec;
    if (std::filesystem::is_directory(allowed->path, ec)) {
      TRAINER_RETURN_IF_ERROR(check_trainable_model(allowed->name, allowed->path, "baseModel"));
    }
  }
  std::optional<json> warm;
  if (p.warmStartModelId) {
    auto resolved_warm = resolve_warm_start(p, *m);
    if (!resolved_warm.is_ok()) return resolved_warm.status();
    warm = std::move(*resolved_warm);
  }
  auto d = datasets_.resolve(p.config.dataset, "config.dataset");
  if (!d.is_ok()) return d.status();
  std::optional<json> v;
  if (p.config.validationDataset) {
    auto vd = datasets_.resolve(*p.config.validationDataset, "config.validationDataset");
    if (!vd.is_ok()) return vd.status();
    v = *vd;
  }
  // Devices: a CPU run (execution.gpus 0) takes one device of a CPU pool; see choose_pool.
  const int devices = p.execution.gpus > 0 ? p.execution.gpus : 1;
  auto pool = capacity_.choose_pool(p.execution.gpus, devices);
  if (!pool.is_ok()) return pool.status();
  const int quota = w->value("gpuQuota", 0);
  if (devices > quota) {
    return field_status(StatusCode::kFailedPrecondition, "execution.gpus",
                        "the run needs " + std::to_string(devices) + " devices, more than workload '" +
                            w->value("name", std::string()) + "' may ever hold (gpuQuota " + std::to_string(quota) +
                            "); raise its quota");
  }

  json warnings = json::array();
  const AdmittedShape shape{plan::method_name(p.config.method), plan::precision_name(p.config.precision),
                            p.execution.gpus};
  TRAINER_RETURN_IF_ERROR(base_models_.check_shape((*m)["name"].get<std::string>(), shape, warnings));
  if (fit) TRAINER_RETURN_IF_ERROR(check_fit(*fit, p.config.maxSeqLength, warnings));
  if (auto single = plan::single_device_warning(p)) {
    warnings.push_back({{"field", single->field}, {"message", single->message}});
  }

  // The resolved plan: names resolved to what was admitted.
  json resolved = plan::to_json(p);
  resolved["workload"] = (*w)["name"];
  resolved["baseModel"] = (*m)["name"];
  resolved["config"]["dataset"] = (*d)["hash"];
  if (v) resolved["config"]["validationDataset"] = (*v)["hash"];
  if (warm) resolved["warmStartModelId"] = (*warm)["modelId"];
  const json judges = judge_instructions(p);
  if (dry_run) {
    json answer = {{"plan", resolved}};
    if (!judges.empty()) answer["judgeInstructions"] = judges;
    answer.update(dry_extra);
    if (!warnings.empty()) answer["warnings"] = warnings;
    return std::make_pair(answer, false);
  }

  const double t = now();
  RunRecord run;
  run.id = random_hex(16);
  run.workload_id = (*w)["id"].get<std::string>();
  run.workload_name = (*w)["name"].get<std::string>();
  run.base_model = (*m)["name"].get<std::string>();
  run.method = plan::method_name(p.config.method);
  run.phase = Phase::kSizingDataset;
  run.attempt = 1;
  run.view = {
      {"submissionId", p.submissionId ? json(*p.submissionId) : json(nullptr)},
      {"settingsSha", plan::settings_sha(p.config, (*d)["hash"].get<std::string>())},
      {"dataset", {{"hash", (*d)["hash"]}, {"ref", p.config.dataset}}},
      {"createdAt", rfc3339(t)},
      {"updatedAt", rfc3339(t)},
      {"phaseHistory", json::array({{{"phase", phase_name(Phase::kSizingDataset)}, {"enteredAt", rfc3339(t)}}})},
      {"progress", {{"step", 0}, {"totalSteps", nullptr}}},
      {"latest", json::object()},
      {"cost", run_cost_json(resolved, 0.0, false)},
      {"grader", p.grader ? json(*p.grader) : w->value("evaluation", json::object()).value("grader", json(kDefaultGrader))},
      {"plan", resolved},
  };
  if (p.description) run.view["description"] = *p.description;
  if (p.configName) run.view["configName"] = *p.configName;
  if (warm) run.view["warmStart"] = *warm;
  if (p.smoke) run.view["smoke"] = {{"verdict", "pending"}, {"steps", p.smoke->steps}, {"rows", p.smoke->rows}};
  if (!judges.empty()) run.view["judgeInstructions"] = judges;
  run.request = request;
  run.pool = (*pool)->name;
  run.devices = devices;
  run.created_at = t;
  run.entered_at = t;
  run.dataset_key = Datasets::key_of((*d)["hash"].get<std::string>());
  if (v) run.validation_key = Datasets::key_of((*v)["hash"].get<std::string>());
  run.rows = (*d)["rows"].get<int64_t>();
  RunTraces::start_trace(run);
  Status st = store_->transaction([&]() -> Status {
    if (on_insert) TRAINER_RETURN_IF_ERROR(on_insert(run));
    TRAINER_RETURN_IF_ERROR(store_->insert_run(run.to_json()));
    TRAINER_RETURN_IF_ERROR(kernel_->create("run", run.id, phase_name(run.phase)));
    auto seq = store_->append_run_event(
        run.id, {{"time", rfc3339(t)}, {"type", "phase"}, {"phase", phase_name(Phase::kSizingDataset)}});
    return seq.status();
  });
  if (!st.is_ok()) return st;
  metrics_.phase_entered(Phase::kSizingDataset);
  notify();
  json shown = present_run(run);
  if (!warnings.empty()) shown["warnings"] = warnings;
  return std::make_pair(shown, true);
}

Result<json> ServiceImpl::cancel_run(const std::string& ref) {
  std::lock_guard<std::mutex> lock(mu_);
  return cancel_run_locked(ref);
}

Result<json> ServiceImpl::cancel_run_locked(const std::string& ref) {
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  RunRecord run = std::move(*r);
  bool stop_job = false;
  bool changed = false;
  // Decided on the run as it is under its task's lock: a step of another replica may have moved it.
  TRAINER_RETURN_IF_ERROR(run_transaction(run.id, [&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(run, resolve_run(run.id, "run"));
    if (is_terminal(run.phase)) {
      return failed_precondition("run " + run.id + " already ended " + phase_name(run.phase) +
                                 "; there is nothing to cancel");
    }
    if (run.phase == Phase::kFinalizing) {
      return failed_precondition("run " + run.id +
                                 " has finished training and is being registered; it can no longer be cancelled");
    }
    // Already on its way out: a repeated cancel has its effect once.
    if (run.phase == Phase::kCleaningUp) return Status::ok();
    changed = true;
    run.cancel_requested = true;
    run.terminal = Phase::kCancelled;
    if (run.job) {
      // A job may be running: persist the decision, then signal it.
      run.stop_sent_at = now();
      stop_job = true;
      return transition(run, Phase::kCleaningUp);
    }
    return finish(run, Phase::kCancelled);
  }));
  if (stop_job) backend_->request_stop(run.job->handle);
  if (changed) notify();
  return present_run(run);
}

Result<json> ServiceImpl::annotate_run(const std::string& ref, const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"description", "configName"}));
  std::lock_guard<std::mutex> lock(mu_);
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  RunRecord run = std::move(*r);
  // Read again under the run's task lock: a step of another replica may have written the run since.
  TRAINER_RETURN_IF_ERROR(run_transaction(run.id, [&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(run, resolve_run(run.id, "run"));
    for (const char* key : {"description", "configName"}) {
      if (!body.contains(key)) continue;
      auto v = optional_string(body, key);
      if (!v.is_ok()) return v.status();
      if (!*v || (*v)->empty()) {
        run.view.erase(key);
      } else {
        run.view[key] = **v;
      }
    }
    run.view["updatedAt"] = now_rfc3339();
    return store_->update_run(run.to_json());
  }));
  return present_run(run);
}

}  // namespace trainer::service

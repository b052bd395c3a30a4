// Comparisons (docs/comparisons.md): a source snapshot scored against candidate and branch models
// under one contract pinned at create time: the dataset's content hash, the grader and the
// completion-token ceiling. Every target, the source included, is scored by an evaluation started
// with exactly that contract.
//
// create_comparison() resolves and refuses what it can at once, starts the source's registration
// (the source model is marked protected) and commits the comparison (PREPARING) in one
// transaction. Each comparison is then a task of the kernel (comparison_steps.cpp): a target whose
// model is REGISTERED gets its evaluation, started and recorded in the step's transaction; an ended
// evaluation gives the target its outcome. Phases: PREPARING (models still registering),
// RUNNING (evaluations going), then COMPLETED (every target completed: the winner is named),
// PARTIAL (some failed or were refused: no winner) or FAILED (none completed).
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "common/sha256.h"
#include "plan/plan.h"
#include "protocol/snapshot.h"
#include "service/registry.h"
#include "service/comparison_names.h"
#include "service/comparisons.h"
#include "service/judges.h"

namespace trainer::service {
namespace {

namespace tel = trainer::telemetry;
using comparison::kCompleted;
using comparison::kPreparing;
using comparison::kTargetCompleted;
using comparison::kTargetRefused;
using comparison::kTargetWaiting;
using comparison::number_of;
using comparison::text_of;

constexpr int64_t kDefaultMaxNewTokens = 256;  // the evaluations' default completion-token ceiling
constexpr int64_t kMaxMaxNewTokens = 4096;     // the evaluations' largest
constexpr size_t kMaxSubmissionIdChars = 200;
constexpr int64_t kChildPage = 100;            // children read per page when expanding --all-branches

// body[key] as a list of non-empty strings (absent or null: empty).
Result<std::vector<std::string>> string_list(const json& body, const std::string& key) {
  std::vector<std::string> out;
  if (!body.contains(key) || body[key].is_null()) return out;
  if (!body[key].is_array()) return invalid_field(key, "must be a list of strings, got " + body[key].dump());
  for (size_t i = 0; i < body[key].size(); ++i) {
    const json& v = body[key][i];
    if (!v.is_string() || v.get<std::string>().empty()) {
      return invalid_field(key + "[" + std::to_string(i) + "]", "must be a non-empty string, got " + v.dump());
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

// The comparison id: derived from the source snapshot and the submission token.
std::string comparison_id(const std::string& snapshot_id, const std::string& token) {
  return sha256_hex("trainer-comparison-v1\n" + snapshot_id + "\n" + token + "\n").substr(0, 16);
}

// A status about config.reward.terms[0] (the reward-term checks), about `grader` instead.
Status as_grader(const Status& st) { return Status(st.code(), "grader", st.message()); }

bool weights_committed(const json& snapshot) {
  const json kinds = snapshot.value("kinds", json::object());
  return kinds.contains(protocol::kWeightsKind) &&
         kinds[protocol::kWeightsKind].value("state", std::string()) == "committed";
}

// What `comparisons create` asks, checked before anything is read.
struct ComparisonRequest {
  std::string source_ref;
  std::string dataset_ref;
  std::string grader;  // "": the workload's, else the default
  std::string token;   // the submissionId; "": none
  int64_t max_new_tokens = kDefaultMaxNewTokens;
};

Result<ComparisonRequest> parse_comparison_request(const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"source", "candidates", "branches", "allBranches", "dataset", "grader",
                                              "maxNewTokens", "submissionId"}));
  std::map<std::string, std::string> text;  // the string fields; absent or null: ""
  for (const char* key : {"source", "dataset", "grader", "submissionId"}) {
    auto v = optional_string(body, key);
    if (!v.is_ok()) return v.status();
    text[key] = v->value_or("");
  }
  ComparisonRequest r{.source_ref = text["source"], .dataset_ref = text["dataset"], .grader = text["grader"],
                      .token = text["submissionId"]};
  if (r.source_ref.empty()) return invalid_field("source", "is required: the snapshot the targets are compared with");
  size_t flags = 0;
  for (const char* key : {"candidates", "branches", "allBranches"}) {
    auto list = string_list(body, key);
    if (!list.is_ok()) return list.status();
    flags += list->size();
  }
  if (flags == 0) {
    return invalid_field("targets", "at least one target is required: --candidate MODEL, --branch RUN or --all-branches PARENT");
  }
  if (auto branches = string_list(body, "branches"); branches.is_ok() && static_cast<int64_t>(branches->size()) > kMaxFan) {
    return invalid_field("branches", "a comparison covers at most " + std::to_string(kMaxFan) + " branch models, got " +
                                         std::to_string(branches->size()));
  }
  if (r.dataset_ref.empty()) return invalid_field("dataset", "is required: the dataset (name or hash) every target is scored on");
  if (body.contains("maxNewTokens") && !body["maxNewTokens"].is_null()) {
    const json& v = body["maxNewTokens"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxMaxNewTokens) {
      return invalid_field("maxNewTokens", "must be an integer in [1, " + std::to_string(kMaxMaxNewTokens) + "], got " + v.dump());
    }
    r.max_new_tokens = v.get<int64_t>();
  }
  if (body.contains("submissionId") && !body["submissionId"].is_null() &&
      (r.token.empty() || r.token.size() > kMaxSubmissionIdChars)) {
    return invalid_field("submissionId", "must be 1 to " + std::to_string(kMaxSubmissionIdChars) + " characters");
  }
  return r;
}

// The grader term every target is scored with: the one named, else the source workload's
// (its evaluation.grader), else json-label-match; with where it came from.
Result<std::pair<json, std::string>> comparison_grader(const std::string& named, const json& evaluation,
                                                       const DeploymentConfig& deployment) {
  std::string grader = named;
  std::string source = "request";
  if (grader.empty() && evaluation.contains("grader") && evaluation["grader"].is_string()) {
    grader = evaluation["grader"].get<std::string>();
    source = "workload";
  }
  if (grader.empty()) {
    grader = kDefaultGrader;
    source = "default";
  }
  json term = {{"kind", grader}};
  auto spec = plan::parse_reward_term(term, "grader");
  if (!spec.is_ok()) return as_grader(spec.status());
  plan::RunConfig check;
  check.method = plan::Method::kGrpo;
  check.rewardTerms = {*spec};
  if (Status st = check_reward_terms(check, deployment); !st.is_ok()) return as_grader(st);
  return std::make_pair(term, source);
}

// The targets, the source first, numbered; a model named twice is scored once.
json numbered_targets(json source, const json& listed) {
  json targets = json::array({std::move(source)});
  std::set<std::string> models = {targets[0]["modelId"].get<std::string>()};
  std::set<std::string> refused;
  for (const auto& t : listed) {
    if (t.contains("modelId")) {
      if (!models.insert(t["modelId"].get<std::string>()).second) continue;
    } else if (!refused.insert(t.value("runId", t.value("target", std::string()))).second) {
      continue;
    }
    targets.push_back(t);
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    targets[i]["index"] = i;
    for (const char* key : {"evaluationId", "meanScore", "exactMatch", "versusSource"}) targets[i][key] = nullptr;
    targets[i]["reused"] = false;
    if (!targets[i].contains("failure")) targets[i]["failure"] = nullptr;
  }
  return targets;
}

// The fields of two runs that differ: [{field, source, target}], by dotted path: their resolved
// plans' config and execution, and how each started from its parent (lineage.restore, weights or
// trainingState, and lineage.stepBudget, the steps it was given; null for a run with no parent).
json run_differences(const json& source_run, const json& target_run) {
  json a = json::object();
  json b = json::object();
  const json source_plan = source_run.value("plan", json::object());
  const json target_plan = target_run.value("plan", json::object());
  for (const char* part : {"config", "execution"}) {
    flatten(source_plan.value(part, json::object()), part, a);
    flatten(target_plan.value(part, json::object()), part, b);
  }
  for (const char* key : {"restore", "stepBudget"}) {
    a[std::string("lineage.") + key] = source_run.value(key, json(nullptr));
    b[std::string("lineage.") + key] = target_run.value(key, json(nullptr));
  }
  std::set<std::string> keys;
  for (const auto& [k, v] : a.items()) keys.insert(k);
  for (const auto& [k, v] : b.items()) keys.insert(k);
  json out = json::array();
  for (const auto& k : keys) {
    const json x = a.value(k, json(nullptr));
    const json y = b.value(k, json(nullptr));
    if (x != y) out.push_back({{"field", k}, {"source", x}, {"target", y}});
  }
  return out;
}

}  // namespace

Comparisons::Comparisons(ServiceCore& core, Datasets& datasets, SnapshotCatalog& catalog, ModelRegistry& registry,
                         Evaluations& evaluations)
    : core_(core),
      datasets_(datasets),
      catalog_(catalog),
      registry_(registry),
      evaluations_(evaluations),
      tasks_(comparison_phase_table(), [this](tasks::Step& s) { return step_comparison_task(s); }) {}

Result<json> Comparisons::resolve_comparison(const std::string& ref, const std::string& field) {
  if (ref.empty() || !is_hex(ref)) {
    return field_status(StatusCode::kNotFound, field, "no comparison with id '" + ref + "' (comparison ids are lowercase hex)");
  }
  auto ids = core_.store->comparison_ids_with_prefix(ref, 10);
  if (!ids.is_ok()) return ids.status();
  std::string id = ref;
  if (std::find(ids->begin(), ids->end(), ref) == ids->end()) {
    if (ids->size() > 1) return invalid_field(field, "'" + ref + "' is an ambiguous id prefix");
    if (ids->empty()) {
      return field_status(StatusCode::kNotFound, field, "no comparison with id '" + ref + "'; list them with: trainer comparisons list");
    }
    id = ids->front();
  }
  auto doc = core_.store->get_comparison(id);
  if (!doc.is_ok()) return doc.status();
  if (!doc->has_value()) return field_status(StatusCode::kNotFound, field, "no comparison with id '" + ref + "'");
  return **doc;
}

Result<json> Comparisons::comparison_targets_locked(const json& body, const json& source_snapshot, json& fan) {
  const std::string sid = source_snapshot.value("snapshotId", std::string());
  json targets = json::array();
  auto candidates = string_list(body, "candidates");
  if (!candidates.is_ok()) return candidates.status();
  for (const auto& ref : *candidates) {
    auto m = registry_.resolve(ref, "candidates");
    if (!m.is_ok()) return m.status();
    json t = {{"target", ref}, {"kind", "candidate"}, {"modelId", (*m)["modelId"]}, {"status", kTargetWaiting}};
    const json lineage = m->value("lineage", json::object());
    if (lineage.contains("runId") && lineage["runId"].is_string()) t["runId"] = lineage["runId"];
    if (m->value("status", std::string()) == kModelFailed) {
      t["status"] = kTargetRefused;
      t["failure"] = "model " + (*m)["modelId"].get<std::string>() + "'s registration FAILED: " +
                     text_of(*m, "failureReason", "no reason recorded");
    }
    targets.push_back(t);
  }
  auto add_branch = [&](const RunRecord& run, const std::string& ref, const std::string& via) {
    json t = {{"target", ref}, {"kind", "branch"}, {"runId", run.id}, {"status", kTargetWaiting}};
    if (!via.empty()) t["parentRunId"] = via;
    const json model = run.view.value("modelId", json(nullptr));
    if (run.phase != Phase::kCompleted) {
      t["status"] = kTargetRefused;
      t["failure"] = "run " + run.id + " is " + phase_name(run.phase) +
                     "; only a COMPLETED run has a registered model to compare";
    } else if (!model.is_string()) {
      t["status"] = kTargetRefused;
      t["failure"] = "run " + run.id + " registered no model";
    } else {
      t["modelId"] = model;
    }
    targets.push_back(t);
  };
  auto branches = string_list(body, "branches");
  if (!branches.is_ok()) return branches.status();
  for (const auto& ref : *branches) {
    auto run = core_.resolve_run(ref, "branches");
    if (!run.is_ok()) return run.status();
    add_branch(*run, ref, "");
  }
  auto parents = string_list(body, "allBranches");
  if (!parents.is_ok()) return parents.status();
  for (const auto& ref : *parents) {
    auto parent = core_.resolve_run(ref, "allBranches");
    if (!parent.is_ok()) return parent.status();
    int64_t seen = 0;
    for (int64_t offset = 0;; offset += kChildPage) {
      auto page = core_.store->run_children(parent->id, kChildPage, offset);
      if (!page.is_ok()) return page.status();
      for (const auto& child_id : page->run_ids) {
        auto child = core_.resolve_run(child_id, "allBranches");
        if (!child.is_ok()) return child.status();
        if (child->phase != Phase::kCompleted || text_of(child->view, "sourceSnapshotId") != sid) continue;
        ++seen;
        add_branch(*child, child->id, parent->id);
      }
      if (offset + kChildPage >= page->total) break;
    }
    fan.push_back({{"parentRunId", parent->id}, {"seen", seen}});
  }
  return targets;
}

Result<std::pair<json, bool>> Comparisons::create(const json& body) {
  auto req = parse_comparison_request(body);
  if (!req.is_ok()) return req.status();
  const std::string& token = req->token;

  std::lock_guard<std::mutex> lock(core_.mu);
  auto sid = catalog_.resolve_id(req->source_ref, "source");
  if (!sid.is_ok()) return sid.status();
  auto snap = core_.store->get_snapshot(*sid);
  if (!snap.is_ok()) return snap.status();
  if (!snap->has_value() || (**snap).value("state", std::string()) != "committed") {
    return field_status(StatusCode::kNotFound, "source", "no committed snapshot with id '" + req->source_ref + "'");
  }
  if (!weights_committed(**snap)) {
    return field_status(StatusCode::kFailedPrecondition, "source",
                        "snapshot " + *sid + " has no committed weights to score; pick a snapshot with weights "
                        "(ARTIFACTS in trainer runs snapshots RUN)");
  }
  auto run = core_.resolve_run((**snap).value("runId", std::string()), "source");
  if (!run.is_ok()) return run.status();

  const std::string id = comparison_id(*sid, token.empty() ? random_hex(32) : token);
  json request = body;
  request.erase("submissionId");
  const std::string request_sha = sha256_hex(request.dump());
  auto existing = core_.store->get_comparison(id);
  if (!existing.is_ok()) return existing.status();
  if (existing->has_value()) {
    if ((**existing).value("_requestSha", std::string()) != request_sha) {
      return field_status(StatusCode::kAlreadyExists, "submissionId",
                          "'" + token + "' already named a different comparison request of snapshot " + *sid +
                              " (comparison " + id + "); use a new token for a new request");
    }
    return std::make_pair(present_comparison(**existing), false);
  }

  auto dataset = datasets_.resolve(req->dataset_ref, "dataset");
  if (!dataset.is_ok()) return dataset.status();
  auto workload = core_.store->get_workload(run->workload_id);
  if (!workload.is_ok()) return workload.status();
  const json evaluation = workload->has_value() ? (**workload).value("evaluation", json::object()) : json::object();
  auto grader = comparison_grader(req->grader, evaluation, core_.options.config);
  if (!grader.is_ok()) return grader.status();
  const auto& [term, grader_source] = *grader;

  json fan = json::array();
  auto listed = comparison_targets_locked(body, **snap, fan);
  if (!listed.is_ok()) return listed.status();
  int64_t branch_targets = 0;
  for (const auto& t : *listed) branch_targets += t["kind"] == "branch" ? 1 : 0;
  if (branch_targets > kMaxFan) {
    return invalid_field("allBranches", "a comparison covers at most " + std::to_string(kMaxFan) +
                                            " branch models; these flags name " + std::to_string(branch_targets));
  }

  json out;
  Status st = core_.store->transaction([&]() -> Status {
    auto reg = registry_.start_registration_locked(**snap, *run, json(nullptr));
    if (!reg.is_ok()) return reg.status();
    json model = reg->first;
    // The source's model is protected: it is what the targets are measured against.
    model["protected"] = true;
    if (!model["protectedBy"].is_array()) model["protectedBy"] = json::array();
    model["protectedBy"].push_back({{"comparisonId", id}});
    TRAINER_RETURN_IF_ERROR(core_.store->update_trained_model(model));
    const std::string source_model = model["modelId"].get<std::string>();
    const json targets = numbered_targets({{"target", *sid}, {"kind", "source"}, {"runId", run->id},
                                           {"modelId", source_model}, {"status", kTargetWaiting}},
                                          *listed);
    const std::string t = core_.now_rfc3339();
    out = {{"comparisonId", id},
           {"submissionId", token.empty() ? json(nullptr) : json(token)},
           {"phase", kPreparing},
           {"phaseHistory", json::array({{{"phase", kPreparing}, {"time", t}}})},
           {"source", {{"snapshotId", *sid},
                       {"runId", run->id},
                       {"savedStep", (**snap).value("savedStep", json(nullptr))},
                       {"modelId", source_model}}},
           {"workload", {{"id", run->workload_id}, {"name", workload->has_value() ? (**workload)["name"] : json(run->workload_name)}}},
           {"contract", {{"dataset", {{"ref", req->dataset_ref}, {"hash", (*dataset)["hash"]}, {"rows", dataset->value("rows", json(nullptr))}}},
                         {"grader", term},
                         {"graderSource", grader_source},
                         {"maxNewTokens", req->max_new_tokens}}},
           {"fan", fan},
           {"targets", targets},
           {"outcome", nullptr},
           {"winner", nullptr},
           {"leader", nullptr},
           {"statistics", nullptr},
           {"createdAt", t},
           {"endedAt", nullptr},
           {"_requestSha", request_sha},
           {"_acceptedAt", core_.now()}};  // seconds, for the operation's duration
    TRAINER_RETURN_IF_ERROR(core_.store->insert_comparison(out));
    return core_.kernel->create("comparison", id, kPreparing);
  });
  if (!st.is_ok()) return st;
  core_.metrics.operation_attempt(
      {.operation = tel::ServiceOperation::kCompare, .stage = tel::ServiceStage::kAccept, .outcome = tel::ServiceOutcome::kSuccess});
  return std::make_pair(present_comparison(out), true);
}

json Comparisons::present_comparison(const json& doc) {
  json out = json::object();
  for (const auto& [k, v] : doc.items()) {
    if (!k.empty() && k[0] != '_') out[k] = v;
  }
  // Config differences against the source run's, and the spend: training (the runs' device
  // seconds) apart from evaluation (the evaluations' device seconds), each by device kind.
  json source_run = json::object();
  if (auto r = core_.store->get_run(doc["source"].value("runId", std::string())); r.is_ok() && r->has_value()) {
    source_run = **r;
  }
  json runs = json::array();
  std::set<std::string> counted;
  double training = 0;
  double evaluation_device = 0, evaluation_gpu = 0;
  json training_by_kind = json::object();
  json evaluation_by_kind = json::object();
  auto add = [](json& by_kind, const std::string& kind, double seconds) {
    by_kind[kind] = by_kind.value(kind, 0.0) + seconds;
  };
  json evaluations = json::array();
  for (auto& t : out["targets"]) {
    const std::string run_id = t.value("runId", std::string());
    if (!run_id.empty()) {
      if (auto r = core_.store->get_run(run_id); r.is_ok() && r->has_value()) {
        t["configDifferences"] = t["kind"] == "source" ? json::array() : run_differences(source_run, **r);
        const json cost = (**r).value("cost", json::object());
        const double seconds = number_of(cost, cost.contains("deviceSeconds") ? "deviceSeconds" : "gpuSeconds");
        const std::string kind = text_of(cost, "deviceKind", run_device_kind((**r).value("plan", json::object())));
        if (counted.insert(run_id).second) {
          runs.push_back({{"runId", run_id}, {"deviceKind", kind}, {"deviceSeconds", seconds}, {"gpuSeconds", seconds}});
          training += seconds;
          add(training_by_kind, kind, seconds);
        }
      }
    }
    if (t["evaluationId"].is_string()) {
      if (auto e = core_.store->get_evaluation(t["evaluationId"].get<std::string>()); e.is_ok() && e->has_value()) {
        t["progress"] = (**e).value("progress", json(nullptr));  // {rowsDone, rowsTotal} of its evaluation
        // The device time its claim held (an evaluation ended before claims: its wall time).
        const json cost = (**e).value("cost", json::object());
        const double device = number_of(cost, cost.contains("deviceSeconds") ? "deviceSeconds" : "seconds");
        const double gpu = number_of(cost, "gpuSeconds");
        const std::string kind = text_of(cost, "deviceKind", gpu > 0 ? "GPU" : "CPU");
        evaluations.push_back({{"evaluationId", t["evaluationId"]}, {"deviceKind", kind}, {"deviceSeconds", device},
                               {"gpuSeconds", gpu}, {"reused", t.value("reused", false)}});
        evaluation_device += device;
        evaluation_gpu += gpu;
        add(evaluation_by_kind, kind, device);
      }
    }
  }
  // training.gpuSeconds is the device-seconds under their old name (deprecated, one release).
  out["cost"] = {{"training", {{"deviceSeconds", training}, {"byDeviceKind", training_by_kind}, {"gpuSeconds", training},
                               {"runs", runs}}},
                 {"evaluation", {{"deviceSeconds", evaluation_device}, {"byDeviceKind", evaluation_by_kind},
                                 {"gpuSeconds", evaluation_gpu}, {"evaluations", evaluations}}}};
  return out;
}

Result<json> Comparisons::get(const std::string& ref) {
  auto doc = resolve_comparison(ref, "comparison");
  if (!doc.is_ok()) return doc.status();
  return present_comparison(*doc);
}

Result<json> Comparisons::list(const ComparisonListQuery& query) {
  if (query.limit < 1 || query.limit > kMaxComparisonsPage) {
    return invalid_field("limit", "must be in [1, " + std::to_string(kMaxComparisonsPage) + "], got " + std::to_string(query.limit));
  }
  if (query.offset < 0) return invalid_field("offset", "must be >= 0, got " + std::to_string(query.offset));
  std::string source;
  if (!query.source.empty()) {
    auto sid = catalog_.resolve_id(query.source, "source");
    if (!sid.is_ok()) return sid.status();
    source = *sid;
  }
  auto page = core_.store->list_comparisons(source, {}, query.limit, query.offset);
  if (!page.is_ok()) return page.status();
  json items = json::array();
  for (const auto& d : page->comparisons) {
    int64_t completed = 0;
    for (const auto& t : d["targets"]) completed += t["status"] == kTargetCompleted ? 1 : 0;
    items.push_back({{"comparisonId", d["comparisonId"]},
                     {"phase", d["phase"]},
                     {"source", d["source"]},
                     {"targets", d["targets"].size()},
                     {"targetsCompleted", completed},
                     {"winner", d["winner"]},
                     {"outcome", d.value("outcome", json(nullptr))},
                     {"createdAt", d["createdAt"]}});
  }
  json out = {{"comparisons", items}, {"total", page->total}};
  if (query.offset + query.limit < page->total) out["nextOffset"] = query.offset + query.limit;
  return out;
}

}  // namespace trainer::service

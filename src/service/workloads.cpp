// Workloads (workloads.h): create, change, evaluation setting, refs, history, resolution.
#include <regex>

#include "plan/plan.h"
#include "service/judges.h"
#include "service/phases.h"

#include "service/registry.h"
#include "service/workloads.h"

namespace trainer::service {
namespace {

const std::regex kWorkloadName("^[a-z0-9][a-z0-9-]{0,63}$");
const std::regex kLooksLikeId("^[0-9a-f]{8,}$");
constexpr int64_t kMaxQuota = 100000;
// The largest storageQuotaBytes a workload may be given (1 PiB).
constexpr int64_t kMaxStorageQuotaBytes = int64_t{1} << 50;
constexpr size_t kMaxActorChars = 200;  // `by` of a ref move: who moved it

// What a ref stores: the model and where it is served from. `name` is the base model's name for
// the base ref (plans without baseModel train it).
json ref_value(const json& model) {
  json v = {{"kind", model.value("variant", std::string()) == kVariantBase ? "baseModel" : "model"},
            {"modelId", model["modelId"]},
            {"variant", model["variant"]},
            {"baseModel", model["baseModel"]["name"]},
            {"artifact", model.value("artifact", json(nullptr))}};
  if (model.value("variant", std::string()) == kVariantBase) v["name"] = model["baseModel"]["name"];
  const json source = model.value("source", json::object());
  if (source.contains("runId")) v["runId"] = source["runId"];
  return v;
}

Status check_workload_name(const std::string& field, const std::string& name) {
  if (!std::regex_match(name, kWorkloadName)) {
    return invalid_field(field, "'" + name +
                                    "' is not a valid workload name: use 1-64 of a-z, 0-9 and '-', starting with a "
                                    "letter or digit");
  }
  if (std::regex_match(name, kLooksLikeId)) {
    return invalid_field(field, "'" + name + "' looks like an id; choose a name with a letter beyond a-f or a '-'");
  }
  return Status::ok();
}

Result<int> quota_value(const json& v) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxQuota) {
    return invalid_field("gpuQuota", "must be a non-negative integer, got " + v.dump());
  }
  return static_cast<int>(v.get<int64_t>());
}

// A workload's storageQuotaBytes: a non-negative integer (0 = no limit), or null for the
// deployment's quotas.storageBytes.
Result<json> storage_quota_value(const json& v) {
  if (v.is_null()) return json(nullptr);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxStorageQuotaBytes) {
    return invalid_field("storageQuotaBytes", "must be a non-negative integer of bytes (0: no limit) or null (the "
                                              "deployment's quotas.storageBytes), got " + v.dump());
  }
  return v;
}

Status check_ref_name(const std::string& which) {
  if (which == "base" || which == "candidate" || which == "champion") return Status::ok();
  return invalid_field("ref", "'" + which + "' is not a ref; use base, candidate or champion");
}

}  // namespace

// A workload's grader is any grader an evaluation takes: json-label-match, rule:/abs/path.py,
// bundle:REF, http:URL or model:MODEL, checked as evaluations check it; with `deployed`, also
// against what this trainerd offers (its judges, files on its host).
Status check_grader(const std::string& field, const std::string& grader, const DeploymentConfig* deployed) {
  static const char* const kPrefixes[] = {"model:", "http:", "bundle:", "rule:"};
  bool known = grader == kDefaultGrader;
  for (const char* p : kPrefixes) known = known || grader.rfind(p, 0) == 0;
  if (!known) {
    return invalid_field(field, "'" + grader +
                                    "' is not a grader; use json-label-match, rule:/PATH.py, bundle:REF, http:URL or "
                                    "model:MODEL_ID");
  }
  if (grader != kDefaultGrader && grader.find(':') == grader.size() - 1) {
    return invalid_field(field, "'" + grader + "' names nothing after the ':'");
  }
  auto spec = plan::parse_reward_term(json{{"kind", grader}}, field);
  if (!spec.is_ok()) return invalid_field(field, spec.status().message());
  if (deployed) {
    plan::RunConfig check;
    check.method = plan::Method::kGrpo;
    check.rewardTerms = {*spec};
    Status st = check_reward_terms(check, *deployed);
    if (!st.is_ok()) return invalid_field(field, st.message());
  }
  return Status::ok();
}

Result<json> Workloads::create(const json& body) {
  TRAINER_RETURN_IF_ERROR(
      check_fields(body, {"name", "description", "evaluationDataset", "grader", "gpuQuota", "storageQuotaBytes"}));
  if (!body.contains("name")) return invalid_field("name", "required");
  if (!body["name"].is_string()) return invalid_field("name", "must be a string, got " + body["name"].dump());
  std::string name = body["name"].get<std::string>();
  TRAINER_RETURN_IF_ERROR(check_workload_name("name", name));
  auto description = optional_string(body, "description");
  if (!description.is_ok()) return description.status();
  auto grader = optional_string(body, "grader");
  if (!grader.is_ok()) return grader.status();
  if (*grader) TRAINER_RETURN_IF_ERROR(check_grader("grader", **grader, &core_.options.config));
  int quota = core_.options.config.default_workload_quota;
  auto q = core_.options.config.workload_quotas.find(name);
  if (q != core_.options.config.workload_quotas.end()) quota = q->second;
  if (body.contains("gpuQuota")) {
    auto v = quota_value(body["gpuQuota"]);
    if (!v.is_ok()) return v.status();
    quota = *v;
  }
  json storage_quota = nullptr;
  if (body.contains("storageQuotaBytes")) {
    TRAINER_ASSIGN_OR_RETURN(storage_quota, storage_quota_value(body["storageQuotaBytes"]));
  }
  std::lock_guard<std::mutex> lock(core_.mu);
  json evaluation = {{"dataset", nullptr}, {"grader", grader->value_or(kDefaultGrader)}};
  auto eval_ref = optional_string(body, "evaluationDataset");
  if (!eval_ref.is_ok()) return eval_ref.status();
  if (*eval_ref) {
    auto d = datasets_.resolve(**eval_ref, "evaluationDataset");
    if (!d.is_ok()) return d.status();
    evaluation["dataset"] = (*d)["hash"];
  }
  std::string now = core_.now_rfc3339();
  json doc = {{"id", random_hex(16)},
              {"name", name},
              {"description", description->value_or("")},
              {"evaluation", evaluation},
              {"refs", {{"base", nullptr}, {"candidate", nullptr}, {"champion", nullptr}}},
              {"gpuQuota", quota},
              {"storageQuotaBytes", storage_quota},
              {"createdAt", now},
              {"updatedAt", now},
              {"history", json::array({{{"time", now}, {"change", "created as '" + name + "'"}}})}};
  TRAINER_RETURN_IF_ERROR(core_.store->insert_workload(doc));
  return doc;
}

Result<json> Workloads::list(const std::string& archived) {
  if (!archived.empty() && archived != "include" && archived != "only") {
    return invalid_field("archived", "'" + archived + "' is not include or only");
  }
  auto rows = core_.store->list_workloads();
  if (!rows.is_ok()) return rows.status();
  json out = json::array();
  for (auto& w : *rows) {
    const bool is_archived = w.value("archived", false);
    if (archived.empty() ? is_archived : archived == "only" && !is_archived) continue;
    out.push_back(std::move(w));
  }
  return json{{"workloads", out}};
}

Status Workloads::check_takes_work(const json& w, const std::string& field) {
  if (!w.value("archived", false)) return Status::ok();
  const std::string name = w.value("name", std::string());
  return field_status(StatusCode::kFailedPrecondition, field,
                      "workload '" + name + "' is archived and takes no new work; `trainer workloads unarchive " + name +
                          "` takes it back");
}

// The work of workload `id` still in progress, each item named: open runs, evaluations, endpoints.
Result<std::vector<std::string>> Workloads::work_in_progress(const std::string& id) {
  std::vector<std::string> items;
  store::RunFilter filter;
  filter.workload_id = id;
  filter.limit = 1000;
  for (int i = 0; i < kPhaseCount; ++i) {
    if (!is_terminal(phase_at(i))) filter.phases.push_back(phase_name(phase_at(i)));
  }
  TRAINER_ASSIGN_OR_RETURN(store::RunPage runs, core_.store->list_runs(filter));
  for (const auto& r : runs.runs) {
    items.push_back("run " + r.value("runId", std::string()) + " (" + r.value("phase", std::string()) + ")");
  }
  const auto of_workload = [&](const json& doc) {
    return doc.contains("workload") && doc["workload"].is_object() && doc["workload"].value("id", std::string()) == id;
  };
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> evaluations, core_.store->list_evaluations({"QUEUED", "RUNNING"}));
  for (const auto& e : evaluations) {
    if (of_workload(e)) items.push_back("evaluation " + e.value("evaluationId", std::string()) + " (" + e.value("phase", std::string()) + ")");
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> endpoints,
                           core_.store->list_endpoints({"AWAITING_CAPACITY", "STARTING", "READY", "DELETING"}));
  for (const auto& e : endpoints) {
    if (of_workload(e)) items.push_back("endpoint " + e.value("endpointId", std::string()) + " (" + e.value("phase", std::string()) + ")");
  }
  return items;
}

Result<json> Workloads::archive(const std::string& ref) {
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve(ref, "workload"));
  if (doc.value("archived", false)) return doc;
  const std::string name = doc.value("name", std::string());
  TRAINER_ASSIGN_OR_RETURN(std::vector<std::string> busy, work_in_progress(doc["id"].get<std::string>()));
  if (!busy.empty()) {
    std::string list;
    for (const auto& item : busy) list += (list.empty() ? "" : ", ") + item;
    return field_status(StatusCode::kFailedPrecondition, "workload",
                        "workload '" + name + "' has work in progress: " + list +
                            "; let it end or cancel it, then archive the workload");
  }
  const std::string now = core_.now_rfc3339();
  doc["archived"] = true;
  doc["archivedAt"] = now;
  doc["updatedAt"] = now;
  if (!doc.contains("history") || !doc["history"].is_array()) doc["history"] = json::array();
  doc["history"].push_back({{"time", now}, {"change", "archived"}});
  TRAINER_RETURN_IF_ERROR(core_.store->update_workload(doc));
  return doc;
}

Result<json> Workloads::unarchive(const std::string& ref) {
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve(ref, "workload"));
  if (!doc.value("archived", false)) return doc;
  const std::string now = core_.now_rfc3339();
  doc.erase("archived");
  doc.erase("archivedAt");
  doc["updatedAt"] = now;
  if (!doc.contains("history") || !doc["history"].is_array()) doc["history"] = json::array();
  doc["history"].push_back({{"time", now}, {"change", "unarchived"}});
  TRAINER_RETURN_IF_ERROR(core_.store->update_workload(doc));
  return doc;
}

Result<json> Workloads::update(const std::string& ref, const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"name", "description", "gpuQuota", "storageQuotaBytes"}));
  std::lock_guard<std::mutex> lock(core_.mu);
  auto w = resolve(ref, "workload");
  if (!w.is_ok()) return w.status();
  json doc = *w;
  if (!doc.contains("history") || !doc["history"].is_array()) doc["history"] = json::array();
  std::string now = core_.now_rfc3339();
  if (body.contains("name")) {
    if (!body["name"].is_string()) return invalid_field("name", "must be a string, got " + body["name"].dump());
    std::string name = body["name"].get<std::string>();
    TRAINER_RETURN_IF_ERROR(check_workload_name("name", name));
    const std::string old = doc.value("name", std::string());
    if (name != old) {
      doc["history"].push_back({{"time", now}, {"change", "renamed from '" + old + "' to '" + name + "'"}});
      doc["name"] = name;
    }
  }
  if (body.contains("description")) {
    auto d = optional_string(body, "description");
    if (!d.is_ok()) return d.status();
    doc["history"].push_back({{"time", now}, {"change", "description: " + d->value_or("")}});
    doc["description"] = d->value_or("");
  }
  if (body.contains("gpuQuota")) {
    auto v = quota_value(body["gpuQuota"]);
    if (!v.is_ok()) return v.status();
    doc["history"].push_back({{"time", now}, {"change", "gpuQuota: " + std::to_string(*v)}});
    doc["gpuQuota"] = *v;
  }
  if (body.contains("storageQuotaBytes")) {
    TRAINER_ASSIGN_OR_RETURN(json v, storage_quota_value(body["storageQuotaBytes"]));
    doc["history"].push_back({{"time", now}, {"change", "storageQuotaBytes: " + (v.is_null() ? "the deployment's" : v.dump())}});
    doc["storageQuotaBytes"] = v;
  }
  doc["updatedAt"] = now;
  Status st = core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->update_workload(doc));
    return capacity_.admit_locked();  // a larger quota may admit queued claims
  });
  if (!st.is_ok()) return st;
  return doc;
}

// A new setting starts a new default score table; the old one stays in `evaluationHistory`
// (with when it held), and its scores stay reachable with `workloads scores --dataset --grader`.
Result<json> Workloads::set_evaluation(const std::string& ref, const json& body) {
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"dataset", "grader", "graderInstructions"}));
  auto ds = optional_string(body, "dataset");
  if (!ds.is_ok()) return ds.status();
  if (!*ds) return invalid_field("dataset", "required");
  auto grader = optional_string(body, "grader");
  if (!grader.is_ok()) return grader.status();
  if (*grader) TRAINER_RETURN_IF_ERROR(check_grader("grader", **grader, &core_.options.config));
  auto instructions = optional_string(body, "graderInstructions");
  if (!instructions.is_ok()) return instructions.status();
  const std::string grader_kind = grader->value_or(kDefaultGrader);
  if (*instructions && !(*instructions)->empty() && grader_kind.rfind("model:", 0) != 0) {
    return invalid_field("graderInstructions", "apply to model: graders (judges); this grader is " + grader_kind);
  }
  std::lock_guard<std::mutex> lock(core_.mu);
  auto w = resolve(ref, "workload");
  if (!w.is_ok()) return w.status();
  auto d = datasets_.resolve(**ds, "dataset");
  if (!d.is_ok()) return d.status();
  json doc = *w;
  if (!doc.contains("history") || !doc["history"].is_array()) doc["history"] = json::array();
  if (!doc.contains("evaluationHistory") || !doc["evaluationHistory"].is_array()) doc["evaluationHistory"] = json::array();
  const std::string now = core_.now_rfc3339();
  json setting = {{"dataset", (*d)["hash"]}, {"grader", grader_kind}};
  if (*instructions && !(*instructions)->empty()) setting["graderInstructions"] = **instructions;
  json before = doc.value("evaluation", json::object());
  json compared = before;
  compared.erase("since");
  if (compared == setting) return doc;  // the same setting: the table it shows stays
  if (before.value("dataset", json(nullptr)).is_string()) {
    json old = before;
    old["until"] = now;
    doc["evaluationHistory"].push_back(old);
  }
  setting["since"] = now;
  doc["evaluation"] = setting;
  doc["history"].push_back({{"time", now},
                            {"change", "evaluation: dataset " + (*d)["hash"].get<std::string>().substr(0, 12) +
                                           ", grader " + grader_kind +
                                           (setting.contains("graderInstructions") ? ", with judge instructions" : "")}});
  doc["updatedAt"] = now;
  TRAINER_RETURN_IF_ERROR(core_.store->update_workload(doc));
  return doc;
}

Result<json> Workloads::get_ref(const std::string& ref, const std::string& which) {
  TRAINER_RETURN_IF_ERROR(check_ref_name(which));
  auto w = resolve(ref, "workload");
  if (!w.is_ok()) return w.status();
  json target = w->contains("refs") && (*w)["refs"].is_object() ? (*w)["refs"].value(which, json(nullptr)) : json(nullptr);
  return json{{"workload", {{"id", (*w)["id"]}, {"name", (*w)["name"]}}}, {"ref", which}, {"target", target}};
}

Result<json> Workloads::set_ref(const std::string& ref, const std::string& which, const json& body) {
  TRAINER_RETURN_IF_ERROR(check_ref_name(which));
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"target", "by"}));
  auto target = optional_string(body, "target");
  if (!target.is_ok()) return target.status();
  if (!*target) return invalid_field("target", "required");
  auto by = optional_string(body, "by");
  if (!by.is_ok()) return by.status();
  if (*by && (**by).size() > kMaxActorChars) {
    return invalid_field("by", "must be at most " + std::to_string(kMaxActorChars) + " characters");
  }
  std::lock_guard<std::mutex> lock(core_.mu);
  auto w = resolve(ref, "workload");
  if (!w.is_ok()) return w.status();
  auto model = hooks_.ref_target_locked(*w, which, **target);
  if (!model.is_ok()) return model.status();
  const json value = ref_value(*model);
  json doc = *w;
  if (!doc.contains("history") || !doc["history"].is_array()) doc["history"] = json::array();
  std::string now = core_.now_rfc3339();
  const json before = doc["refs"].is_object() ? doc["refs"].value(which, json(nullptr)) : json(nullptr);
  const json from = before.is_object() ? before.value("modelId", json(nullptr)) : json(nullptr);
  doc["refs"][which] = value;
  doc["history"].push_back({{"time", now},
                            {"change", "ref " + which + ": " + (from.is_string() ? from.get<std::string>() : "none") +
                                           " -> " + value["modelId"].get<std::string>()},
                            {"ref", which},
                            {"from", from},
                            {"to", value["modelId"]},
                            {"by", by->value_or("unknown")}});
  doc["updatedAt"] = now;
  TRAINER_RETURN_IF_ERROR(core_.store->update_workload(doc));
  return json{{"workload", {{"id", doc["id"]}, {"name", doc["name"]}}}, {"ref", which}, {"target", value}};
}

Result<json> Workloads::resolve(const std::string& ref, const std::string& field) {
  auto by_name = core_.store->workload_by_name(ref);
  if (!by_name.is_ok()) return by_name.status();
  if (by_name->has_value()) return **by_name;
  auto by_id = core_.store->get_workload(ref);
  if (!by_id.is_ok()) return by_id.status();
  if (by_id->has_value()) return **by_id;
  if (is_hex(ref) && ref.size() >= 4) {
    auto all = core_.store->list_workloads();
    if (!all.is_ok()) return all.status();
    std::vector<json> matches;
    for (const auto& w : *all) {
      if (w.value("id", std::string()).rfind(ref, 0) == 0) matches.push_back(w);
    }
    if (matches.size() == 1) return matches[0];
    if (matches.size() > 1) {
      std::string c;
      for (const auto& m : matches) c += (c.empty() ? "" : ", ") + m.value("id", std::string());
      return invalid_field(field, "'" + ref + "' is an ambiguous id prefix (candidates: " + c + ")");
    }
  }
  return field_status(StatusCode::kNotFound, field, "no workload named or with id '" + ref + "'");
}

Result<json> Workloads::history(const std::string& ref) {
  auto w = resolve(ref, "workload");
  if (!w.is_ok()) return w.status();
  return json{{"workload", {{"id", (*w)["id"]}, {"name", (*w)["name"]}}},
              {"history", w->value("history", json::array())}};
}

}  // namespace trainer::service

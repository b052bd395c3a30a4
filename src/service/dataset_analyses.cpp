// Dataset analyses in the background (dataset_analyses.h): their requests and the kernel's
// "dataset_analysis" kind.
#include "service/dataset_analyses.h"

#include <vector>

#include "common/json_parse.h"

namespace trainer::service {
namespace {

constexpr const char* kKind = "dataset_analysis";
constexpr const char* kPending = "PENDING";
constexpr const char* kRunning = "RUNNING";
constexpr const char* kCompleted = "COMPLETED";
constexpr const char* kFailed = "FAILED";
// The longest maxSeqLength an analysis counts cuts at (as the measure route).
constexpr int64_t kMaxSeqLength = 1 << 20;

}  // namespace

const tasks::PhaseTable& dataset_analysis_phase_table() {
  static const tasks::PhaseTable table =
      *tasks::PhaseTable::make(kKind, {{kPending}, {kRunning}, {kCompleted, true}, {kFailed, true}},
                               {{kPending, {kRunning, kFailed}}, {kRunning, {kCompleted, kFailed}}});
  return table;
}

DatasetAnalyses::DatasetAnalyses(ServiceCore& core, Datasets& datasets, BaseModels& base_models)
    : core_(core),
      datasets_(datasets),
      base_models_(base_models),
      tasks_(dataset_analysis_phase_table(), [this](tasks::Step& s) { return step_task(s); }) {}

Result<std::pair<json, bool>> DatasetAnalyses::create(const std::string& ref, const json& body) {
  if (!body.is_object())
    return invalid_argument("the request body must be a JSON object {baseModel, maxSeqLength}");
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"baseModel", "maxSeqLength"}));
  if (!body.contains("baseModel") || !body["baseModel"].is_string() ||
      body["baseModel"].get<std::string>().empty()) {
    return invalid_field("baseModel",
                         "required: the base model whose tokenizer and chat template measure the rows");
  }
  const std::string base = body["baseModel"].get<std::string>();
  json max_seq_length = nullptr;
  if (body.contains("maxSeqLength") && !body["maxSeqLength"].is_null()) {
    const json& v = body["maxSeqLength"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxSeqLength) {
      return invalid_field("maxSeqLength", "must be an integer between 1 and " +
                                               std::to_string(kMaxSeqLength) + ", got " + v.dump());
    }
    max_seq_length = v;
  }
  auto d = datasets_.resolve(ref, "dataset");
  if (!d.is_ok()) return d.status();
  auto m = base_models_.resolve(base, "baseModel");
  if (!m.is_ok()) return m.status();
  if ((*m)["status"] != "ready") {
    return field_status(
        StatusCode::kFailedPrecondition, "baseModel",
        "'" + base + "' is " + m->value("status", std::string("unknown")) + "; wait until it is ready");
  }
  const std::string hash = d->value("hash", std::string());
  const std::string model_name = m->value("name", std::string());
  const std::string model_hash = m->value("contentHash", std::string());

  std::lock_guard<std::mutex> lock(core_.mu);
  // The same question asked again gets the analysis that answers it, unless that one failed.
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> existing, core_.store->list_dataset_analyses(hash));
  for (const json& a : existing) {
    if (a.value("baseModel", std::string()) == model_name &&
        a.value("_modelHash", std::string()) == model_hash &&
        a.value("maxSeqLength", json(nullptr)) == max_seq_length &&
        a.value("phase", std::string()) != kFailed) {
      return std::make_pair(present(a), false);
    }
  }
  json doc = {{"analysisId", random_hex(16)},
              {"dataset", {{"hash", hash}, {"ref", ref}}},
              {"baseModel", model_name},
              {"maxSeqLength", max_seq_length},
              {"phase", kPending},
              {"attempt", 0},
              {"createdAt", core_.now_rfc3339()},
              {"startedAt", nullptr},
              {"endedAt", nullptr},
              {"result", nullptr},
              {"_modelHash", model_hash}};
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->put_dataset_analysis(doc));
    return core_.kernel->create(kKind, doc["analysisId"].get<std::string>(), kPending);
  }));
  core_.kernel->wake();
  return std::make_pair(present(doc), true);
}

Result<json> DatasetAnalyses::list(const std::string& ref) {
  auto d = datasets_.resolve(ref, "dataset");
  if (!d.is_ok()) return d.status();
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> all,
                           core_.store->list_dataset_analyses(d->value("hash", std::string())));
  json out = json::array();
  for (const json& a : all) out.push_back(present(a));
  return json{{"dataset", {{"hash", (*d)["hash"]}, {"name", d->value("name", json(nullptr))}}},
              {"analyses", out}};
}

Result<json> DatasetAnalyses::get(const std::string& ref, const std::string& id) {
  auto d = datasets_.resolve(ref, "dataset");
  if (!d.is_ok()) return d.status();
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> a, core_.store->get_dataset_analysis(id));
  if (!a ||
      a->value("dataset", json::object()).value("hash", std::string()) != d->value("hash", std::string())) {
    return field_status(StatusCode::kNotFound, "analysis",
                        "dataset " + ref + " has no analysis " + id + " (`trainer datasets analyses " + ref +
                            "` lists its analyses)");
  }
  return present(*a);
}

json DatasetAnalyses::present(const json& a) {
  json out = json::object();
  for (const auto& [k, v] : a.items()) {
    if (!k.empty() && k[0] == '_') continue;
    out[k] = v;
  }
  return out;
}

Status DatasetAnalyses::step_task(tasks::Step& step) {
  const std::string id = step.task().id;
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_dataset_analysis(id));
  if (!stored) return internal_error("dataset analysis " + id + " has a task but no document");
  json doc = std::move(*stored);
  const std::string t = core_.now_rfc3339();
  auto end = [&](const char* phase) -> Status {
    doc["phase"] = phase;
    doc["endedAt"] = t;
    TRAINER_RETURN_IF_ERROR(core_.store->put_dataset_analysis(doc));
    return core_.kernel->move(kKind, id, phase);
  };
  if (auto outcome = step.take_outcome()) {
    if (outcome->is_ok()) {
      doc["result"] = **outcome;
      return end(kCompleted);
    }
    doc["failureReason"] = "trainer-job analyze failed: " + outcome->status().message();
    return end(kFailed);
  }
  if (step.working()) return Status::ok();
  // Not started yet, or started by a trainerd that stopped before it ended: the next attempt.
  const int attempt = doc.value("attempt", 0);
  if (attempt >= kMaxAttempts) {
    doc["failureReason"] =
        "the analysis was interrupted " + std::to_string(attempt) +
        " times (trainerd stopped while it ran); start it again with `trainer datasets analyze`";
    return end(kFailed);
  }
  // Where the rows and the model are on this host, found now (stored documents keep keys).
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> dataset,
                           core_.store->get_dataset(doc["dataset"].value("hash", std::string())));
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> model,
                           base_models_.find_selected(doc.value("baseModel", std::string())));
  if (!dataset || !model || model->value("status", std::string()) != "ready" ||
      model->value("contentHash", std::string()) != doc.value("_modelHash", std::string())) {
    doc["failureReason"] = std::string(!dataset ? "the dataset is no longer registered"
                                                : "base model '" + doc.value("baseModel", std::string()) +
                                                      "' is no longer selected as it was");
    return end(kFailed);
  }
  std::vector<std::string> args = {
      "analyze", "--model", base_models_.cache_path_of(*model), "--data", datasets_.local_path(*dataset),
      "-o",      "json"};
  if (doc["maxSeqLength"].is_number_integer()) {
    args.push_back("--max-seq-length");
    args.push_back(std::to_string(doc["maxSeqLength"].get<int64_t>()));
  }
  doc["attempt"] = attempt + 1;
  doc["phase"] = kRunning;
  if (doc["startedAt"].is_null()) doc["startedAt"] = t;
  TRAINER_RETURN_IF_ERROR(core_.store->put_dataset_analysis(doc));
  TRAINER_RETURN_IF_ERROR(core_.kernel->move(kKind, id, kRunning));
  step.launch([this, args]() -> Result<json> {
    TRAINER_ASSIGN_OR_RETURN(std::string out, core_.backend->run_tool(args, kAttemptSeconds));
    auto parsed = parse_json(out, "the output of trainer-job analyze");
    if (!parsed.is_ok() || !parsed->is_object()) {
      return internal_error("trainer-job analyze printed something other than a JSON object");
    }
    return *parsed;
  });
  return Status::ok();
}

}  // namespace trainer::service

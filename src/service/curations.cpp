// Curations (curations.h): their requests and the kernel's "curation" kind.
#include "service/curations.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <regex>
#include <thread>

#include "dataset/sessions.h"
#include "service/chat_target.h"

namespace trainer::service {
namespace {

constexpr const char* kKind = "curation";
constexpr const char* kPending = "PENDING";
constexpr const char* kJudging = "JUDGING";
constexpr const char* kCompleted = "COMPLETED";
constexpr const char* kFailed = "FAILED";

const std::regex kCurationId("^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$");

// The request's fields, in the order a differing one is named.
const char* const kRequestFields[] = {"sessionHashes", "source", "threshold", "dataset",
                                      "systemPrompt", "judge", "graderInstructions"};

// One candidate: which session it came from, its place there, and its conversation.
struct Candidate {
  std::string session;
  int64_t index = 0;
  json row;
};

}  // namespace

const tasks::PhaseTable& curation_phase_table() {
  static const tasks::PhaseTable table =
      *tasks::PhaseTable::make(kKind, {{kPending}, {kJudging}, {kCompleted, true}, {kFailed, true}},
                               {{kPending, {kJudging, kFailed}}, {kJudging, {kCompleted, kFailed}}});
  return table;
}

Result<json> Curations::check_request(const json& body) {
  json r = json::object();
  const json hashes = body.value("sessionHashes", json());
  if (!hashes.is_array() || hashes.empty()) {
    return invalid_field("sessionHashes", "required: a non-empty list of session hashes (`trainer sessions create` prints them)");
  }
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (!hashes[i].is_string()) return invalid_field("sessionHashes[" + std::to_string(i) + "]", "must be a string");
  }
  r["sessionHashes"] = hashes;
  const json source = body.value("source", json());
  if (!source.is_string() || !dataset::session_source(source.get<std::string>())) {
    return invalid_field("source", "required: oasst1, otel or canonical, the sessions' source" +
                                       (source.is_null() ? std::string() : ", got " + source.dump()));
  }
  r["source"] = source;
  const json threshold = body.value("threshold", json());
  if (!threshold.is_number() || threshold.get<double>() < 0 || threshold.get<double>() > 1) {
    return invalid_field("threshold", "required: a number from 0 to 1 (a candidate is kept when its score is at "
                                      "least this)" + (threshold.is_null() ? std::string() : ", got " + threshold.dump()));
  }
  r["threshold"] = threshold.get<double>();
  const json name = body.value("dataset", json());
  if (!name.is_string() || name.get<std::string>().empty()) {
    return invalid_field("dataset", "required: the name of the dataset the kept candidates become a version of");
  }
  TRAINER_RETURN_IF_ERROR(Datasets::check_name(name.get<std::string>(), "dataset"));
  r["dataset"] = name;
  for (const char* f : {"systemPrompt", "graderInstructions"}) {
    const json v = body.value(f, json());
    if (!v.is_null() && (!v.is_string() || v.get<std::string>().empty())) {
      return invalid_field(f, "must be a non-empty string when given");
    }
    r[f] = v;
  }
  const json judge = body.value("judge", json());
  if (!judge.is_string() || judge.get<std::string>().empty()) {
    return invalid_field("judge", "required: a judge of trainerd's configuration, or a model served at one of its "
                                  "endpoints, by name (as a run's model:NAME term)");
  }
  r["judge"] = judge;
  return r;
}

Result<json> Curations::find_judge_target(const std::string& name) {
  return find_chat_target(core_, name, "judge", "judge");
}

Result<json> Curations::new_document(const std::string& id, const json& request) {
  int64_t total = 0;
  const json& hashes = request["sessionHashes"];
  for (size_t i = 0; i < hashes.size(); ++i) {
    const std::string at = "sessionHashes[" + std::to_string(i) + "]";
    TRAINER_ASSIGN_OR_RETURN(json session, sessions_.find(hashes[i].get<std::string>(), at));
    if (session.value("source", std::string()) != request["source"]) {
      return invalid_field("source", "session " + hashes[i].get<std::string>() + " (" + at + ") is " +
                                         session.value("source", std::string()) + ", not " +
                                         request["source"].get<std::string>());
    }
    total += session.value("candidates", int64_t{0});
  }
  TRAINER_ASSIGN_OR_RETURN(json target, find_judge_target(request["judge"].get<std::string>()));
  json doc = request;
  doc["curationId"] = id;
  doc["phase"] = kPending;
  doc["progress"] = {{"judged", 0}, {"total", total}};
  doc["attempt"] = 0;
  doc["createdAt"] = core_.now_rfc3339();
  doc["startedAt"] = nullptr;
  doc["endedAt"] = nullptr;
  doc["result"] = nullptr;
  doc["_request"] = request;
  doc["_judge"] = target;
  return doc;
}

Status Curations::check(const json& body) {
  if (!body.is_object()) return invalid_argument("a curation request must be an object");
  if (body.contains("curationId")) {
    return invalid_field("curationId", "is not given here: a pipeline's curation takes its id from the pipeline and "
                                       "the stage, so that a restart or a resume finds the same curation");
  }
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"sessionHashes", "source", "threshold", "dataset", "systemPrompt",
                                              "judge", "graderInstructions"}));
  TRAINER_ASSIGN_OR_RETURN(json request, check_request(body));
  TRAINER_ASSIGN_OR_RETURN(json doc, new_document("", request));
  (void)doc;
  return Status::ok();
}

Result<std::pair<json, bool>> Curations::apply(const json& body) {
  std::lock_guard<std::mutex> lock(core_.mu);
  return apply_locked(body);
}

Result<std::pair<json, bool>> Curations::apply_locked(const json& body) {
  if (!body.is_object()) return invalid_argument("the request body must be a JSON object");
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"curationId", "sessionHashes", "source", "threshold", "dataset",
                                              "systemPrompt", "judge", "graderInstructions"}));
  const json id = body.value("curationId", json());
  if (!id.is_string() || !std::regex_match(id.get<std::string>(), kCurationId)) {
    return invalid_field("curationId", "required: 1-128 of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter "
                                       "or digit; the same id again is the same curation");
  }
  TRAINER_ASSIGN_OR_RETURN(json request, check_request(body));
  const std::string curation_id = id.get<std::string>();
  {  // The same id: the same curation, or a refusal naming what differs.
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> existing, core_.store->get_curation(curation_id));
    if (existing) {
      const json before = existing->value("_request", json::object());
      for (const char* f : kRequestFields) {
        if (before.value(f, json()) != request.value(f, json())) {
          return field_status(StatusCode::kAlreadyExists, "curationId",
                              "curation '" + curation_id + "' exists with another request (its " + f + " was " +
                                  before.value(f, json()).dump() + "); choose another curationId");
        }
      }
      TRAINER_ASSIGN_OR_RETURN(json shown, present(*existing, true));
      return std::make_pair(shown, false);
    }
  }
  TRAINER_ASSIGN_OR_RETURN(json doc, new_document(curation_id, request));
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->put_curation(doc));
    return core_.kernel->create(kKind, curation_id, kPending);
  }));
  core_.kernel->wake();
  TRAINER_ASSIGN_OR_RETURN(json shown, present(doc, true));
  return std::make_pair(shown, true);
}

Result<json> Curations::get(const std::string& id) {
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> doc, core_.store->get_curation(id));
  if (!doc) {
    return field_status(StatusCode::kNotFound, "curation", "no curation '" + id + "' (`trainer curations list` lists them)");
  }
  return present(*doc, true);
}

Result<json> Curations::list() {
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> all, core_.store->list_curations());
  json out = json::array();
  for (const json& d : all) {
    TRAINER_ASSIGN_OR_RETURN(json shown, present(d, false));
    out.push_back(std::move(shown));
  }
  return json{{"curations", out}};
}

Result<json> Curations::present(const json& doc, bool rejections) {
  json out = json::object();
  for (const auto& [k, v] : doc.items()) {
    if (!k.empty() && k[0] == '_') continue;
    out[k] = v;
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> scores,
                           core_.store->list_curation_scores(doc.value("curationId", std::string())));
  const double threshold = doc.value("threshold", 1.0);
  int64_t accepted = 0;
  json rejected = json::array();
  for (const json& s : scores) {
    if (s.value("score", 0.0) >= threshold) {
      ++accepted;
    } else {
      rejected.push_back(s);
    }
  }
  out["progress"]["judged"] = static_cast<int64_t>(scores.size());
  out["accepted"] = accepted;
  out["rejected"] = static_cast<int64_t>(rejected.size());
  if (rejections) out["rejections"] = std::move(rejected);
  return out;
}

Result<CurationJudge> Curations::judge_of(const json& doc) {
  CurationJudge j;
  const json instructions = doc.value("graderInstructions", json());
  j.instructions = instructions.is_string() ? instructions.get<std::string>() : kDefaultJudgeInstructions;
  TRAINER_ASSIGN_OR_RETURN(ChatTarget t, chat_target_of(core_, doc.value("_judge", json::object()), "judge"));
  j.label = std::move(t.label);
  j.url = std::move(t.url);
  j.model = std::move(t.model);
  j.ca_file = std::move(t.ca_file);
  j.proxy = std::move(t.proxy);
  j.headers = std::move(t.headers);
  return j;
}

Result<json> Curations::judge_and_register(const json& doc) {
  const std::string id = doc.value("curationId", std::string());
  TRAINER_ASSIGN_OR_RETURN(CurationJudge judge, judge_of(doc));
  std::vector<Candidate> candidates;
  for (const json& h : doc["sessionHashes"]) {
    TRAINER_ASSIGN_OR_RETURN(json session, sessions_.find(h.get<std::string>(), "sessionHashes"));
    TRAINER_ASSIGN_OR_RETURN(std::vector<json> rows, sessions_.candidates(session));
    for (size_t i = 0; i < rows.size(); ++i) {
      candidates.push_back({h.get<std::string>(), static_cast<int64_t>(i), std::move(rows[i])});
    }
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> stored, core_.store->list_curation_scores(id));
  std::vector<bool> judged(candidates.size(), false);
  for (const json& s : stored) {
    const int64_t c = s.value("candidate", int64_t{-1});
    if (c >= 0 && c < static_cast<int64_t>(judged.size())) judged[c] = true;
  }
  std::vector<size_t> pending;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!judged[i]) pending.push_back(i);
  }

  // kConcurrency callers take the next pending candidate until none is left, the judge refused,
  // too many in a row had no verdict, or trainerd stops.
  std::atomic<size_t> next{0};
  std::atomic<int> consecutive_failures{0};
  std::mutex failure_mu;
  std::string failure;  // guarded by failure_mu: why the judging stopped early
  auto stop_with = [&](std::string why) {
    std::lock_guard<std::mutex> lock(failure_mu);
    if (failure.empty()) failure = std::move(why);
  };
  auto stopped = [&] {
    std::lock_guard<std::mutex> lock(failure_mu);
    return !failure.empty();
  };
  auto caller = [&] {
    while (!stopped()) {
      if (core_.kernel->work_stopping()) return stop_with("trainerd is stopping");
      const size_t k = next.fetch_add(1);
      if (k >= pending.size()) return;
      const Candidate& c = candidates[pending[k]];
      JudgeAnswer a = ask_judge(judge, c.row["messages"], [this] { return !core_.kernel->work_stopping(); });
      if (core_.kernel->work_stopping()) return stop_with("trainerd is stopping");  // nothing stored
      if (a.refused) return stop_with("the judge refused a call: " + a.failure);
      json score = {{"candidate", static_cast<int64_t>(pending[k])},
                    {"session", c.session},
                    {"index", c.index},
                    {"score", a.score.value_or(0.0)},
                    {"judgedAt", core_.now_rfc3339()}};
      if (!a.score) {
        score["failure"] = a.failure;
        if (++consecutive_failures >= kMaxConsecutiveFailures) {
          return stop_with(judge.label + " gave no verdict for " + std::to_string(kMaxConsecutiveFailures) +
                           " candidates in a row; the last: " + a.failure);
        }
      } else {
        consecutive_failures = 0;
      }
      auto put = core_.store->put_curation_score(id, score);
      if (!put.is_ok()) return stop_with("storing a score failed: " + put.status().message());
      core_.notify();
    }
  };
  std::vector<std::thread> callers;
  const size_t n = std::min<size_t>(kConcurrency, pending.size());
  for (size_t i = 0; i < n; ++i) callers.emplace_back(caller);
  for (auto& t : callers) t.join();
  if (!failure.empty()) return failed_precondition(failure);

  TRAINER_ASSIGN_OR_RETURN(std::vector<json> scores, core_.store->list_curation_scores(id));
  const double threshold = doc.value("threshold", 1.0);
  const json system_prompt = doc.value("systemPrompt", json());
  std::string rows;
  int64_t accepted = 0;
  double best = -1;
  for (const json& s : scores) {
    const int64_t c = s.value("candidate", int64_t{-1});
    const double score = s.value("score", 0.0);
    best = std::max(best, score);
    if (c < 0 || c >= static_cast<int64_t>(candidates.size()) || score < threshold) continue;
    json row = candidates[c].row;
    if (system_prompt.is_string()) {  // the request's system prompt replaces the candidate's own
      json messages = json::array({{{"role", "system"}, {"content", system_prompt}}});
      for (const json& m : row["messages"]) {
        if (m.value("role", std::string()) != "system") messages.push_back(m);
      }
      row["messages"] = std::move(messages);
    }
    rows += row.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    ++accepted;
  }
  if (accepted == 0) {
    return failed_precondition("no candidate scored at least the threshold " + std::to_string(threshold) +
                               (best >= 0 ? " (the best scored " + std::to_string(best) + ")" : std::string()) +
                               "; nothing was registered");
  }
  TRAINER_ASSIGN_OR_RETURN(auto registered, datasets_.register_rows(doc["dataset"].get<std::string>(), rows));
  json dataset = {{"name", doc["dataset"]},
                  {"hash", registered.first.value("hash", std::string())},
                  {"rows", registered.first.value("rows", int64_t{0})}};
  if (registered.first.contains("movedFrom")) dataset["movedFrom"] = registered.first["movedFrom"];
  return json{{"dataset", dataset}};
}

Status Curations::step_task(tasks::Step& step) {
  const std::string id = step.task().id;
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_curation(id));
  if (!stored) return internal_error("curation " + id + " has a task but no document");
  json doc = std::move(*stored);
  const std::string t = core_.now_rfc3339();
  auto end = [&](const char* phase) -> Status {
    doc["phase"] = phase;
    doc["endedAt"] = t;
    TRAINER_RETURN_IF_ERROR(core_.store->put_curation(doc));
    core_.notify();
    return core_.kernel->move(kKind, id, phase);
  };
  if (auto outcome = step.take_outcome()) {
    if (outcome->is_ok()) {
      doc["result"] = **outcome;
      return end(kCompleted);
    }
    doc["failureReason"] = outcome->status().message();
    return end(kFailed);
  }
  if (step.working()) return Status::ok();
  // Not started yet, or started by a trainerd that stopped: judging resumes where it was.
  const bool pending = doc.value("phase", std::string()) == kPending;
  doc["phase"] = kJudging;
  doc["attempt"] = doc.value("attempt", 0) + 1;
  if (doc["startedAt"].is_null()) doc["startedAt"] = t;
  TRAINER_RETURN_IF_ERROR(core_.store->put_curation(doc));
  if (pending) TRAINER_RETURN_IF_ERROR(core_.kernel->move(kKind, id, kJudging));
  step.launch([this, doc]() -> Result<json> { return judge_and_register(doc); });
  return Status::ok();
}

}  // namespace trainer::service

// Distillations (distillations.h): their requests (create, find, list, rejections, pause, resume,
// cancel) and the phase table; the work is in distillation_work.cpp.
#include "service/distillations.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "common/json_parse.h"
#include "service/distillation_chunks.h"
#include "service/util.h"

namespace trainer::service {

using namespace distillation;

namespace {

constexpr int kIdChars = 12;
constexpr int64_t kMaxTokens = 1048576;

// A number field of the request in [lo, hi]; `fallback` when absent.
Result<json> number_field(const json& body, const char* field, double lo, double hi, json fallback,
                          bool integer, const std::string& flag) {
  const json v = body.value(field, json());
  if (v.is_null()) return fallback;
  const bool ok = integer ? v.is_number_integer() : v.is_number();
  if (!ok || v.get<double>() < lo || v.get<double>() > hi) {
    return invalid_field(field, std::string("must be ") + (integer ? "an integer" : "a number") + " from " +
                                    json(lo).dump() + " to " + json(hi).dump() + " (" + flag + "), got " +
                                    v.dump());
  }
  return v;
}

// "ROW:MSG" as {row, message}; nullopt when it is not two non-negative integers.
std::optional<json> decision_at(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) return std::nullopt;
  const std::string row = s.substr(0, colon), message = s.substr(colon + 1);
  for (const std::string& part : {row, message}) {
    if (part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  }
  return json{{"row", std::stoll(row)}, {"message", std::stoll(message)}};
}

}  // namespace

const tasks::PhaseTable& distillation_phase_table() {
  static const tasks::PhaseTable table =
      *tasks::PhaseTable::make(kKind,
                               {{kPending},
                                {kSmoke},
                                {kDistilling},
                                {kPaused, false, false, true},
                                {kAssembling},
                                {kCompleted, true},
                                {kFailed, true},
                                {kCancelled, true}},
                               {{kPending, {kSmoke, kPaused, kFailed, kCancelled}},
                                {kSmoke, {kDistilling, kPaused, kFailed, kCancelled}},
                                {kDistilling, {kAssembling, kPaused, kFailed, kCancelled}},
                                {kPaused, {kPending, kSmoke, kDistilling, kFailed, kCancelled}},
                                {kAssembling, {kCompleted, kFailed}}});
  return table;
}

Result<json> Distillations::check_request(const json& body, bool source_later) {
  if (!body.is_object()) return invalid_argument("the request body must be a JSON object");
  TRAINER_RETURN_IF_ERROR(check_fields(body, {"workload", "teacher", "from", "to", "replicas", "maxTokens",
                                              "temperature", "topP", "seed", "instructions", "smoke"}));
  for (const char* f : {"workload", "teacher", "from", "to"}) {
    const json v = body.value(f, json());
    if (!v.is_string() || v.get<std::string>().empty()) {
      return invalid_field(f, std::string("required: a non-empty string (--") + f + ")");
    }
  }
  json sampling = json::object();
  TRAINER_ASSIGN_OR_RETURN(sampling["replicas"],
                           number_field(body, "replicas", 1, kMaxReplicas, 1, true, "--replicas"));
  TRAINER_ASSIGN_OR_RETURN(
      sampling["maxTokens"],
      number_field(body, "maxTokens", 1, static_cast<double>(kMaxTokens), 4096, true, "--max-tokens"));
  TRAINER_ASSIGN_OR_RETURN(sampling["temperature"],
                           number_field(body, "temperature", 0, 2, 1.0, false, "--temperature"));
  TRAINER_ASSIGN_OR_RETURN(sampling["topP"], number_field(body, "topP", 0, 1, 1.0, false, "--top-p"));
  if (sampling["topP"].get<double>() <= 0) return invalid_field("topP", "must be above 0 (--top-p)");
  TRAINER_ASSIGN_OR_RETURN(sampling["seed"],
                           number_field(body, "seed", 0, 9007199254740991.0, 0, true, "--seed"));
  TRAINER_ASSIGN_OR_RETURN(std::optional<std::string> instructions, optional_string(body, "instructions"));
  if (instructions && instructions->empty())
    return invalid_field("instructions", "must not be empty when given");
  sampling["instructions"] = instructions ? json(*instructions) : json(nullptr);
  const std::string to = body["to"].get<std::string>();
  TRAINER_RETURN_IF_ERROR(Datasets::check_name(to, "to"));
  TRAINER_ASSIGN_OR_RETURN(json workload,
                           workloads_.resolve(body["workload"].get<std::string>(), "workload"));
  json doc = {{"source", {{"hash", ""}, {"rows", nullptr}}}};
  std::vector<json> rows;
  if (!source_later) {
    TRAINER_ASSIGN_OR_RETURN(json source, datasets_.resolve(body["from"].get<std::string>(), "from"));
    doc["source"] = {{"hash", source.value("hash", std::string())}, {"rows", source.value("rows", json())}};
    TRAINER_ASSIGN_OR_RETURN(rows, load_rows(core_, doc));
  }
  const std::vector<json> decisions = decisions_of(rows);
  if (decisions.empty() && !source_later) {
    return invalid_field("from",
                         "dataset '" + body["from"].get<std::string>() +
                             "' has no assistant message: there is no decision for a teacher to answer");
  }
  json smoke = nullptr;
  if (body.contains("smoke") && !body["smoke"].is_null()) {
    const json& listed = body["smoke"];
    if (!listed.is_array() || listed.empty()) {
      return invalid_field("smoke",
                           "must be a non-empty list of decisions ROW:MESSAGE (zero-based), e.g. 0:1,3:1");
    }
    smoke = json::array();
    std::set<std::string> seen;
    for (size_t i = 0; i < listed.size(); ++i) {
      const std::string at = "smoke[" + std::to_string(i) + "]";
      std::optional<json> d =
          listed[i].is_string() ? decision_at(listed[i].get<std::string>()) : std::nullopt;
      if (!d) {
        return invalid_field(
            at, listed[i].dump() + " is not a decision ROW:MESSAGE (two zero-based numbers, e.g. 3:1)");
      }
      const auto r = (*d)["row"].get<size_t>(), m = (*d)["message"].get<size_t>();
      if (!seen.insert(at_of(*d)).second)
        return invalid_field(at, listed[i].get<std::string>() + " is listed twice");
      smoke.push_back(*d);
      if (source_later) continue;  // its rows are checked when the distillation is created
      if (r >= rows.size()) {
        return invalid_field(at, listed[i].get<std::string>() + ": the dataset has " +
                                     std::to_string(rows.size()) + " rows (0 to " +
                                     std::to_string(rows.size() - 1) + ")");
      }
      const json& messages = rows[r]["messages"];
      if (m >= messages.size() || messages[m].value("role", std::string()) != "assistant") {
        return invalid_field(at, listed[i].get<std::string>() + ": message " + std::to_string(m) +
                                     " of row " + std::to_string(r) +
                                     " is not an assistant message (a decision)");
      }
    }
  }
  TRAINER_ASSIGN_OR_RETURN(json teacher,
                           find_chat_target(core_, body["teacher"].get<std::string>(), "teacher", "teacher"));
  const int64_t smoke_count = smoke.is_array()
                                  ? static_cast<int64_t>(smoke.size())
                                  : static_cast<int64_t>(std::min(decisions.size(), kSmokeDecisions));
  doc["workload"] = workload.value("name", body["workload"].get<std::string>());
  doc["teacher"] = body["teacher"];
  doc["from"] = body["from"];
  doc["source"]["rows"] = static_cast<int64_t>(rows.size());
  doc["to"] = to;
  doc["sampling"] = sampling;
  doc["smoke"] = smoke;
  doc["phase"] = kPending;
  doc["decisions"] = static_cast<int64_t>(decisions.size());
  doc["chunks"] = 1 + rest_chunks(static_cast<int64_t>(decisions.size()), smoke_count);
  doc["smokeDecisions"] = smoke_count;
  doc["attempt"] = 0;
  doc["createdAt"] = core_.now_rfc3339();
  doc["startedAt"] = nullptr;
  doc["endedAt"] = nullptr;
  doc["smokeResult"] = nullptr;
  doc["result"] = nullptr;
  doc["_teacher"] = teacher;
  return doc;
}

Status Distillations::check(const json& body, bool source_later) {
  return check_request(body, source_later).status();
}

Result<json> Distillations::create(const json& body) {
  TRAINER_ASSIGN_OR_RETURN(json doc, check_request(body));
  doc["distillationId"] = random_hex(kIdChars);
  std::lock_guard<std::mutex> lock(core_.mu);
  return store_new_locked(std::move(doc));
}

Result<json> Distillations::create_locked(const json& body, const std::string& id) {
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_distillation(id));
  if (stored) return present(*stored);  // started by an earlier step: the same one
  TRAINER_ASSIGN_OR_RETURN(json doc, check_request(body));
  doc["distillationId"] = id;
  return store_new_locked(std::move(doc));
}

Result<json> Distillations::store_new_locked(json doc) {
  const std::string id = doc["distillationId"].get<std::string>();
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->put_distillation(doc));
    return core_.kernel->create(kKind, id, kPending);
  }));
  core_.kernel->wake();
  return present(doc);
}

Result<json> Distillations::find(const std::string& ref) {
  if (ref.empty() || !is_hex(ref)) {
    return field_status(StatusCode::kNotFound, "distillation",
                        "no distillation '" + ref +
                            "': an id is 12 hex digits, or a prefix of one "
                            "(`trainer distillations list` lists them)");
  }
  if (ref.size() == static_cast<size_t>(kIdChars)) {
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> doc, core_.store->get_distillation(ref));
    if (doc) return *doc;
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> all, core_.store->list_distillations());
  std::vector<json> matches;
  for (json& d : all) {
    if (d.value("distillationId", std::string()).rfind(ref, 0) == 0) matches.push_back(std::move(d));
  }
  if (matches.empty()) {
    return field_status(StatusCode::kNotFound, "distillation",
                        "no distillation '" + ref + "' (`trainer distillations list` lists them)");
  }
  if (matches.size() > 1) {
    return invalid_field("distillation", "'" + ref + "' is the start of " + std::to_string(matches.size()) +
                                             " distillations' ids; give more of it");
  }
  return matches[0];
}

Result<json> Distillations::get(const std::string& ref) {
  TRAINER_ASSIGN_OR_RETURN(json doc, find(ref));
  return present(doc);
}

Result<json> Distillations::list() {
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> all, core_.store->list_distillations());
  json out = json::array();
  for (const json& d : all) {
    TRAINER_ASSIGN_OR_RETURN(json shown, present(d));
    out.push_back(std::move(shown));
  }
  return json{{"distillations", out}};
}

Result<json> Distillations::rejections(const std::string& ref, int64_t limit) {
  if (limit < 0) return invalid_field("limit", "must be 0 (all) or more, got " + std::to_string(limit));
  TRAINER_ASSIGN_OR_RETURN(json doc, find(ref));
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> chunks,
                           core_.store->list_distillation_chunks(doc["distillationId"].get<std::string>()));
  json out = json::array();
  int64_t total = 0;
  for (const json& c : chunks) {
    for (const json& a : c.value("answers", json::array())) {
      if (a.value("accepted", false)) continue;
      ++total;
      if (limit == 0 || static_cast<int64_t>(out.size()) < limit) {
        out.push_back({{"row", a["row"]},
                       {"message", a["message"]},
                       {"reason", a.value("reason", std::string())},
                       {"chunk", c["chunk"]}});
      }
    }
  }
  return json{{"distillationId", doc["distillationId"]}, {"rejections", out}, {"total", total}};
}

Result<json> Distillations::present(const json& doc) {
  json out = json::object();
  for (const auto& [k, v] : doc.items()) {
    if (!k.empty() && k[0] == '_') continue;
    out[k] = v;
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> chunks,
                           core_.store->list_distillation_chunks(doc.value("distillationId", std::string())));
  int64_t answered = 0, accepted = 0;
  for (const json& c : chunks) {
    for (const json& a : c.value("answers", json::array())) {
      ++answered;
      if (a.value("accepted", false)) ++accepted;
    }
  }
  out["progress"] = {
      {"decisions",
       {{"total", doc.value("decisions", int64_t{0})},
        {"answered", answered},
        {"accepted", accepted},
        {"rejected", answered - accepted}}},
      {"chunks",
       {{"stored", static_cast<int64_t>(chunks.size())}, {"total", doc.value("chunks", int64_t{0})}}}};
  return out;
}

Result<json> Distillations::request(const std::string& ref, const std::string& what) {
  TRAINER_ASSIGN_OR_RETURN(json found, find(ref));
  std::lock_guard<std::mutex> lock(core_.mu);
  return request_locked(found["distillationId"].get<std::string>(), what);
}

Result<json> Distillations::cancel_locked(const std::string& id) { return request_locked(id, "cancel"); }

Result<json> Distillations::request_locked(const std::string& id, const std::string& what) {
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_distillation(id));
  if (!stored) return internal_error("distillation " + id + " vanished");
  json doc = std::move(*stored);
  const std::string phase = doc.value("phase", std::string());
  const std::string name = "distillation " + id;
  if (ended(phase)) {
    return field_status(StatusCode::kFailedPrecondition, "distillation",
                        name + " has ended (" + phase + "); there is nothing to " + what);
  }
  std::string to;
  if (what == "pause") {
    if (phase == kPaused) return present(doc);  // paused already: the same answer
    if (phase == kAssembling) {
      return field_status(StatusCode::kFailedPrecondition, "distillation",
                          name + " is ASSEMBLING: every decision is answered; it can no longer be paused");
    }
    doc["_resumeTo"] = phase;
    to = kPaused;
  } else if (what == "resume") {
    if (phase != kPaused) {
      return field_status(StatusCode::kFailedPrecondition, "distillation",
                          name + " is " + phase + ", not PAUSED");
    }
    to = doc.value("_resumeTo", std::string(kPending));
    doc.erase("_resumeTo");
  } else {  // cancel
    if (phase == kAssembling) {
      return field_status(
          StatusCode::kFailedPrecondition, "distillation",
          name + " is ASSEMBLING: its rows are being registered; it can no longer be cancelled");
    }
    to = kCancelled;
    doc["endedAt"] = core_.now_rfc3339();
  }
  doc["phase"] = to;
  TRAINER_RETURN_IF_ERROR(core_.store->transaction([&]() -> Status {
    TRAINER_RETURN_IF_ERROR(core_.store->put_distillation(doc));
    return core_.kernel->move(kKind, id, to);
  }));
  core_.kernel->wake();
  core_.notify();
  return present(doc);
}

Result<json> Distillations::pause(const std::string& ref) {
  return request(ref, "pause");
}
Result<json> Distillations::resume(const std::string& ref) {
  return request(ref, "resume");
}
Result<json> Distillations::cancel(const std::string& ref) {
  return request(ref, "cancel");
}

}  // namespace trainer::service

// Distillations (distillations.h): their requests and the kernel's "distillation" kind.
#include "service/distillations.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "common/json_parse.h"
#include "service/teacher.h"
#include "service/util.h"

namespace trainer::service {
namespace {

constexpr const char* kKind = "distillation";
constexpr const char* kPending = "PENDING";
constexpr const char* kSmoke = "SMOKE_TEST";
constexpr const char* kDistilling = "DISTILLING";
constexpr const char* kPaused = "PAUSED";
constexpr const char* kAssembling = "ASSEMBLING";
constexpr const char* kCompleted = "COMPLETED";
constexpr const char* kFailed = "FAILED";
constexpr const char* kCancelled = "CANCELLED";

constexpr int kIdChars = 12;
constexpr int64_t kMaxTokens = 1048576;

bool ended(const std::string& phase) {
  return phase == kCompleted || phase == kFailed || phase == kCancelled;
}

std::string at_of(const json& d) {
  return std::to_string(d.value("row", int64_t{0})) + ":" + std::to_string(d.value("message", int64_t{0}));
}

// A dataset row as a chat row: a {prompt, completion} row becomes a user and an assistant message.
json as_chat(json row) {
  if (row.contains("messages")) return row;
  json out = {
      {"messages", json::array({{{"role", "user"}, {"content", row.value("prompt", json(""))}},
                                {{"role", "assistant"}, {"content", row.value("completion", json(""))}}})}};
  for (auto& [k, v] : row.items()) {
    if (k != "prompt" && k != "completion") out[k] = v;
  }
  return out;
}

// Every decision of `rows`, in order: {row, message} of each assistant message.
std::vector<json> decisions_of(const std::vector<json>& rows) {
  std::vector<json> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    const json& messages = rows[r]["messages"];
    for (size_t m = 0; m < messages.size(); ++m) {
      if (messages[m].value("role", std::string()) == "assistant") {
        out.push_back({{"row", static_cast<int64_t>(r)}, {"message", static_cast<int64_t>(m)}});
      }
    }
  }
  return out;
}

// The smoke decisions: the request's list, or the first kSmokeDecisions.
std::vector<json> smoke_of(const json& doc, const std::vector<json>& decisions) {
  const json listed = doc.value("smoke", json());
  if (listed.is_array()) {
    std::vector<json> out;
    for (const json& d : listed) out.push_back({{"row", d["row"]}, {"message", d["message"]}});
    return out;
  }
  const size_t n = std::min(decisions.size(), Distillations::kSmokeDecisions);
  return std::vector<json>(decisions.begin(), decisions.begin() + static_cast<std::ptrdiff_t>(n));
}

// The decisions of chunk `k`: 0 is the smoke pass; 1.. the others in order, kChunkDecisions each.
std::vector<json> chunk_of(const json& doc, const std::vector<json>& decisions, int64_t k) {
  const std::vector<json> smoke = smoke_of(doc, decisions);
  if (k == 0) return smoke;
  std::set<std::string> in_smoke;
  for (const json& d : smoke) in_smoke.insert(at_of(d));
  std::vector<json> rest;
  for (const json& d : decisions) {
    if (in_smoke.count(at_of(d)) == 0) rest.push_back(d);
  }
  const size_t from = static_cast<size_t>(k - 1) * Distillations::kChunkDecisions;
  if (from >= rest.size()) return {};
  const size_t to = std::min(rest.size(), from + Distillations::kChunkDecisions);
  return std::vector<json>(rest.begin() + static_cast<std::ptrdiff_t>(from),
                           rest.begin() + static_cast<std::ptrdiff_t>(to));
}

// The chunks after the smoke pass.
int64_t rest_chunks(int64_t decisions, int64_t smoke) {
  const int64_t rest = decisions - smoke;
  return (rest + static_cast<int64_t>(Distillations::kChunkDecisions) - 1) /
         static_cast<int64_t>(Distillations::kChunkDecisions);
}

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

namespace {

// The source dataset's rows, as chat rows.
Result<std::vector<json>> load_rows(ServiceCore& core, const json& doc) {
  const std::string hash = doc.value("source", json::object()).value("hash", std::string());
  TRAINER_ASSIGN_OR_RETURN(std::string text, core.storage->get(Datasets::key_of(hash)));
  std::vector<json> rows;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) {
      TRAINER_ASSIGN_OR_RETURN(
          json row, parse_json(std::string_view(text).substr(start, end - start), "a dataset row"));
      rows.push_back(as_chat(std::move(row)));
    }
    start = end + 1;
  }
  return rows;
}

}  // namespace

Result<json> Distillations::create(const json& body) {
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
  TRAINER_ASSIGN_OR_RETURN(json source, datasets_.resolve(body["from"].get<std::string>(), "from"));
  json doc = {
      {"source", {{"hash", source.value("hash", std::string())}, {"rows", source.value("rows", json())}}}};
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> rows, load_rows(core_, doc));
  const std::vector<json> decisions = decisions_of(rows);
  if (decisions.empty()) {
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
      if (!seen.insert(at_of(*d)).second)
        return invalid_field(at, listed[i].get<std::string>() + " is listed twice");
      smoke.push_back(*d);
    }
  }
  TRAINER_ASSIGN_OR_RETURN(json teacher,
                           find_chat_target(core_, body["teacher"].get<std::string>(), "teacher", "teacher"));
  const int64_t smoke_count = smoke.is_array()
                                  ? static_cast<int64_t>(smoke.size())
                                  : static_cast<int64_t>(std::min(decisions.size(), kSmokeDecisions));
  doc["distillationId"] = random_hex(kIdChars);
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
  const std::string id = doc["distillationId"].get<std::string>();
  std::lock_guard<std::mutex> lock(core_.mu);
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
  const std::string id = found["distillationId"].get<std::string>();
  std::lock_guard<std::mutex> lock(core_.mu);
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

Result<json> Distillations::answer_chunk(const json& doc, const std::vector<json>& rows,
                                         const std::vector<json>& decisions, int64_t chunk) {
  const std::string id = doc["distillationId"].get<std::string>();
  const std::vector<json> todo = chunk_of(doc, decisions, chunk);
  TRAINER_ASSIGN_OR_RETURN(ChatTarget teacher,
                           chat_target_of(core_, doc.value("_teacher", json::object()), "teacher"));
  const json s = doc["sampling"];
  TeacherSampling sampling;
  sampling.max_tokens = s.value("maxTokens", 4096);
  sampling.temperature = s.value("temperature", 1.0);
  sampling.top_p = s.value("topP", 1.0);
  sampling.seed = s.value("seed", int64_t{0});
  if (s.value("instructions", json()).is_string())
    sampling.instructions = s["instructions"].get<std::string>();

  std::vector<json> answers(todo.size());
  std::atomic<size_t> next{0};
  std::atomic<int> consecutive_failures{0};
  std::mutex failure_mu;
  std::string failure;  // guarded by failure_mu: why the chunk stopped early
  std::string stopped;  // guarded by failure_mu: the phase that stopped it (CANCELLED), or ""
  auto stop_with = [&](std::string why, std::string phase = {}) {
    std::lock_guard<std::mutex> lock(failure_mu);
    if (failure.empty() && stopped.empty()) {
      failure = std::move(why);
      stopped = std::move(phase);
    }
  };
  auto halted = [&] {
    std::lock_guard<std::mutex> lock(failure_mu);
    return !failure.empty() || !stopped.empty();
  };
  auto keep_going = [this] { return !core_.kernel->work_stopping(); };
  auto caller = [&] {
    while (!halted()) {
      if (core_.kernel->work_stopping()) return stop_with("trainerd is stopping");
      auto now = core_.store->get_distillation(id);  // a cancel ends the chunk at once
      if (now.is_ok() && now->has_value() && (**now).value("phase", std::string()) == kCancelled) {
        return stop_with("cancelled", kCancelled);
      }
      const size_t k = next.fetch_add(1);
      if (k >= todo.size()) return;
      const auto r = todo[k]["row"].get<int64_t>(), m = todo[k]["message"].get<int64_t>();
      TeacherAnswer a =
          ask_teacher(teacher, sampling, rows[static_cast<size_t>(r)], static_cast<size_t>(m), keep_going);
      if (core_.kernel->work_stopping()) return stop_with("trainerd is stopping");  // nothing stored
      if (a.refused) return stop_with(teacher.label + " refused a call: " + a.reason);
      json answer = {
          {"row", r}, {"message", m}, {"accepted", a.accepted}, {"answeredAt", core_.now_rfc3339()}};
      if (a.accepted) {
        answer["answer"] = a.message;
      } else {
        answer["reason"] = a.reason;
      }
      if (!a.answered) {
        if (++consecutive_failures >= kMaxConsecutiveFailures) {
          return stop_with(teacher.label + " gave no answer for " + std::to_string(kMaxConsecutiveFailures) +
                           " decisions in a row; the last: " + a.reason);
        }
      } else {
        consecutive_failures = 0;
      }
      answers[k] = std::move(answer);
    }
  };
  const int replicas = s.value("replicas", 1);
  std::vector<std::thread> callers;
  const size_t n = std::min<size_t>(static_cast<size_t>(replicas), todo.size());
  for (size_t i = 0; i < n; ++i) callers.emplace_back(caller);
  for (auto& t : callers) t.join();
  if (!stopped.empty()) return json{{"stopped", stopped}};
  if (!failure.empty()) return failed_precondition(failure);
  json stored = {{"chunk", chunk}, {"answers", answers}, {"storedAt", core_.now_rfc3339()}};
  TRAINER_RETURN_IF_ERROR(core_.store->put_distillation_chunk(id, stored).status());
  core_.notify();
  return stored;
}

Result<json> Distillations::run_smoke(const json& doc) {
  const std::string id = doc["distillationId"].get<std::string>();
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> rows, load_rows(core_, doc));
  const std::vector<json> decisions = decisions_of(rows);
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> chunks, core_.store->list_distillation_chunks(id));
  json smoke;
  for (const json& c : chunks) {
    if (c.value("chunk", int64_t{-1}) == 0) smoke = c;
  }
  if (smoke.is_null()) {
    TRAINER_ASSIGN_OR_RETURN(smoke, answer_chunk(doc, rows, decisions, 0));
    if (smoke.contains("stopped")) return smoke;
  }
  const json answers = smoke.value("answers", json::array());
  int64_t rejected = 0;
  std::string which;
  for (const json& a : answers) {
    if (a.value("accepted", false)) continue;
    ++rejected;
    if (rejected <= 5)
      which += (which.empty() ? "" : "; ") + at_of(a) + " (" + a.value("reason", std::string()) + ")";
  }
  const bool listed = doc.value("smoke", json()).is_array();
  const int64_t allowed = listed ? 0 : 1;
  const json result = {{"decisions", static_cast<int64_t>(answers.size())},
                       {"accepted", static_cast<int64_t>(answers.size()) - rejected},
                       {"rejected", rejected},
                       {"passed", rejected <= allowed}};
  if (rejected > allowed) {
    return failed_precondition(
        "the smoke pass failed: " + std::to_string(rejected) + " of " + std::to_string(answers.size()) +
        " smoke decisions were rejected (" +
        (listed ? std::string("every listed one must be accepted") : "at most 1 may be") + "): " + which +
        (rejected > 5 ? "; ..." : "") + "; nothing was registered");
  }
  return json{{"smoke", result}};
}

Result<json> Distillations::run_rest(const json& doc) {
  const std::string id = doc["distillationId"].get<std::string>();
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> rows, load_rows(core_, doc));
  const std::vector<json> decisions = decisions_of(rows);
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> chunks, core_.store->list_distillation_chunks(id));
  std::set<int64_t> stored;
  for (const json& c : chunks) stored.insert(c.value("chunk", int64_t{-1}));
  const int64_t total = doc.value("chunks", int64_t{1});
  for (int64_t k = 1; k < total; ++k) {
    if (stored.count(k) != 0) continue;
    // A pause or a cancel takes effect between chunks.
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> now, core_.store->get_distillation(id));
    const std::string phase = now ? now->value("phase", std::string()) : std::string(kCancelled);
    if (phase == kPaused || phase == kCancelled) return json{{"stopped", phase}};
    if (core_.kernel->work_stopping()) return failed_precondition("trainerd is stopping");
    TRAINER_ASSIGN_OR_RETURN(json chunk, answer_chunk(doc, rows, decisions, k));
    if (chunk.contains("stopped")) return chunk;
  }
  return json{{"answered", true}};
}

Result<json> Distillations::assemble(const json& doc) {
  const std::string id = doc["distillationId"].get<std::string>();
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> rows, load_rows(core_, doc));
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> chunks, core_.store->list_distillation_chunks(id));
  std::map<std::pair<int64_t, int64_t>, json> answers;
  int64_t accepted = 0;
  for (const json& c : chunks) {
    for (const json& a : c.value("answers", json::array())) {
      answers[{a.value("row", int64_t{-1}), a.value("message", int64_t{-1})}] = a;
      if (a.value("accepted", false)) ++accepted;
    }
  }
  if (accepted == 0) {
    return failed_precondition("the teacher's answers were all rejected (" + std::to_string(answers.size()) +
                               " decisions; `trainer distillations rejections " + id +
                               "` lists why); nothing was registered");
  }
  // Each row up to its first rejected decision, the teacher's answers in place of the source's
  // turns; it also ends at an answer whose tool calls are not the source turn's (the tool messages
  // after it answered other calls).
  std::string text;
  int64_t kept_rows = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    json row = rows[r];
    const json& source = rows[r]["messages"];
    json messages = json::array();
    size_t keep = 0;  // messages kept: up to the last accepted decision
    for (size_t m = 0; m < source.size(); ++m) {
      if (source[m].value("role", std::string()) != "assistant") {
        messages.push_back(source[m]);
        continue;
      }
      auto it = answers.find({static_cast<int64_t>(r), static_cast<int64_t>(m)});
      if (it == answers.end() || !it->second.value("accepted", false)) break;
      json answer = it->second["answer"];
      json theirs = source[m].value("tool_calls", json::array());
      json ours = answer.value("tool_calls", json::array());
      if (!theirs.is_array()) theirs = json::array();
      if (!ours.is_array()) ours = json::array();
      bool same_calls = ours.size() == theirs.size();
      for (size_t i = 0; same_calls && i < ours.size(); ++i) {
        const json& f = theirs[i].contains("function") ? theirs[i]["function"] : theirs[i];
        same_calls = f.value("name", std::string()) == ours[i]["function"].value("name", std::string());
        if (same_calls && theirs[i].value("id", json()).is_string())
          answer["tool_calls"][i]["id"] = theirs[i]["id"];
      }
      messages.push_back(std::move(answer));
      keep = messages.size();
      if (!same_calls) break;
    }
    if (keep == 0) continue;
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(keep), messages.end());
    row["messages"] = std::move(messages);
    text += row.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    ++kept_rows;
  }
  if (kept_rows == 0) {
    return failed_precondition(
        "no row kept an accepted answer (each row's first decision was rejected); "
        "nothing was registered");
  }
  TRAINER_ASSIGN_OR_RETURN(auto registered, datasets_.register_rows(doc["to"].get<std::string>(), text));
  json dataset = {{"name", doc["to"]},
                  {"hash", registered.first.value("hash", std::string())},
                  {"rows", registered.first.value("rows", int64_t{0})}};
  if (registered.first.contains("movedFrom")) dataset["movedFrom"] = registered.first["movedFrom"];
  return json{{"dataset", dataset}};
}

Status Distillations::step_task(tasks::Step& step) {
  const std::string id = step.task().id;
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> stored, core_.store->get_distillation(id));
  if (!stored) return internal_error("distillation " + id + " has a task but no document");
  json doc = std::move(*stored);
  const std::string phase = doc.value("phase", std::string());
  if (phase == kPaused || ended(phase)) return Status::ok();  // a resume or nothing moves it
  const std::string t = core_.now_rfc3339();
  auto enter = [&](const char* to) -> Status {
    doc["phase"] = to;
    if (ended(to)) doc["endedAt"] = t;
    TRAINER_RETURN_IF_ERROR(core_.store->put_distillation(doc));
    core_.notify();
    return core_.kernel->move(kKind, id, to);
  };
  auto launch = [&]() -> Status {
    const std::string now = doc.value("phase", std::string());
    if (now == kSmoke) {
      step.launch([this, doc]() { return run_smoke(doc); });
    } else if (now == kDistilling) {
      step.launch([this, doc]() { return run_rest(doc); });
    } else if (now == kAssembling) {
      step.launch([this, doc]() { return assemble(doc); });
    }
    return Status::ok();
  };
  if (auto outcome = step.take_outcome()) {
    if (!outcome->is_ok()) {
      doc["failureReason"] = outcome->status().message();
      return enter(kFailed);
    }
    const json v = **outcome;
    if (!v.contains("stopped")) {  // the phase's work is done: the next phase's starts
      if (phase == kSmoke) {
        doc["smokeResult"] = v["smoke"];
        TRAINER_RETURN_IF_ERROR(enter(kDistilling));
        return launch();
      }
      if (phase == kDistilling) {
        TRAINER_RETURN_IF_ERROR(enter(kAssembling));
        return launch();
      }
      if (phase == kAssembling) {
        doc["result"] = v;
        return enter(kCompleted);
      }
    }
    // Stopped for a pause that was resumed meanwhile: the work starts again below.
  }
  if (step.working()) return Status::ok();
  // Not started yet, resumed, or started by a trainerd that stopped: the work resumes where it was.
  doc["attempt"] = doc.value("attempt", 0) + 1;
  if (doc["startedAt"].is_null()) doc["startedAt"] = t;
  if (phase == kPending) {
    TRAINER_RETURN_IF_ERROR(enter(kSmoke));
    return launch();
  }
  TRAINER_RETURN_IF_ERROR(core_.store->put_distillation(doc));
  return launch();
}

}  // namespace trainer::service

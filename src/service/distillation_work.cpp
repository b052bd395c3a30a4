// Distillations (distillations.h): the work off the driver (answer a chunk, the smoke pass, the rest,
// assemble) and the kernel's step that moves a distillation from phase to phase.
#include "service/distillations.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "service/distillation_chunks.h"
#include "service/teacher.h"
#include "service/util.h"

namespace trainer::service {

using namespace distillation;

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

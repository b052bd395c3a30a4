// The peer engines' worker bridge (peer_worker.h).
#include "job/peer_worker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "common/subprocess.h"
#include "engine/data/dataset.h"
#include "engine/rl/graders/scorer.h"
#include "protocol/job_protocol.h"

namespace trainer::job {
namespace {

using Clock = std::chrono::steady_clock;

// How long the worker may stay silent (no event) before it counts as hung.
Result<std::chrono::seconds> silence_limit(const std::string& variable) {
  const std::string text = env_or(variable.c_str(), "600");
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < 1) {
    return invalid_argument(variable + " must be a whole number of seconds above 0, got '" + text + "'");
  }
  return std::chrono::seconds(v);
}

std::string describe_exit(int code) {
  if (code > 128) return "was killed by signal " + std::to_string(code - 128);
  return "exited with status " + std::to_string(code);
}

// What the worker's events say so far about how the run ends.
struct Outcome {
  engine::TrainResult result;
  std::optional<std::string> failed;  // the worker's own failed event
  bool ended = false;                 // completed, paused, cancelled or failed seen
};

// One event line of the worker: relayed, or taken as the end. An error for a line that is not a
// job-protocol event.
Status take_line(const std::string& line, const engine::EventSink& events, Outcome& out) {
  auto decoded = protocol::decode_event(line);
  if (!decoded.is_ok()) return decoded.status();
  if (!decoded->has_value()) return invalid_argument("not an event type of the job protocol");
  const protocol::Event& ev = **decoded;
  if (out.ended) return invalid_argument("an event after the worker's last one");
  if (const auto* step = std::get_if<protocol::Step>(&ev)) {
    out.result.steps = step->step;
    out.result.final_loss = step->loss;
  } else if (const auto* c = std::get_if<protocol::Completed>(&ev)) {
    out.result.adapter_dir = c->adapter_dir;
    out.result.steps = c->steps;
    out.ended = true;
  } else if (const auto* p = std::get_if<protocol::Paused>(&ev)) {
    out.result.paused = true;
    out.result.steps = p->step;
    out.ended = true;
    return Status::ok();  // trainer-job reports the pause once the snapshot is committed
  } else if (const auto* c = std::get_if<protocol::Cancelled>(&ev)) {
    out.result.cancelled = true;
    if (c->steps) out.result.steps = *c->steps;
    out.ended = true;
    return Status::ok();
  } else if (const auto* f = std::get_if<protocol::Failed>(&ev)) {
    out.failed = f->reason;
    out.ended = true;
    return Status::ok();
  } else if (std::holds_alternative<protocol::Hello>(ev) || std::holds_alternative<protocol::Heartbeat>(ev)) {
    return Status::ok();  // trainer-job writes its own
  } else if (const auto* phase = std::get_if<protocol::Phase>(&ev); phase && phase->total_steps) {
    out.result.total_steps = *phase->total_steps;
  }
  events(ev);
  return Status::ok();
}

// The job's side of the worker's reward_request (engines/trl/grpo.py, engines/verl's reward relay): the plan's reward terms
// scored by the job's own graders, exactly as for a native run. The reply goes to the worker's
// stdin: {"type":"rewards","id":N,"scores":[...]} or, when the term cannot score, "error".
class RewardDesk {
 public:
  static Result<std::unique_ptr<RewardDesk>> open(const plan::Plan& plan) {
    auto desk = std::make_unique<RewardDesk>();
    if (!plan.config.is_rl()) return desk;
    engine::rl::GraderContext ctx;
    if (const char* py = std::getenv("TRAINER_REWARD_PYTHON"); py != nullptr && *py != '\0') ctx.python = py;
    ctx.data_source = std::filesystem::path(plan.config.dataset).filename().string();
    auto scorer = engine::rl::Scorer::create(plan.config.rewardTerms, ctx);
    if (!scorer.is_ok()) return scorer.status();
    desk->scorer_ = std::move(*scorer);
    return desk;
  }
  // The reply to `request`; an error only for a request that is malformed.
  Result<nlohmann::json> answer(const nlohmann::json& request) {
    if (!request.contains("id") || !request["id"].is_number_integer() || !request.contains("term") ||
        !request["term"].is_number_integer() || !request.contains("items") || !request["items"].is_array()) {
      return invalid_argument("reward_request: needs an integer id and term and an items array");
    }
    nlohmann::json reply = {{"type", "rewards"}, {"id", request["id"]}};
    const int64_t term = request["term"].get<int64_t>();
    if (!scorer_ || term < 0 || static_cast<size_t>(term) >= scorer_->size()) {
      return invalid_argument("reward_request: term " + std::to_string(term) + " is not a reward term of the plan");
    }
    std::vector<engine::rl::GradeItem> items;
    for (const auto& it : request["items"]) {
      if (!it.is_object()) return invalid_argument("reward_request: an item is not an object");
      items.push_back({.input = it.value("input", std::string()),
                       .output = it.value("output", std::string()),
                       .expected = it.value("expected", std::string()),
                       .row = it.value("row", int64_t{0})});
    }
    auto scores = scorer_->score(static_cast<size_t>(term), items);
    if (!scores.is_ok()) {
      reply["error"] = scores.status().message();
    } else {
      // The scores, and what the native engine's step counts of them: each completion's failure
      // cause ("" for a score) and call seconds, and the batch's judge tokens.
      nlohmann::json causes = nlohmann::json::array();
      for (engine::rl::FailureCause c : scores->failures) causes.push_back(engine::rl::failure_cause_name(c));
      reply["scores"] = scores->raw;
      reply["failures"] = causes;
      reply["callSeconds"] = scores->call_seconds;
      reply["inputTokens"] = scores->input_tokens;
      reply["outputTokens"] = scores->output_tokens;
    }
    return reply;
  }

 private:
  std::unique_ptr<engine::rl::Scorer> scorer_;
};

// The worker's reward_request in `line`, or nullopt for any other line.
std::optional<nlohmann::json> reward_request_of(const std::string& line) {
  if (line.find("\"reward_request\"") == std::string::npos) return std::nullopt;
  auto doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || doc.value("type", std::string()) != "reward_request") return std::nullopt;
  return doc;
}

}  // namespace

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

Result<size_t> count_rows(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalid_argument(path + ": cannot read the dataset");
  size_t rows = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) ++rows;
  }
  return rows;
}

size_t rows_per_step(const plan::RunConfig& config) {
  return config.is_rl() ? static_cast<size_t>(config.rl.promptsPerStep)
                        : static_cast<size_t>(config.training.batchSize) *
                              static_cast<size_t>(std::max(1, config.training.gradientAccumulation));
}

std::vector<size_t> native_row_order(const plan::RunConfig& config, size_t rows, int64_t total_steps) {
  std::vector<size_t> order;
  if (rows == 0) return order;
  const size_t per_step = rows_per_step(config);
  const size_t needed = static_cast<size_t>(std::max<int64_t>(total_steps, 0)) * per_step;
  for (int64_t epoch = 0; order.size() < needed || epoch == 0; ++epoch) {
    const auto one = engine::data::shuffled_order(rows, config.training.seed, epoch);
    order.insert(order.end(), one.begin(), one.end());
  }
  return order;
}

nlohmann::json worker_input(const plan::Plan& plan, const std::string& settings_sha, const std::vector<size_t>& order,
                            size_t rows, int64_t total_steps, const std::string& output_dir) {
  return {{"plan", plan::to_json(plan)}, {"settingsSha", settings_sha}, {"order", order},
          {"rows", rows},                {"totalSteps", total_steps},    {"outputDir", output_dir}};
}

Result<engine::TrainResult> run_peer_worker(const PeerWorker& worker, const engine::TrainRequest& request,
                                            int64_t total_steps, const engine::EventSink& events) {
  const std::string prefix = "engine " + worker.engine + ": ";
  auto silence = silence_limit(worker.silence_variable);
  if (!silence.is_ok()) return silence.status();
  auto rewards = RewardDesk::open(request.plan);
  if (!rewards.is_ok()) return rewards.status();
  Subprocess proc;
  if (Status st = proc.start(worker.command, {{"PYTHONUNBUFFERED", "1"}, {"PYTHONDONTWRITEBYTECODE", "1"}});
      !st.is_ok()) {
    return unavailable(prefix + "the worker did not start (" + st.message() + "); " + worker.start_hint);
  }
  std::string shown;
  for (const std::string& arg : worker.command) shown += (shown.empty() ? "" : " ") + arg;
  std::fprintf(stderr, "trainer-job run: engine %s: worker %d (%s)\n", worker.engine.c_str(),
               static_cast<int>(proc.pid()), shown.c_str());

  Outcome out;
  out.result.total_steps = total_steps;
  bool pause_sent = false, stop_sent = false;
  auto last_event = Clock::now();
  for (;;) {
    // Forward a pause or a stop at once; the worker acts on it at its next step boundary.
    if (!pause_sent && request.pause != nullptr && request.pause->load()) {
      if (!worker.can_pause) {
        proc.kill();
        return failed_precondition(prefix + "asked to pause, but engine " + worker.engine + " cannot pause: " +
                                   worker.cannot_pause);
      }
      pause_sent = proc.write_line(R"({"type":"pause"})").is_ok();
    }
    if (!stop_sent && request.stop != nullptr && request.stop->load()) {
      stop_sent = proc.write_line(R"({"type":"stop"})").is_ok();
    }
    std::string line;
    const auto result = proc.read_line(Clock::now() + std::chrono::milliseconds(250), &line);
    if (result == Subprocess::ReadResult::kTimeout) {
      if (Clock::now() - last_event > *silence) {
        proc.kill();
        return unavailable(prefix + "the worker sent no event for " + std::to_string(silence->count()) + " s (" +
                           worker.silence_variable + "): hung; it was killed");
      }
      continue;
    }
    if (result == Subprocess::ReadResult::kClosed) break;
    last_event = Clock::now();
    // Not an event: the worker asks for rewards and waits for the reply on its stdin.
    if (auto asked = reward_request_of(line)) {
      auto reply = (*rewards)->answer(*asked);
      if (!reply.is_ok() || !proc.write_line(reply->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)).is_ok()) {
        proc.kill();
        return invalid_argument(prefix + (reply.is_ok() ? std::string("the worker stopped reading its rewards")
                                                        : reply.status().message()));
      }
      last_event = Clock::now();
      continue;
    }
    if (Status st = take_line(line, events, out); !st.is_ok()) {
      proc.kill();
      return invalid_argument(prefix + "the worker wrote a line that is not a job-protocol event (" + st.message() +
                              "): " + line.substr(0, 200));
    }
  }
  const int code = proc.wait_exit(std::chrono::seconds(30));
  if (out.failed) return internal_error(prefix + *out.failed);
  if (!out.ended) {
    return unavailable(prefix + "the worker " + describe_exit(code) + " before the run ended (after step " +
                       std::to_string(out.result.steps) + "); its log is the job's stderr");
  }
  if (code != 0) return unavailable(prefix + "the worker " + describe_exit(code) + " after its last event");
  if (out.result.paused) out.result.paused_by_plan = !pause_sent && request.plan.pauseAtStep == out.result.steps;
  return out.result;
}

}  // namespace trainer::job

// rule: and bundle: terms (declared in graders/grader.h): the user's scoring function
// (compute_score() unless the kind names another, plan::scoring_function) in one
// persistent Python worker per term (reward_worker.py, built into the binary), spoken to in JSON
// lines. A call that hangs past the term's timeout kills the worker, which is started again for
// the items left; so does a worker that exits. The worker runs confined (common/confinement.h):
// it sees the interpreter's install and the term's own file or package folder, read-only, and a
// scratch folder; no store, no environment of the job's; no network unless the term declares it
// (config.reward.terms[].network: then the host's, docs/security.md "User code").
#include <chrono>
#include <filesystem>

#include "common/confinement.h"
#include "common/json_parse.h"
#include "common/subprocess.h"
#include "engine/rl/graders/grader.h"
#include "engine/rl/graders/reward_worker_source.h"

namespace trainer::engine::rl {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// How long a worker may take to import the user's module before it is given up on.
constexpr double kLoadSeconds = 60;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The interpreter `python` names, as the confinement runs it: Python's own sys.executable (a
// launcher such as pyenv's shim is a shell script that cannot run inside), with its install.
Result<ConfinedExecutable> interpreter_path(const std::string& python) {
  SpawnOptions options;
  options.argv = {python, "-c", "import sys; print(sys.executable)"};
  options.search_path = true;
  CaptureOptions capture;
  capture.timeout = std::chrono::seconds(60);
  auto run = run_captured(options, capture);
  std::string path = run.is_ok() && run->exit_code == 0 ? run->out : "";
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  if (path.empty()) {
    return Status(StatusCode::kFailedPrecondition,
                  "the reward worker could not start (" + python +
                      " did not run as a Python 3 interpreter); set TRAINER_REWARD_PYTHON to a Python 3 interpreter");
  }
  return confined_executable(path);
}

class RuleGrader final : public Grader {
 public:
  RuleGrader(std::string at, std::string kind, std::vector<std::string> argv, std::string function, double timeout,
             std::string data_source, std::string scratch)
      : at_(std::move(at)),
        kind_(std::move(kind)),
        argv_(std::move(argv)),
        function_(std::move(function)),
        timeout_(timeout),
        data_source_(std::move(data_source)),
        scratch_(std::move(scratch)) {}
  ~RuleGrader() override {
    worker_.kill();
    if (!scratch_.empty()) remove_scratch(scratch_);
  }

  Status start() {
    if (worker_.running()) return Status::ok();
    Status st = worker_.start(argv_, {{"PYTHONDONTWRITEBYTECODE", "1"}, {"PYTHONUNBUFFERED", "1"}});
    if (!st.is_ok()) return refused("the reward worker could not start (" + st.message() + "); set TRAINER_REWARD_PYTHON to a Python 3 interpreter");
    std::string line;
    switch (worker_.read_line(after(kLoadSeconds), &line)) {
      case Subprocess::ReadResult::kTimeout:
        worker_.kill();
        return refused("the module did not load within " + std::to_string(static_cast<int>(kLoadSeconds)) + " s");
      case Subprocess::ReadResult::kClosed:
        worker_.kill();
        return refused("the reward worker exited while loading the module (is " + argv_[0] +
                       " a Python 3 interpreter? set TRAINER_REWARD_PYTHON); see the job's log");
      case Subprocess::ReadResult::kLine:
        break;
    }
    auto hello = parse_json(line, "the reward worker's first line");
    if (hello.is_ok() && hello->is_object() && hello->value("ready", false)) return Status::ok();
    worker_.kill();
    if (hello.is_ok() && hello->is_object() && hello->contains("loadError")) {
      return refused("the module could not be loaded: " + (*hello)["loadError"].get<std::string>());
    }
    return refused("the reward worker answered " + line.substr(0, 200) + " instead of {\"ready\": true}");
  }

  Result<std::vector<Verdict>> grade(const std::vector<GradeItem>& items) override {
    std::vector<Verdict> out(items.size());
    size_t next = 0;
    while (next < items.size()) {
      TRAINER_RETURN_IF_ERROR(start());
      json request = {{"items", json::array()}};
      for (size_t i = next; i < items.size(); ++i) {
        request["items"].push_back({{"data_source", data_source_},
                                    {"solution_str", items[i].output},
                                    {"ground_truth", items[i].expected},
                                    {"extra_info", {{"row", items[i].row}, {"prompt", items[i].input}}}});
      }
      if (!worker_.write_line(request.dump(-1, ' ', false, json::error_handler_t::replace)).is_ok()) {
        worker_.kill();  // it died between batches: start it again and resend
        TRAINER_RETURN_IF_ERROR(start());
        TRAINER_RETURN_IF_ERROR(worker_.write_line(request.dump(-1, ' ', false, json::error_handler_t::replace)));
      }
      for (size_t i = next; i < items.size(); ++i) {
        const auto t0 = Clock::now();
        std::string line;
        const Subprocess::ReadResult got = worker_.read_line(after(timeout_), &line);
        Verdict& v = out[i];
        next = i + 1;
        if (got == Subprocess::ReadResult::kLine) {
          v = read_answer(line);
          v.seconds = seconds_between(t0, Clock::now());
          continue;
        }
        v.failure = got == Subprocess::ReadResult::kTimeout ? FailureCause::kTimeout : FailureCause::kUnreachable;
        v.detail = got == Subprocess::ReadResult::kTimeout
                       ? function_ + " did not return within " + json(timeout_).dump() + " s; the worker was restarted"
                       : "the reward worker exited (see the job's log); it was restarted";
        worker_.kill();
        v.seconds = seconds_between(t0, Clock::now());
        break;  // the rest go to a new worker
      }
    }
    return out;
  }

 private:
  Status refused(const std::string& why) const {
    return Status(StatusCode::kFailedPrecondition, at_ + ".kind: " + kind_ + ": " + why);
  }

  // One answer line of the worker (reward_worker.py's protocol).
  Verdict read_answer(const std::string& line) const {
    Verdict v;
    auto a = parse_json(line, "the reward worker's answer");
    if (!a.is_ok() || !a->is_object()) {
      v.failure = FailureCause::kUnreachable;
      v.detail = "the reward worker wrote " + line.substr(0, 200);
      return v;
    }
    if (auto s = a->find("score"); s != a->end() && s->is_number()) {
      const double x = s->get<double>();
      if (x >= 0.0 && x <= 1.0) {
        v.score = x;
        return v;
      }
      v.failure = FailureCause::kNoVerdict;
      v.detail = function_ + " returned " + s->dump() + ", outside [0, 1]";
      return v;
    }
    v.failure = FailureCause::kNoVerdict;
    if (auto e = a->find("error"); e != a->end() && e->is_string()) {
      v.detail = function_ + " raised " + e->get<std::string>();
    } else if (auto r = a->find("answer"); r != a->end() && r->is_string()) {
      v.detail = function_ + " returned " + r->get<std::string>() + ", not a number or a dict with a score";
    } else {
      v.detail = "the reward worker wrote " + line.substr(0, 200);
    }
    return v;
  }

  const std::string at_, kind_;
  const std::vector<std::string> argv_;
  const std::string function_;  // the user's function ("compute_score" unless the kind names another)
  const double timeout_;        // seconds one call of it may take
  const std::string data_source_;
  const std::string scratch_;  // the confined worker's scratch folder ("" unconfined)
  Subprocess worker_;  // the worker; restarted after a timeout or an exit
};

}  // namespace

Result<std::unique_ptr<Grader>> make_rule_grader(const plan::RewardTermSpec& term, const std::string& at,
                                                 const GraderContext& ctx) {
  const plan::ScoringFunction f = *plan::scoring_function(term.kind);
  const std::string path = std::filesystem::absolute(f.path).lexically_normal().string();
  const std::string target = f.module.empty() ? path : path + "#" + f.module;
  const auto refused = [&](const std::string& why) {
    return Status(StatusCode::kFailedPrecondition, at + ".kind: " + term.kind + ": " + why);
  };
  auto mode = user_code_confinement();
  if (!mode.is_ok()) return refused(mode.status().message());
  std::vector<std::string> argv = {ctx.python, "-c", kRewardWorkerSource, target, f.function};
  std::string scratch;
  if (*mode == ConfinementMode::kBubblewrap) {
    auto python = interpreter_path(ctx.python);
    if (!python.is_ok()) return refused(python.status().message());
    Confinement c;
    c.read_only = python->mounts;
    c.read_only.push_back(path);  // the rule file, or the bundle's package folder
    c.env = {{"PYTHONDONTWRITEBYTECODE", "1"}, {"PYTHONUNBUFFERED", "1"}};
    c.network = !term.networkAllow.empty();  // declared (config.reward.terms[].network), allowed at submission
    auto made = make_scratch(std::filesystem::temp_directory_path().string());
    if (!made.is_ok()) return refused(made.status().message());
    scratch = c.scratch = *made;
    argv.erase(argv.begin());
    argv.insert(argv.begin(), python->argv.begin(), python->argv.end());
    auto confined = confined_argv(c, argv);
    if (!confined.is_ok()) {
      remove_scratch(scratch);
      return refused(confined.status().message());
    }
    argv = std::move(*confined);
  }
  auto g = std::make_unique<RuleGrader>(at, term.kind, std::move(argv), f.function, term.timeoutSeconds, ctx.data_source,
                                        std::move(scratch));
  TRAINER_RETURN_IF_ERROR(g->start());  // a module that does not load stops the job before its first step
  return std::unique_ptr<Grader>(std::move(g));
}

}  // namespace trainer::engine::rl

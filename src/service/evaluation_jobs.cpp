// The processes of evaluations (declared in evaluation_jobs.h).
#include "service/evaluation_jobs.h"

#include <chrono>

#include "common/json_parse.h"
#include "common/subprocess.h"
#include "service/util.h"

namespace trainer::service {

EvaluationJobs::EvaluationJobs(std::string job_binary, Progress progress, Done done)
    : job_binary_(std::move(job_binary)), progress_(std::move(progress)), done_(std::move(done)) {}

EvaluationJobs::~EvaluationJobs() { stop_all(); }

void EvaluationJobs::reap_finished_locked() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second->finished) {
      if (it->second->thread.joinable()) it->second->thread.join();
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

void EvaluationJobs::start(const Launch& launch) {
  std::lock_guard<std::mutex> lock(mu_);
  reap_finished_locked();
  if (jobs_.count(launch.id)) return;
  auto job = std::make_unique<Job>();
  Job* raw = job.get();
  jobs_[launch.id] = std::move(job);
  raw->thread = std::thread([this, launch, raw] { run(launch, raw); });
}

bool EvaluationJobs::running(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  return it != jobs_.end() && !it->second->finished;
}

bool EvaluationJobs::cancel(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second->finished) return false;
  it->second->cancel = true;
  return true;
}

void EvaluationJobs::stop_all() {
  std::map<std::string, std::unique_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs.swap(jobs_);
  }
  for (auto& [id, job] : jobs) {
    job->quiet = true;
    job->cancel = true;
  }
  for (auto& [id, job] : jobs) {
    if (job->thread.joinable()) job->thread.join();
  }
}

void EvaluationJobs::run(const Launch& launch, Job* job) {
  Ending ending;
  Subprocess proc;
  Status st = proc.start({job_binary_, "evaluate", "--spec", launch.spec_path, "--output", launch.output_dir, "--log",
                          launch.log_path},
                         launch.env);
  if (!st.is_ok()) {
    ending.failure = "the evaluation job did not start: " + st.message();
  } else {
    std::string line;
    for (;;) {
      if (job->cancel) {
        proc.kill();
        ending.cancelled = true;
        break;
      }
      auto r = proc.read_line(std::chrono::steady_clock::now() + std::chrono::milliseconds(200), &line);
      if (r == Subprocess::ReadResult::kTimeout) continue;
      if (r == Subprocess::ReadResult::kClosed) break;
      auto doc = parse_json(line, "evaluation job output");
      if (!doc.is_ok() || !doc->is_object()) continue;
      if (doc->contains("progress")) {
        const nlohmann::json& p = (*doc)["progress"];
        if (progress_) progress_(launch.id, p.value("done", int64_t{0}), p.value("total", int64_t{0}));
      } else if (doc->contains("report")) {
        ending.report = (*doc)["report"];
        ending.completed = true;
      }
    }
    proc.kill();  // reaps it (it has exited, or was just killed)
    if (!ending.completed && !ending.cancelled) {
      std::string last = last_lines(launch.log_path, 3);
      ending.failure = last.empty() ? "the evaluation job ended without a report" : last;
    }
  }
  if (!job->quiet && done_) done_(launch.id, ending);
  job->finished = true;
}

}  // namespace trainer::service

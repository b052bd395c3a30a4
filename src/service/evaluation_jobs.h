// The processes of evaluations: `trainer-job evaluate --spec FILE --output DIR --log FILE` run as
// children of trainerd, one thread each, their progress read from the job's standard output
// (JSON lines: {"progress": {"done", "total"}} per batch, then {"report": {...}}).
//
// Thread safety: every method may be called from any thread; the callbacks are called from the
// evaluation's own thread, never with this class's lock held.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::service {

class EvaluationJobs {
 public:
  struct Launch {
    std::string id;           // the evaluation's id
    std::string spec_path;    // written already
    std::string output_dir;   // the job's --output
    std::string log_path;     // its standard error
    std::vector<std::pair<std::string, std::string>> env = {};  // added to its environment
  };
  // How one ended: its report (completed), why it failed, or that it was cancelled.
  struct Ending {
    bool completed = false;
    bool cancelled = false;
    nlohmann::json report;   // completed
    std::string failure;     // neither: the job's last words
  };
  using Progress = std::function<void(const std::string& id, int64_t done, int64_t total)>;
  using Done = std::function<void(const std::string& id, const Ending& ending)>;

  EvaluationJobs(std::string job_binary, Progress progress, Done done);
  ~EvaluationJobs();  // stop_all()

  // Starts the job; a job of the same id already running is left as it is.
  void start(const Launch& launch);
  // Whether the job of `id` runs (it has called `done` before this turns false).
  bool running(const std::string& id);
  // Kills the job of `id` (its `done` reports cancelled); false when none runs.
  bool cancel(const std::string& id);
  // Kills every job without reporting them (trainerd stopping: they start again with it).
  void stop_all();

 private:
  struct Job {
    std::thread thread;
    std::atomic<bool> cancel{false};
    std::atomic<bool> quiet{false};  // stop_all: end without calling done
    std::atomic<bool> finished{false};
  };
  void run(const Launch& launch, Job* job);
  void reap_finished_locked();

  const std::string job_binary_;
  const Progress progress_;
  const Done done_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;  // guarded by mu_
};

}  // namespace trainer::service

// A training attempt's TensorBoard event file (docs/tensorboard.md): the job's events turned
// into scalars (every step's loss, learning rate, gradient norm, throughput; validation loss;
// for GRPO/GSPO every figure of the step's `rl` object and each reward term), text summaries of
// a few rollouts per step, and the resolved plan as hyperparameters. Written locally as the
// events come, and copied to the run's artifacts (a folder or S3) every few seconds and when the
// attempt ends, under runs/RUN/tensorboard/, where trainerd serves it.
//
// One file per attempt: a resumed attempt writes a new one, its steps continuing the run's.
// Failures to write or publish degrade to a warning on stderr (counted in publish_failures());
// training goes on. Not thread-safe: the engine's event callback drives it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "job/tensorboard/event_file.h"
#include "protocol/job_protocol.h"
#include "protocol/snapshot.h"
#include "storage/storage.h"

namespace trainer::job::tensorboard {

struct RunBoardOptions {
  std::string local_dir;                            // the folder the event file is written in
  std::string host;                                 // this host's name, part of the file name
  int64_t pid = 0;                                  // this process, part of the file name
  std::string run_id;                               // names the hparams session group
  storage::Storage* artifacts = nullptr;            // where copies go; null: the local file only
  std::chrono::seconds publish_every{3};            // least time between two copies while training
  int rollouts_per_step = 4;                        // rollouts shown as text per RL step
  std::shared_ptr<Clock> clock = system_clock();    // wall time of the events, publication timing
};

class RunBoard {
 public:
  // Creates the event file (events.out.tfevents.TIME.HOST.PID) in options.local_dir.
  static Result<std::unique_ptr<RunBoard>> open(RunBoardOptions options);
  ~RunBoard();  // publishes what is not yet copied (best effort)
  RunBoard(const RunBoard&) = delete;
  RunBoard& operator=(const RunBoard&) = delete;

  // Records what `event` carries; copies the file when publish_every has passed since the last
  // copy, and at once on the attempt's last event.
  void on_event(const protocol::Event& event);
  // Copies the file to the artifacts now (no-op without artifacts).
  Status publish();

  const std::string& file_name() const { return file_->name(); }
  const std::string& file_path() const { return file_->path(); }
  // The storage key of the copy (protocol::tensorboard_key_prefix(run) + "/" + file_name()).
  std::string key() const;
  int64_t publish_failures() const { return publish_failures_; }

 private:
  RunBoard(RunBoardOptions options, std::unique_ptr<EventFile> file);
  void append(const std::string& event);
  void on_step(const protocol::Step& step);

  const RunBoardOptions options_;
  std::unique_ptr<EventFile> file_;
  bool started_ = false;  // the session-start event is written (before the first step)
  bool dirty_ = false;    // written since the last copy
  std::optional<std::chrono::steady_clock::time_point> last_publish_;
  int64_t publish_failures_ = 0;
  bool warned_write_ = false;
};

}  // namespace trainer::job::tensorboard

// Writing job-protocol events (JSON lines, protocol/job_protocol.h) and printing human progress
// from them.
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "job/report_sender.h"
#include "protocol/job_protocol.h"
#include "protocol/job_request.h"

namespace trainer::job {

// One event per line to a file or stdout, flushed after each line, each event numbered 1, 2, ...
// (line N of the file is event N). With post_to(), every event is also posted to trainerd
// (report_sender.h), those written before included. Thread-safe.
class EventWriter {
 public:
  EventWriter() = default;
  ~EventWriter();  // flushes the posted events, waiting at most kFlushWait
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // How long the writer's end waits for trainerd to take the events still queued.
  static constexpr std::chrono::seconds kFlushWait{30};

  // `path` empty: stdout.
  Status open(const std::string& path);
  void write(const protocol::Event& event);
  // Writes a `heartbeat` carrying the last step written, unless an event that ends the attempt
  // (protocol::ends_attempt) was written already: nothing follows the attempt's last event.
  void heartbeat(double uptime_seconds);
  // Posts the events to `target` from now on: those written so far first.
  void post_to(const ReportTarget& target, SenderOptions options = {});
  // Waits up to `wait` for the posted events to be delivered; true when they were (or none are posted).
  bool flush(std::chrono::milliseconds wait);

 private:
  // Events kept until post_to() decides (the first few: `hello`, an early failure).
  static constexpr size_t kKeptBeforePosting = 64;

  std::mutex mu_;
  FILE* out_ = nullptr;  // guarded by mu_
  bool owned_ = false;
  int64_t seq_ = 0;                                     // guarded by mu_: the last event's number
  std::optional<int64_t> last_step_;                    // guarded by mu_: the last `step` event's step
  bool ended_ = false;                                  // guarded by mu_: the attempt's last event is written
  std::vector<std::pair<int64_t, std::string>> kept_;   // guarded by mu_: before post_to()
  std::unique_ptr<ReportSender> sender_;                // guarded by mu_
};

// When trainerd's request names its URL and the attempt's identity (protocol/job_request.h), the
// attempt reports to it over its API (docs/job-protocol.md, "Reporting to trainerd"): `writer`'s
// events, those written so far first, and the job's log (stderr) while the returned object lives.
// Null (the files only) otherwise.
std::unique_ptr<PostedLog> report_to_trainerd(EventWriter& writer, const protocol::JobRequest& request);

// Human progress on stderr: phases, data fit, and for each step "step 12/100 loss 1.234
// lr 1.0e-04 3,456 tok/s ETA 1m02s"; validation losses; the adapter's folder at the end.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(FILE* out = stderr) : out_(out) {}
  void on_event(const protocol::Event& event);

 private:
  FILE* out_;
  std::chrono::steady_clock::time_point training_start_;
  bool training_ = false;
};

// "1h02m", "3m04s", "12s".
std::string format_duration(double seconds);

}  // namespace trainer::job

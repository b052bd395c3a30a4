// Writing job-protocol events (JSON lines, protocol/job_protocol.h) and printing human progress
// from them.
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

#include "common/status.h"
#include "protocol/job_protocol.h"

namespace trainer::job {

// One event per line to a file or stdout, flushed after each line. Thread-safe.
class EventWriter {
 public:
  EventWriter() = default;
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // `path` empty: stdout.
  Status open(const std::string& path);
  void write(const protocol::Event& event);

 private:
  std::mutex mu_;
  FILE* out_ = nullptr;  // guarded by mu_
  bool owned_ = false;
};

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

// Writing job-protocol events (JSON lines) and printing human progress from them.
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::job {

// One JSON object per line to a file or stdout, flushed after each line. Thread-safe.
class EventWriter {
 public:
  EventWriter() = default;
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // `path` empty: stdout.
  Status open(const std::string& path);
  void write(const nlohmann::json& event);

 private:
  std::mutex mu_;
  FILE* out_ = nullptr;  // guarded by mu_
  bool owned_ = false;
};

// Human progress on stderr: phases, data fit, and for each step "step 12/100 loss 1.234
// lr 1.0e-04 3,456 tok/s ETA 1m02s"; validation losses; the adapter's folder at the end.
class ProgressPrinter {
 public:
  void on_event(const nlohmann::json& event);

 private:
  std::chrono::steady_clock::time_point training_start_;
  bool training_ = false;
};

// "1h02m", "3m04s", "12s".
std::string format_duration(double seconds);

}  // namespace trainer::job

#include "job/job_events.h"

#include <cerrno>
#include <cmath>
#include <cstring>

namespace trainer::job {

EventWriter::~EventWriter() {
  if (owned_ && out_ != nullptr) std::fclose(out_);
}

Status EventWriter::open(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (path.empty()) {
    out_ = stdout;
    return Status::ok();
  }
  out_ = std::fopen(path.c_str(), "w");
  if (out_ == nullptr) return invalid_argument("--events " + path + ": cannot open for writing: " + std::strerror(errno));
  owned_ = true;
  return Status::ok();
}

void EventWriter::write(const nlohmann::json& event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (out_ == nullptr) return;
  const std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const long long s = std::llround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%llds", s);
  }
  return buf;
}

void ProgressPrinter::on_event(const nlohmann::json& ev) {
  const std::string type = ev.value("type", "");
  if (type == "phase") {
    const std::string phase = ev.value("phase", "");
    std::fprintf(stderr, "[%s]%s\n", phase.c_str(),
                 ev.contains("device") ? (" on " + ev["device"].get<std::string>()).c_str() : "");
    if (phase == "TRAINING") {
      training_ = true;
      training_start_ = std::chrono::steady_clock::now();
    }
  } else if (type == "data_fit") {
    std::fprintf(stderr, "data: %lld rows, %lld cut to maxSeqLength, %lld exactly at it, %lld dropped (nothing to train)\n",
                 ev.value("rows", 0LL), ev.value("truncated", 0LL), ev.value("exact", 0LL), ev.value("dropped", 0LL));
  } else if (type == "step" && training_) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - training_start_).count();
    const long long step = ev.value("step", 0LL), total = ev.value("totalSteps", 0LL);
    const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(total - step) : 0.0;
    std::fprintf(stderr, "step %lld/%lld  loss %.4f  lr %.2e  grad %.3f  %.0f tok/s  ETA %s\n", step, total,
                 ev.value("loss", 0.0), ev.value("learningRate", 0.0), ev.value("gradNorm", 0.0),
                 ev.value("tokensPerSecond", 0.0), format_duration(eta).c_str());
  } else if (type == "validation") {
    std::fprintf(stderr, "validation at step %lld: loss %.4f\n", ev.value("step", 0LL), ev.value("validationLoss", 0.0));
  } else if (type == "completed") {
    std::fprintf(stderr, "done: adapter in %s (final loss %.4f)\n", ev.value("adapterDir", "").c_str(), ev.value("finalLoss", 0.0));
  }
}

}  // namespace trainer::job

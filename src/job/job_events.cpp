#include "job/job_events.h"

#include <cerrno>
#include <cmath>
#include <cstring>

namespace trainer::job {

EventWriter::~EventWriter() {
  flush(kFlushWait);
  sender_.reset();
  if (owned_ && out_ != nullptr) std::fclose(out_);
}

Status EventWriter::open(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (path.empty()) {
    out_ = stdout;
    return Status::ok();
  }
  out_ = std::fopen(path.c_str(), "we");  // e: close-on-exec
  if (out_ == nullptr) return invalid_argument("--events " + path + ": cannot open for writing: " + std::strerror(errno));
  owned_ = true;
  return Status::ok();
}

void EventWriter::heartbeat(double uptime_seconds) {
  std::optional<int64_t> step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    step = last_step_;
  }
  write(protocol::Heartbeat{.step = step, .uptime_seconds = uptime_seconds});
}

void EventWriter::write(const protocol::Event& event) {
  std::string line = protocol::to_line(event);
  std::lock_guard<std::mutex> lock(mu_);
  if (out_ == nullptr) return;
  if (std::holds_alternative<protocol::Heartbeat>(event) && ended_) return;
  if (const auto* s = std::get_if<protocol::Step>(&event)) last_step_ = s->step;
  if (protocol::ends_attempt(event)) ended_ = true;
  const int64_t seq = ++seq_;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
  line.pop_back();
  if (sender_) {
    sender_->add(seq, std::move(line));
  } else if (kept_.size() < kKeptBeforePosting) {
    kept_.emplace_back(seq, std::move(line));
  }
}

void EventWriter::post_to(const ReportTarget& target, SenderOptions options) {
  std::lock_guard<std::mutex> lock(mu_);
  sender_ = std::make_unique<ReportSender>(target, "events", "events", "event", options);
  for (auto& [seq, line] : kept_) sender_->add(seq, std::move(line));
  kept_.clear();
}

bool EventWriter::flush(std::chrono::milliseconds wait) {
  ReportSender* sender;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sender = sender_.get();
  }
  return sender == nullptr || sender->flush(wait);
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

void ProgressPrinter::on_event(const protocol::Event& event) {
  if (const auto* e = std::get_if<protocol::Phase>(&event)) {
    std::fprintf(out_, "[%s]%s\n", e->phase.c_str(), e->device ? (" on " + *e->device).c_str() : "");
    if (e->phase == "TRAINING") {
      training_ = true;
      training_start_ = std::chrono::steady_clock::now();
    }
  } else if (const auto* e = std::get_if<protocol::DataFit>(&event)) {
    std::fprintf(out_, "data: %lld rows, %lld cut to maxSeqLength, %lld exactly at it, %lld dropped (nothing to train)\n",
                 static_cast<long long>(e->rows), static_cast<long long>(e->truncated),
                 static_cast<long long>(e->exact), static_cast<long long>(e->dropped));
  } else if (const auto* e = std::get_if<protocol::DataSplit>(&event)) {
    std::fprintf(out_, "data: training on %lld rows, validating on %lld%s\n", static_cast<long long>(e->train_rows),
                 static_cast<long long>(e->validation_rows), e->held_out ? " held out" : "");
  } else if (const auto* e = std::get_if<protocol::Step>(&event); e != nullptr && training_) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - training_start_).count();
    const double eta =
        e->step > 0 ? elapsed / static_cast<double>(e->step) * static_cast<double>(e->total_steps - e->step) : 0.0;
    std::fprintf(out_, "step %lld/%lld  loss %.4f  lr %.2e  grad %.3f  %.0f tok/s  ETA %s\n",
                 static_cast<long long>(e->step), static_cast<long long>(e->total_steps), e->loss, e->learning_rate,
                 e->grad_norm, e->tokens_per_second, format_duration(eta).c_str());
  } else if (const auto* e = std::get_if<protocol::Validation>(&event)) {
    std::fprintf(out_, "validation at step %lld: loss %.4f\n", static_cast<long long>(e->step), e->validation_loss);
  } else if (const auto* e = std::get_if<protocol::Completed>(&event)) {
    std::fprintf(out_, "done: adapter in %s (final loss %.4f)\n", e->adapter_dir.c_str(), e->final_loss);
  }
}

std::unique_ptr<PostedLog> report_to_trainerd(EventWriter& writer, const protocol::JobRequest& request) {
  if (request.catalog_url.empty() || request.job_id.empty() || request.job_token.empty()) return nullptr;
  const ReportTarget target{request.catalog_url, request.job_id, request.job_token, request.catalog_ca_file};
  writer.post_to(target);
  return std::make_unique<PostedLog>(target, EventWriter::kFlushWait);
}

}  // namespace trainer::job

#include "job/heartbeat.h"

namespace trainer::job {

Heartbeat::Heartbeat(EventWriter& writer, std::chrono::seconds every) : writer_(writer), every_(every) {
  if (every_.count() > 0) thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, every_, [this] { return stopping_; })) {
    lock.unlock();
    const std::chrono::duration<double> up = std::chrono::steady_clock::now() - started_;
    writer_.heartbeat(up.count());
    lock.lock();
  }
}

}  // namespace trainer::job

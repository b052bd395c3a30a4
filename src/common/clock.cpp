#include "common/clock.h"

namespace trainer {
namespace {

class SystemClock final : public Clock {
 public:
  double now_seconds() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  std::chrono::steady_clock::time_point steady_now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace

std::shared_ptr<Clock> system_clock() {
  static const std::shared_ptr<Clock> clock = std::make_shared<SystemClock>();
  return clock;
}

double ManualClock::now_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wall_;
}

std::chrono::steady_clock::time_point ManualClock::steady_now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(moved_));
}

void ManualClock::advance(std::chrono::duration<double> by) {
  std::lock_guard<std::mutex> lock(mu_);
  wall_ += by.count();
  moved_ += by;
}

}  // namespace trainer

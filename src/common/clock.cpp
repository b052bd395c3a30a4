#include "common/clock.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace trainer {
namespace {

class SystemClock final : public Clock {
 public:
  double now_seconds() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  std::chrono::steady_clock::time_point steady_now() const override { return std::chrono::steady_clock::now(); }
};

class FileClock final : public Clock {
 public:
  explicit FileClock(std::string path) : path_(std::move(path)) {
    last_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  double now_seconds() const override {
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    std::lock_guard<std::mutex> lock(mu_);
    if (in && end != s.c_str()) last_ = v;
    return last_;
  }
  std::chrono::steady_clock::time_point steady_now() const override { return std::chrono::steady_clock::now(); }

 private:
  const std::string path_;
  mutable std::mutex mu_;
  mutable double last_;  // guarded by mu_: the last value read
};

}  // namespace

std::shared_ptr<Clock> file_clock(std::string path) { return std::make_shared<FileClock>(std::move(path)); }

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

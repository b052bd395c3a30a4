// The request limits (request_limits.h).
#include "api/request_limits.h"

#include <algorithm>
#include <cmath>

namespace trainer::api {

std::shared_ptr<RequestLimiter> RequestLimiter::create(int requests_per_second, int burst, int long_polls) {
  return std::shared_ptr<RequestLimiter>(new RequestLimiter(requests_per_second, burst, long_polls));
}

std::shared_ptr<RequestLimiter> RequestLimiter::for_tokens(const service::Limits& limits) {
  return create(limits.requests_per_second, limits.request_burst, limits.long_polls_per_token);
}

std::shared_ptr<RequestLimiter> RequestLimiter::for_workloads(const service::Limits& limits) {
  return create(limits.workload_requests_per_second, limits.workload_request_burst, 0);
}

RequestLimiter::RequestLimiter(int requests_per_second, int burst, int long_polls)
    : rate_(requests_per_second),
      burst_(std::max(1, burst > 0 ? burst : requests_per_second)),
      max_polls_(long_polls) {}

std::optional<int> RequestLimiter::take(const std::string& key, Clock::time_point now) {
  if (rate_ <= 0) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = buckets_.try_emplace(key, Bucket{static_cast<double>(burst_), now});
  Bucket& b = it->second;
  if (!fresh && now > b.at) {
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    b.requests = std::min<double>(burst_, b.requests + elapsed * rate_);
    b.at = now;
  }
  if (b.requests >= 1) {
    b.requests -= 1;
    return std::nullopt;
  }
  return std::max(1, static_cast<int>(std::ceil((1 - b.requests) / rate_)));
}

std::shared_ptr<void> RequestLimiter::hold_long_poll(const std::string& key) {
  if (max_polls_ <= 0) return std::make_shared<int>(0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    int& held = polls_[key];
    if (held >= max_polls_) return nullptr;
    ++held;
  }
  // Not null (a null handle means refused); the deleter gives the slot back.
  return std::shared_ptr<void>(static_cast<void*>(this),
                               [self = shared_from_this(), key](void*) { self->give_back(key); });
}

void RequestLimiter::give_back(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = polls_.find(key);
  if (it == polls_.end()) return;
  if (--it->second <= 0) polls_.erase(it);
}

}  // namespace trainer::api

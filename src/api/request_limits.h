// The request limits of one trainerd (docs/security.md, "Request limits"): a token bucket per key
// (an API token: limits.requestsPerSecond, limits.requestBurst; a workload:
// limits.workloadRequestsPerSecond, limits.workloadRequestBurst) and a count of the long polls and
// streams each key holds open (limits.longPollsPerToken). Past either, the request answers 429
// with Retry-After. Each replica keeps its own counts (a client that spreads over N replicas gets
// N times the rate).
//
// Thread safety: every method may be called from any thread (mu_ guards the counts).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "service/config.h"

namespace trainer::api {

class RequestLimiter : public std::enable_shared_from_this<RequestLimiter> {
 public:
  using Clock = std::chrono::steady_clock;

  // Held through a shared_ptr: a long poll's slot keeps the limiter alive until it is given back.
  // `requests_per_second` 0: no rate; `burst` 0: as many as the rate (at least 1); `long_polls` 0:
  // no cap.
  static std::shared_ptr<RequestLimiter> create(int requests_per_second, int burst, int long_polls);
  // The limiter of API tokens that `limits` configures.
  static std::shared_ptr<RequestLimiter> for_tokens(const service::Limits& limits);
  // The limiter of workloads that `limits` configures (a rate, no long-poll cap).
  static std::shared_ptr<RequestLimiter> for_workloads(const service::Limits& limits);

  int requests_per_second() const { return rate_; }
  int request_burst() const { return burst_; }
  int long_polls_per_token() const { return max_polls_; }

  // Takes one request from `key`'s bucket at `now`: nullopt when it may go, else the whole
  // seconds (at least 1) until its bucket holds a request again. Always nullopt without a rate.
  std::optional<int> take(const std::string& key, Clock::time_point now);
  // A slot among `key`'s long polls, given back when the last copy of the handle is destroyed;
  // null when `key` holds limits.longPollsPerToken already. A live handle always without a cap.
  std::shared_ptr<void> hold_long_poll(const std::string& key);

 private:
  RequestLimiter(int requests_per_second, int burst, int long_polls);
  void give_back(const std::string& key);

  struct Bucket {
    double requests = 0;   // requests it may make now (up to burst_)
    Clock::time_point at;  // when `requests` was counted
  };

  // Constant after construction.
  const int rate_;       // requests per second; 0 = no limit
  const int burst_;      // the bucket's size
  const int max_polls_;  // long polls per key; 0 = no limit

  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;  // by key; guarded by mu_
  std::unordered_map<std::string, int> polls_;       // long polls held, by key; guarded by mu_
};

}  // namespace trainer::api

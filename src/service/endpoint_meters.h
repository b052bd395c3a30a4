// Endpoint meters: what trainerd sees of the requests it forwards to endpoints (beyond the
// specification's metrics; docs/serving.md, "Endpoint metrics"), rendered in Prometheus' text
// format next to the service's own families on /metrics:
//
//   trainer_endpoint_requests_total{endpoint, model, outcome}   ok | error (the process answered
//                                                               4xx/5xx) | refused (by trainerd) |
//                                                               unreachable
//   trainer_endpoint_prompt_tokens_total{endpoint, model}       the answers' usage
//   trainer_endpoint_completion_tokens_total{endpoint, model}
//   trainer_endpoint_time_to_first_token_seconds{endpoint, model}    histogram (streamed answers)
//   trainer_endpoint_inter_token_latency_seconds{endpoint, model}    histogram (streamed answers)
//   trainer_endpoint_kv_blocks{endpoint, state}                  used | total, read from the
//                                                               process at each scrape
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace trainer::service {

class EndpointMeters {
 public:
  // One forwarded request's end; tokens from its answer's usage (0 when it had none).
  void request(const std::string& endpoint, const std::string& model, const std::string& outcome,
               long prompt_tokens = 0, long completion_tokens = 0);
  void first_token(const std::string& endpoint, const std::string& model, double seconds);
  void inter_token(const std::string& endpoint, const std::string& model, double seconds);

  struct KvBlocks {
    std::string endpoint;
    long used = 0, total = 0, cached = 0;  // cached: held by no request, kept for a prompt prefix
  };
  // The families for the endpoints in `active` (series of others are dropped), with their KV
  // blocks as read at this scrape; "" when `active` is empty.
  std::string render(const std::vector<std::string>& active, const std::vector<KvBlocks>& kv);

 private:
  struct Histogram {
    std::vector<long> counts;  // per bucket of kBuckets, then +Inf
    double sum = 0;
    long count = 0;
  };
  using Key = std::pair<std::string, std::string>;  // endpoint, model
  static void observe(Histogram& h, double seconds);

  std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, long> requests_;  // guarded by mu_
  std::map<Key, long> prompt_tokens_, completion_tokens_;                        // guarded by mu_
  std::map<Key, Histogram> first_token_, inter_token_;                           // guarded by mu_
};

}  // namespace trainer::service

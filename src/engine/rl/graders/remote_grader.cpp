// POSTs with deadlines and the shared call loop of http: and model: terms (declared in
// graders/remote_grader.h).
#include "engine/rl/graders/remote_grader.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "common/http_client.h"

namespace trainer::engine::rl {

HttpAnswer post_json(const std::string& url, const std::string& body, double timeout_seconds,
                     const std::vector<std::pair<std::string, std::string>>& headers, const std::string& ca_file,
                     const OutboundPolicy* outbound, const std::string& proxy) {
  HttpResponse r = http_call({.method = "POST", .url = url, .headers = headers, .body = body,
                              .timeout_seconds = timeout_seconds, .ca_file = ca_file, .outbound = outbound,
                              .proxy = proxy});
  HttpAnswer out;
  out.not_allowed = r.outbound_refused;
  out.status = r.status;
  out.body = std::move(r.body);
  out.detail = std::move(r.detail);
  switch (r.failure) {
    case HttpFailure::kNone:
      break;
    case HttpFailure::kTimeout:
      out.transport = FailureCause::kTimeout;
      break;
    case HttpFailure::kRefused:
    case HttpFailure::kTls:
    case HttpFailure::kBadUrl:
      out.transport = FailureCause::kUnreachable;
      break;
  }
  return out;
}

bool is_refusal(int status) { return status >= 400 && status < 500 && status != 408 && status != 429; }

std::string remote_answer(const std::string& who, int status, size_t reply_bytes) {
  return who + " answered HTTP " + std::to_string(status) + " (a reply of " + std::to_string(reply_bytes) +
         " bytes, not shown)";
}

Result<std::vector<Verdict>> RemoteGrader::grade(const std::vector<GradeItem>& items) {
  std::vector<Verdict> out(items.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string refusal;  // guarded by mu: the first refusal
  auto work = [&]() {
    for (size_t i = next++; i < items.size() && !stop; i = next++) {
      Verdict total;
      for (int attempt = 0; attempt <= retries_ && !stop; ++attempt) {
        const auto t0 = std::chrono::steady_clock::now();
        Attempt a = call(items[i]);
        const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (a.refusal) {
          std::lock_guard<std::mutex> lock(mu);
          if (refusal.empty()) refusal = *a.refusal;
          stop = true;
          break;
        }
        a.verdict.seconds = total.seconds + spent;
        a.verdict.input_tokens += total.input_tokens;
        a.verdict.output_tokens += total.output_tokens;
        total = std::move(a.verdict);
        if (total.failure == FailureCause::kNone) break;
      }
      out[i] = std::move(total);
    }
  };
  const int n = std::max(1, std::min<int>(concurrency_, static_cast<int>(items.size())));
  std::vector<std::thread> threads;
  for (int t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (!refusal.empty()) {
    return Status(StatusCode::kFailedPrecondition,
                  "reward term " + at_ + " (" + kind_ + ") was refused: " + refusal + "; the job stops");
  }
  return out;
}

}  // namespace trainer::engine::rl

// POSTs with deadlines and the shared call loop of http: and model: terms (declared in
// graders/remote_grader.h).
#include "engine/rl/graders/remote_grader.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace trainer::engine::rl {

HttpAnswer post_json(const std::string& url, const std::string& body, double timeout_seconds,
                     const std::vector<std::pair<std::string, std::string>>& headers) {
  HttpAnswer out;
  const size_t scheme = url.find("://");
  const size_t slash = scheme == std::string::npos ? std::string::npos : url.find('/', scheme + 3);
  const std::string base = slash == std::string::npos ? url : url.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/" : url.substr(slash);
  httplib::Client client(base);
  if (!client.is_valid()) {
    out.transport = FailureCause::kUnreachable;
    out.detail = url + " is not a URL this build can call (http://HOST:PORT/PATH)";
    return out;
  }
  const auto limit = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(timeout_seconds));
  client.set_connection_timeout(limit);
  client.set_read_timeout(limit);
  client.set_write_timeout(limit);
  httplib::Headers h;
  for (const auto& [k, v] : headers) h.emplace(k, v);
  const auto t0 = std::chrono::steady_clock::now();
  auto res = client.Post(path, h, body, "application/json");
  if (!res) {
    // httplib reports an expired deadline as a read or connection error: the time spent tells.
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.transport = spent >= 0.95 * timeout_seconds ? FailureCause::kTimeout : FailureCause::kUnreachable;
    out.detail = out.transport == FailureCause::kTimeout
                     ? "no answer from " + url + " within " + std::to_string(timeout_seconds) + " s"
                     : url + ": " + httplib::to_string(res.error());
    return out;
  }
  out.status = res->status;
  out.body = res->body;
  return out;
}

bool is_refusal(int status) { return status >= 400 && status < 500 && status != 408 && status != 429; }

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

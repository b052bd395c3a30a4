// A job's leave to train (declared in job/start_leave.h).
#include "job/start_leave.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/http_client.h"
#include "job/report_sender.h"

namespace trainer::job {

Status ask_leave_to_train(const protocol::JobRequest& request, const StartLeaveOptions& options) {
  if (request.launch_fence <= 0 || request.catalog_url.empty() || request.job_id.empty() || request.job_token.empty()) {
    return Status::ok();
  }
  const std::vector<std::string> bases = catalog_bases(request.catalog_url);
  const std::string body = nlohmann::json{{"launchFence", request.launch_fence}}.dump();
  const auto until = std::chrono::steady_clock::now() + options.deadline;
  auto wait = options.backoff;
  size_t current = 0;
  bool said = false;
  std::string last;
  while (true) {
    HttpRequest ask;
    ask.url = bases[current] + "/v1/jobs/" + request.job_id + "/start";
    ask.headers = {{"Authorization", "Bearer " + request.job_token}};
    ask.ca_file = request.catalog_ca_file;
    ask.body = body;
    ask.timeout_seconds = options.request_timeout_seconds;
    const HttpResponse answer = http_call(ask);
    if (answer.failure == HttpFailure::kNone && answer.status >= 200 && answer.status < 300) return Status::ok();
    if (answer.failure == HttpFailure::kNone && answer.status >= 400 && answer.status < 500 && answer.status != 429) {
      return failed_precondition(ask.url + " refused this job leave to train (HTTP " + std::to_string(answer.status) +
                                 "): " + answer.body.substr(0, 500));
    }
    last = answer.failure != HttpFailure::kNone ? answer.detail
                                                : "HTTP " + std::to_string(answer.status) + ": " + answer.body.substr(0, 300);
    if (std::chrono::steady_clock::now() + wait >= until) {
      return failed_precondition("no trainerd at " + request.catalog_url + " gave this job leave to train within " +
                                 std::to_string(options.deadline.count()) + " s (last: " + last + ")");
    }
    if (!said) {
      std::fprintf(stderr, "trainer-job: asking %s for leave to train; asking again until it answers (%s)\n",
                   ask.url.c_str(), last.c_str());
      said = true;
    }
    std::this_thread::sleep_for(wait);
    wait = std::min(wait * 2, options.max_backoff);
    // 503 "not committed yet" is the same answer from every replica; an unreachable one is not.
    if (answer.failure != HttpFailure::kNone || answer.status != 503) current = (current + 1) % bases.size();
  }
}

}  // namespace trainer::job

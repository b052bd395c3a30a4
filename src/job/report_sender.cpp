// Posting a job's reports to trainerd (declared in job/report_sender.h).
#include "job/report_sender.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/http_client.h"

namespace trainer::job {
namespace {

std::string trimmed(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

std::vector<std::string> route_urls(const ReportTarget& target, const std::string& route) {
  std::vector<std::string> out;
  for (const std::string& base : catalog_bases(target.base_url)) {
    out.push_back(base + "/v1/jobs/" + target.job_id + "/" + route);
  }
  return out;
}

}  // namespace

std::vector<std::string> catalog_bases(const std::string& catalog_url) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= catalog_url.size()) {
    const size_t comma = std::min(catalog_url.find(',', start), catalog_url.size());
    std::string base = trimmed(catalog_url.substr(start, comma - start));
    if (!base.empty()) out.push_back(std::move(base));
    start = comma + 1;
  }
  if (out.empty()) out.emplace_back();
  return out;
}

ReportSender::ReportSender(ReportTarget target, std::string route, std::string list, std::string field,
                           SenderOptions options)
    : target_(std::move(target)),
      urls_(route_urls(target_, route)),
      list_(std::move(list)),
      field_(std::move(field)),
      opt_(options) {
  thread_ = std::thread([this] { loop(); });
}

ReportSender::~ReportSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ReportSender::add(int64_t seq, std::string json_value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (refused_ || stopping_) return;
    if (queue_.size() >= opt_.max_buffered) {
      if (!dropped_) {
        dropped_ = true;
        std::fprintf(stderr, "trainer-job: %zu reports wait for %s; later ones are not posted (the job's files keep them)\n",
                     queue_.size(), urls_.front().c_str());
      }
      return;
    }
    queue_.emplace_back(seq, std::move(json_value));
  }
  cv_.notify_all();
}

bool ReportSender::flush(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [&] { return refused_ || (queue_.empty() && !in_flight_); });
  return !refused_ && queue_.empty() && !in_flight_;
}

void ReportSender::loop() {
  auto backoff = opt_.backoff;
  bool said_unreachable = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !refused_); });
    if (stopping_) return;
    const size_t n = std::min(queue_.size(), opt_.max_batch);
    in_flight_ = true;
    lock.unlock();
    const int outcome = post(n);
    lock.lock();
    in_flight_ = false;
    if (outcome == 0) {
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
      backoff = opt_.backoff;
      if (said_unreachable) std::fprintf(stderr, "trainer-job: %s answers again\n", urls_[current_].c_str());
      said_unreachable = false;
    } else if (outcome == 2) {
      refused_ = true;
      queue_.clear();
    } else {
      if (!said_unreachable) {
        std::fprintf(stderr, "trainer-job: cannot post to %s yet; retrying (the job's files keep everything)\n",
                     urls_[current_].c_str());
        said_unreachable = true;
      }
      current_ = (current_ + 1) % urls_.size();  // another replica may answer
      cv_.wait_for(lock, backoff, [&] { return stopping_; });
      backoff = std::min(backoff * 2, opt_.max_backoff);
    }
    cv_.notify_all();
  }
}

int ReportSender::post(size_t n) {
  std::string body = "{\"" + list_ + "\":[";
  {
    std::lock_guard<std::mutex> lock(mu_);  // the queue's front is stable: only this thread removes
    for (size_t i = 0; i < n; ++i) {
      const auto& [seq, value] = queue_[i];
      body += (i ? ",{\"seq\":" : "{\"seq\":") + std::to_string(seq) + ",\"" + field_ + "\":" + value + "}";
    }
  }
  body += "]}";
  HttpRequest request;
  request.url = urls_[current_];
  request.headers = {{"Authorization", "Bearer " + target_.token}};
  request.ca_file = target_.ca_file;
  request.body = std::move(body);
  request.timeout_seconds = opt_.request_timeout_seconds;
  const HttpResponse answer = http_call(request);
  if (answer.failure != HttpFailure::kNone || answer.status >= 500 || answer.status == 429) return 1;
  if (answer.status >= 200 && answer.status < 300) return 0;
  std::fprintf(stderr, "trainer-job: %s refused the reports (HTTP %d): %s; they are not posted again\n", urls_[current_].c_str(),
               answer.status, answer.body.substr(0, 300).c_str());
  return 2;
}

std::unique_ptr<StderrTee> StderrTee::start(ReportSender& sender) {
  std::fflush(stderr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  const int saved = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
  if (saved < 0 || ::dup2(fds[1], STDERR_FILENO) < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    if (saved >= 0) ::close(saved);
    return nullptr;
  }
  ::close(fds[1]);
  return std::unique_ptr<StderrTee>(new StderrTee(sender, saved, fds[0]));
}

StderrTee::StderrTee(ReportSender& sender, int saved, int read_end)
    : sender_(sender), saved_(saved), read_end_(read_end) {
  thread_ = std::thread([this] { loop(); });
}

StderrTee::~StderrTee() {
  std::fflush(stderr);
  ::dup2(saved_, STDERR_FILENO);  // the pipe's last writer here closes: the reader sees its end
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  thread_.join();
  ::close(read_end_);
  ::close(saved_);
}

void StderrTee::loop() {
  std::string partial;
  auto post_line = [&](const std::string& line) {
    sender_.add(++seq_, nlohmann::json(line).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  };
  char buffer[1 << 16];
  while (true) {
    pollfd p{read_end_, POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;  // another process (a rank) still holds the pipe: stop reading anyway
      continue;
    }
    if (ready < 0) continue;
    const ssize_t n = ::read(read_end_, buffer, sizeof(buffer));
    if (n <= 0) break;  // every writer closed it
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(saved_, buffer + off, static_cast<size_t>(n - off));
      if (w <= 0) break;
      off += w;
    }
    partial.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      post_line(partial.substr(start, nl - start));
    }
    partial.erase(0, start);
  }
  if (!partial.empty()) post_line(partial);
}

}  // namespace trainer::job

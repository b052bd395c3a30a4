// A job's reports to trainerd over its API (docs/job-protocol.md, "Reporting to trainerd"): its
// events and its log lines, each numbered 1, 2, ... within the attempt, posted in batches to
// POST {TRAINER_CATALOG_URL}/v1/jobs/{TRAINER_JOB_ID}/events (or /logs) with the attempt's token.
//
// Posting is off the training thread: add() queues an item in a bounded buffer and returns; a
// thread of the sender posts batches in order, and while trainerd cannot be reached (or answers
// 5xx, or is starting) it retries with backoff, so a job started or running while trainerd is
// down delivers once it is back. trainerd stores items by (attempt, seq), so a batch sent twice
// changes nothing. A refusal (4xx: a wrong token, an unknown attempt) stops the posting: the
// job's events file and log stay the fallback. flush() waits, bounded, for what is queued.
//
// Thread safety: add() and flush() from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace trainer::job {

// Where a job posts: trainerd's API base URL and the attempt's identity (protocol/job_request.h).
// base_url may name several trainerd replicas on one store, separated by commas: the job posts to
// the one that last answered and moves on to the next when it cannot be reached (or answers 5xx).
struct ReportTarget {
  std::string base_url;  // TRAINER_CATALOG_URL
  std::string job_id;    // TRAINER_JOB_ID
  std::string token;     // TRAINER_JOB_TOKEN
  std::string ca_file = {};  // TRAINER_CATALOG_CA_FILE: trusted for an https:// base_url; "" = the system's store
};

struct SenderOptions {
  size_t max_buffered = 100000;  // items queued at most; later ones are dropped (the file keeps them)
  size_t max_batch = 500;        // items per post
  std::chrono::milliseconds backoff{250};       // first wait after a failed post, doubled after each
  std::chrono::milliseconds max_backoff{2000};  // longest wait between tries
  double request_timeout_seconds = 10;
};

// The base URLs a TRAINER_CATALOG_URL names (comma separated), without trailing slashes; one ""
// when it names none.
std::vector<std::string> catalog_bases(const std::string& catalog_url);

class ReportSender {
 public:
  // `route` is "events" or "logs"; each item is posted as {"seq": N, FIELD: VALUE} in a list
  // named LIST ({"events": [{seq, event}]}, {"lines": [{seq, text}]}).
  ReportSender(ReportTarget target, std::string route, std::string list, std::string field, SenderOptions options = {});
  ~ReportSender();  // stops after the post in flight; what is still queued is dropped
  ReportSender(const ReportSender&) = delete;
  ReportSender& operator=(const ReportSender&) = delete;

  // Queues item `seq` whose value is `json_value` (JSON text). Never blocks on the network.
  void add(int64_t seq, std::string json_value);
  // Waits until every queued item was delivered (true), posting was refused, or `wait` passed.
  bool flush(std::chrono::milliseconds wait);

 private:
  void loop();
  // Posts the first `n` queued items; 0: delivered, 1: retry later, 2: refused.
  int post(size_t n);

  const ReportTarget target_;
  const std::vector<std::string> urls_;  // one per replica named by target_.base_url, this route's
  size_t current_ = 0;  // the URL posted to; used by the sender's thread only
  const std::string list_;
  const std::string field_;
  const SenderOptions opt_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, std::string>> queue_;  // guarded by mu_
  bool in_flight_ = false;                             // guarded by mu_
  bool refused_ = false;                               // guarded by mu_
  bool stopping_ = false;                              // guarded by mu_
  bool dropped_ = false;                               // guarded by mu_: said once
  std::thread thread_;
};

// While it lives, what this process (and the processes it starts) writes to its standard error
// is also posted to trainerd as log lines, one item per line; stderr itself still receives
// every byte (the backend's log file). The destructor restores stderr and posts the last line.
class StderrTee {
 public:
  // nullptr when stderr cannot be redirected (the job then posts no log).
  static std::unique_ptr<StderrTee> start(ReportSender& sender);
  ~StderrTee();
  StderrTee(const StderrTee&) = delete;
  StderrTee& operator=(const StderrTee&) = delete;

 private:
  StderrTee(ReportSender& sender, int saved, int read_end);
  void loop();

  ReportSender& sender_;
  const int saved_;     // the original stderr
  const int read_end_;  // the pipe stderr now writes to
  int64_t seq_ = 0;     // the last line's number; used by the thread only
  std::mutex mu_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

// A job's log posted to trainerd: a sender of log lines fed by a StderrTee. The destructor
// restores stderr and waits at most `flush_wait` for the last lines to be delivered.
class PostedLog {
 public:
  PostedLog(const ReportTarget& target, std::chrono::milliseconds flush_wait, SenderOptions options = {})
      : sender_(target, "logs", "lines", "text", options), flush_wait_(flush_wait), tee_(StderrTee::start(sender_)) {}
  ~PostedLog() {
    tee_.reset();
    sender_.flush(flush_wait_);
  }
  PostedLog(const PostedLog&) = delete;
  PostedLog& operator=(const PostedLog&) = delete;

 private:
  ReportSender sender_;
  const std::chrono::milliseconds flush_wait_;
  std::unique_ptr<StderrTee> tee_;
};

}  // namespace trainer::job

// The job's spans (docs/traces.md): an attempt of a run joins the run's trace that trainerd
// started (TRACEPARENT: parent = the run's root span) and records, under one `attempt` span,
// `prepare`, every `step` (with its phases as children), `validation`, `checkpoint.save`,
// `export`, and each snapshot's `publish` with its `publish.reserve`, `publish.upload` and
// `publish.commit`. Spans are built from the job-protocol events as they arrive (an event's
// arrival ends its span; its measured seconds give its start) and from the publisher's timed
// operations, and exported in the background (telemetry/tracing.h): the collector never slows a
// step, and one that is down loses spans, counted and warned about, never the run.
//
// Thread safety: on_event() and end_attempt() from the training thread, on_publication() from
// the publisher's thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "job/snapshot_publisher.h"
#include "protocol/job_protocol.h"
#include "protocol/job_request.h"
#include "telemetry/tracing.h"

namespace trainer::job {

class JobTracer {
 public:
  // The attempt's tracer, or null when the request names no traces endpoint, or its endpoint or
  // TRACEPARENT is malformed (said on stderr: the job trains untraced). Its `attempt` span starts now.
  static std::unique_ptr<JobTracer> open(const protocol::JobRequest& request, const telemetry::Resource& resource);
  ~JobTracer();  // ends the attempt span if still open, then posts what is queued (bounded wait)
  JobTracer(const JobTracer&) = delete;
  JobTracer& operator=(const JobTracer&) = delete;

  void on_event(const protocol::Event& event);
  void on_publication(const PublicationOperation& operation);
  // Ends the attempt span (once): `outcome` completed | paused | cancelled | failed; an error
  // status for failed, with `reason`.
  void end_attempt(const std::string& outcome, const std::string& reason = "");

  uint64_t spans_dropped() const { return exporter_->spans_dropped(); }

 private:
  JobTracer(telemetry::SpanContext parent, int64_t attempt, std::unique_ptr<telemetry::SpanExporter> exporter);
  // A span of the attempt's trace under `parent_span_id`, from `start` to `end` (a new span id).
  telemetry::SpanData span(const std::string& name, const std::string& parent_span_id,
                           std::chrono::system_clock::time_point start,
                           std::chrono::system_clock::time_point end) const;
  void on_step(const protocol::Step& step, std::chrono::system_clock::time_point end);

  // Constant after construction.
  const telemetry::SpanContext parent_;  // the run's root span (TRACEPARENT)
  const int64_t attempt_;
  const std::string attempt_span_id_;
  const std::chrono::system_clock::time_point started_;
  std::unique_ptr<telemetry::SpanExporter> exporter_;  // thread-safe

  std::mutex mu_;
  bool attempt_ended_ = false;                         // guarded by mu_
  bool prepared_ = false;                              // guarded by mu_: the prepare span was emitted
  std::map<std::string, std::string> publish_spans_;   // guarded by mu_: snapshot id -> its publish span id
};

}  // namespace trainer::job

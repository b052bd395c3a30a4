// A run's trace (docs/traces.md): trainerd starts one per submitted run, keeps its ids in the
// run's record (so every attempt, across pauses, resumes and trainerd restarts, joins the same
// trace), hands each job attempt the context to join it (TRACEPARENT), records the service's own
// operations on the run (pause, resume, branch) as spans of it, and exports the run's root span
// when the run ends. Off (no exporter, nothing recorded) when the operator names no traces
// endpoint. Thread-safe. Internal to src/service.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "service/run_record.h"
#include "telemetry/tracing.h"

namespace trainer::service {

// Span names (docs/traces.md lists them with their attributes).
inline constexpr const char* kRunSpan = "run";
inline constexpr const char* kPauseSpan = "run.pause";
inline constexpr const char* kResumeSpan = "run.resume";
inline constexpr const char* kBranchSpan = "run.branch";
inline constexpr const char* kComparisonSpan = "comparison";

class RunTraces {
 public:
  // `endpoint`: the collector's traces URL (telemetry::traces_endpoint_url's form); "" = off.
  // `instance`: trainerd's instance name, on the service's resource.
  RunTraces(const std::string& endpoint, const std::string& instance);

  bool enabled() const { return exporter_ != nullptr; }
  // The URL jobs post their spans to; "" when off.
  std::string endpoint() const { return exporter_ ? exporter_->endpoint() : std::string(); }

  // A new trace for `run`: a trace id and the id its root span will have. Always set, traced or
  // not (ids cost nothing, and a run submitted while tracing was off has them when it is on).
  static void start_trace(RunRecord& run);
  // The context an attempt of `run` joins ("00-TRACE-ROOT-01"); "" when off or the run has no trace.
  std::string traceparent(const RunRecord& run) const;

  // The run's root span, from its submission to `ended_at` (wall seconds), with its outcome.
  void run_ended(const RunRecord& run, double ended_at);
  // An operation on the run (pause, resume, branch): a child of the run's root span from
  // `start` to `end` (wall seconds). `links`: spans of other traces it relates to.
  void operation(const RunRecord& run, const std::string& name, double start, double end,
                 std::vector<telemetry::Attribute> attributes = {}, const Status& status = Status::ok(),
                 std::vector<telemetry::SpanContext> links = {});
  // An operation of its own trace (a comparison, which spans several runs): a root span linked
  // to the root spans of `runs`.
  void standalone(const std::string& name, double start, double end, std::vector<telemetry::Attribute> attributes,
                  const std::vector<const RunRecord*>& runs, const Status& status = Status::ok());

  // The run's root span as a link target ({} when the run has no trace).
  static telemetry::SpanContext root_of(const RunRecord& run) { return {run.trace_id, run.root_span_id}; }

 private:
  std::unique_ptr<telemetry::SpanExporter> exporter_;  // null: off
};

}  // namespace trainer::service

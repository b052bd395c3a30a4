// A run's trace (declared in service/run_traces.h).
#include "service/run_traces.h"

namespace trainer::service {
namespace tel = trainer::telemetry;

namespace {

bool traced(const RunRecord& run) {
  return tel::valid_trace_hex(run.trace_id, 32) && tel::valid_trace_hex(run.root_span_id, 16);
}

void set_status(tel::SpanData& span, const Status& status) {
  if (status.is_ok()) return;
  span.status = tel::SpanStatus::kError;
  span.status_message = status.message();
}

}  // namespace

RunTraces::RunTraces(const std::string& endpoint, const std::string& instance) {
  if (endpoint.empty()) return;
  tel::Resource resource{tel::AttributeSet({{"service.name", std::string("trainerd")},
                                            {"service.instance.id", instance}})};
  exporter_ = std::make_unique<tel::SpanExporter>(std::move(resource), tel::SpanExporterOptions{.endpoint = endpoint});
}

void RunTraces::start_trace(RunRecord& run) {
  run.trace_id = tel::random_trace_id();
  run.root_span_id = tel::random_span_id();
}

std::string RunTraces::traceparent(const RunRecord& run) const {
  if (!enabled() || !traced(run)) return "";
  return tel::format_traceparent(root_of(run));
}

void RunTraces::run_ended(const RunRecord& run, double ended_at) {
  if (!enabled() || !traced(run)) return;
  tel::SpanData span;
  span.trace_id = run.trace_id;
  span.span_id = run.root_span_id;
  span.name = kRunSpan;
  span.kind = tel::SpanKind::kServer;
  span.start_ns = tel::unix_nanos_of_seconds(run.created_at);
  span.end_ns = tel::unix_nanos_of_seconds(ended_at);
  span.attributes = {{"trainer.run.id", run.id},
                     {"trainer.workload", run.workload_name},
                     {"trainer.run.method", run.method},
                     {"trainer.run.base_model", run.base_model},
                     {"trainer.run.attempts", static_cast<int64_t>(run.attempt)},
                     {"trainer.run.outcome", run.outcome.value_or("")}};
  if (run.view.contains("parentRunId") && run.view["parentRunId"].is_string()) {
    span.attributes.push_back({"trainer.run.parent_id", run.view["parentRunId"].get<std::string>()});
  }
  if (tel::valid_trace_hex(run.link_trace_id, 32) && tel::valid_trace_hex(run.link_span_id, 16)) {
    span.links.push_back({run.link_trace_id, run.link_span_id});
  }
  if (run.outcome == "FAILED") {
    span.status = tel::SpanStatus::kError;
    span.status_message = run.failure_reason.value_or("failed");
  } else if (run.outcome == "COMPLETED") {
    span.status = tel::SpanStatus::kOk;
  }
  exporter_->add(std::move(span));
}

void RunTraces::operation(const RunRecord& run, const std::string& name, double start, double end,
                          std::vector<tel::Attribute> attributes, const Status& status,
                          std::vector<tel::SpanContext> links) {
  if (!enabled() || !traced(run)) return;
  tel::SpanData span;
  span.trace_id = run.trace_id;
  span.span_id = tel::random_span_id();
  span.parent_span_id = run.root_span_id;
  span.name = name;
  span.kind = tel::SpanKind::kServer;
  span.start_ns = tel::unix_nanos_of_seconds(start);
  span.end_ns = tel::unix_nanos_of_seconds(end);
  span.attributes = std::move(attributes);
  span.attributes.push_back({"trainer.run.id", run.id});
  span.links = std::move(links);
  set_status(span, status);
  exporter_->add(std::move(span));
}

void RunTraces::standalone(const std::string& name, double start, double end, std::vector<tel::Attribute> attributes,
                           const std::vector<const RunRecord*>& runs, const Status& status) {
  if (!enabled()) return;
  tel::SpanData span;
  span.trace_id = tel::random_trace_id();
  span.span_id = tel::random_span_id();
  span.name = name;
  span.kind = tel::SpanKind::kServer;
  span.start_ns = tel::unix_nanos_of_seconds(start);
  span.end_ns = tel::unix_nanos_of_seconds(end);
  span.attributes = std::move(attributes);
  for (const RunRecord* run : runs) {
    if (run != nullptr && traced(*run)) span.links.push_back(root_of(*run));
  }
  set_status(span, status);
  exporter_->add(std::move(span));
}

}  // namespace trainer::service

// The job's spans (declared in job/job_tracing.h).
#include "job/job_tracing.h"

#include <algorithm>
#include <cstdio>

namespace trainer::job {
namespace tel = trainer::telemetry;

namespace {

using WallClock = std::chrono::system_clock;

// How long the job's exit waits for its last spans to be posted.
constexpr std::chrono::seconds kExitFlush{5};

WallClock::duration seconds(double s) {
  return std::chrono::duration_cast<WallClock::duration>(std::chrono::duration<double>(std::max(0.0, s)));
}

const char* publication_span_name(tel::CheckpointOperation op) {
  switch (op) {
    case tel::CheckpointOperation::kReserve: return "publish.reserve";
    case tel::CheckpointOperation::kUpload: return "publish.upload";
    case tel::CheckpointOperation::kAcknowledge: return "publish.commit";
    case tel::CheckpointOperation::kPublish: return "publish";
    default: return nullptr;  // staging and restores are not publication spans
  }
}

}  // namespace

std::unique_ptr<JobTracer> JobTracer::open(const protocol::JobRequest& request, const tel::Resource& resource) {
  if (request.otlp_traces_endpoint.empty()) return nullptr;
  auto endpoint = tel::traces_endpoint_url(request.otlp_traces_endpoint);
  if (!endpoint.is_ok()) {
    std::fprintf(stderr, "trainer-job: traces off: TRAINER_OTLP_TRACES_ENDPOINT: %s\n",
                 endpoint.status().message().c_str());
    return nullptr;
  }
  auto parent = tel::parse_traceparent(request.traceparent);
  if (!parent.is_ok()) {
    std::fprintf(stderr, "trainer-job: traces off: TRACEPARENT: %s\n", parent.status().message().c_str());
    return nullptr;
  }
  auto exporter = std::make_unique<tel::SpanExporter>(resource, tel::SpanExporterOptions{.endpoint = *endpoint});
  return std::unique_ptr<JobTracer>(new JobTracer(std::move(*parent), request.attempt, std::move(exporter)));
}

JobTracer::JobTracer(tel::SpanContext parent, int64_t attempt, std::unique_ptr<tel::SpanExporter> exporter)
    : parent_(std::move(parent)),
      attempt_(attempt),
      attempt_span_id_(tel::random_span_id()),
      started_(WallClock::now()),
      exporter_(std::move(exporter)) {}

JobTracer::~JobTracer() {
  end_attempt("ended", "");
  if (!exporter_->flush(kExitFlush)) {
    std::fprintf(stderr, "trainer-job: warning: traces: the last spans were not posted to %s within %lld s\n",
                 exporter_->endpoint().c_str(), static_cast<long long>(kExitFlush.count()));
  }
}

tel::SpanData JobTracer::span(const std::string& name, const std::string& parent_span_id, WallClock::time_point start,
                              WallClock::time_point end) const {
  tel::SpanData s;
  s.trace_id = parent_.trace_id;
  s.span_id = tel::random_span_id();
  s.parent_span_id = parent_span_id;
  s.name = name;
  s.start_ns = tel::unix_nanos(start);
  s.end_ns = tel::unix_nanos(std::max(start, end));
  s.attributes = {{"trainer.run.attempt", attempt_}};
  return s;
}

void JobTracer::end_attempt(const std::string& outcome, const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (attempt_ended_) return;
    attempt_ended_ = true;
  }
  tel::SpanData s = span("attempt", parent_.span_id, started_, WallClock::now());
  s.span_id = attempt_span_id_;
  s.attributes.push_back({"trainer.attempt.outcome", outcome});
  if (outcome == "failed") {
    s.status = tel::SpanStatus::kError;
    s.status_message = reason;
  } else if (outcome == "completed") {
    s.status = tel::SpanStatus::kOk;
  }
  exporter_->add(std::move(s));
}

void JobTracer::on_step(const protocol::Step& e, WallClock::time_point end) {
  const bool rl = e.rl.is_object();
  // An SFT step's input comes before what step_seconds measures; an RL step's seconds are all of it.
  const double input = rl ? 0.0 : e.input_seconds;
  const WallClock::time_point start = end - seconds(e.step_seconds + input);
  tel::SpanData step = span("step", attempt_span_id_, start, end);
  step.attributes.push_back({"trainer.step", e.step});
  step.attributes.push_back({"trainer.step.total", e.total_steps});
  step.attributes.push_back({"trainer.step.loss", e.loss});
  step.attributes.push_back({"trainer.step.tokens", e.batch_tokens});
  // The phases, one after another from the step's start, each as long as it was measured.
  WallClock::time_point at = start;
  auto phase = [&](const char* name, double s) {
    const WallClock::time_point phase_end = std::min(end, at + seconds(s));
    tel::SpanData p = span(name, step.span_id, at, phase_end);
    p.attributes.push_back({"trainer.step", e.step});
    exporter_->add(std::move(p));
    at = phase_end;
  };
  if (rl) {
    phase("generation", e.rl.value("generationSeconds", 0.0));
    phase("reward", e.rl.value("rewardSeconds", 0.0));
    phase("old_log_probs", e.rl.value("oldLogprobSeconds", 0.0));
    phase("actor_update", e.rl.value("actorUpdateSeconds", 0.0));
  } else {
    phase("input", e.input_seconds);
    phase("forward_backward", e.forward_backward_seconds);
    phase("optimizer", e.optimizer_seconds);
  }
  exporter_->add(std::move(step));
}

void JobTracer::on_event(const protocol::Event& event) {
  const WallClock::time_point now = WallClock::now();
  if (const auto* e = std::get_if<protocol::Phase>(&event)) {
    if (e->phase != "TRAINING") return;
    {
      std::lock_guard lock(mu_);
      if (prepared_) return;
      prepared_ = true;
    }
    // From the job's start (restore, model and data loading included) to its training loop.
    tel::SpanData s = span("prepare", attempt_span_id_, started_, now);
    if (e->total_steps) s.attributes.push_back({"trainer.step.total", *e->total_steps});
    exporter_->add(std::move(s));
  } else if (const auto* e = std::get_if<protocol::Step>(&event)) {
    on_step(*e, now);
  } else if (const auto* e = std::get_if<protocol::Validation>(&event)) {
    tel::SpanData s = span("validation", attempt_span_id_, now - seconds(e->evaluation_seconds), now);
    s.attributes.push_back({"trainer.step", e->step});
    s.attributes.push_back({"trainer.validation.loss", e->validation_loss});
    exporter_->add(std::move(s));
  } else if (const auto* e = std::get_if<protocol::Checkpoint>(&event)) {
    tel::SpanData s = span("checkpoint.save", attempt_span_id_, now - seconds(e->checkpoint_seconds), now);
    s.attributes.push_back({"trainer.step", e->step});
    exporter_->add(std::move(s));
  } else if (const auto* e = std::get_if<protocol::Completed>(&event)) {
    tel::SpanData s = span("export", attempt_span_id_, now - seconds(e->export_seconds), now);
    s.attributes.push_back({"trainer.step", e->steps});
    exporter_->add(std::move(s));
    end_attempt("completed");
  } else if (const auto* e = std::get_if<protocol::Paused>(&event)) {
    end_attempt("paused", e->reason);
  } else if (std::holds_alternative<protocol::Cancelled>(event)) {
    end_attempt("cancelled");
  } else if (const auto* e = std::get_if<protocol::Failed>(&event)) {
    end_attempt("failed", e->reason);
  }
}

void JobTracer::on_publication(const PublicationOperation& op) {
  const char* name = publication_span_name(op.operation);
  if (name == nullptr) return;
  // The publish span is recorded last (it covers its tries): its id is chosen at its first child.
  std::string publish_id;
  {
    std::lock_guard lock(mu_);
    auto [it, added] = publish_spans_.try_emplace(op.snapshot_id, std::string());
    if (added) it->second = tel::random_span_id();
    publish_id = it->second;
    if (op.operation == tel::CheckpointOperation::kPublish) publish_spans_.erase(it);
  }
  const bool publish = op.operation == tel::CheckpointOperation::kPublish;
  tel::SpanData s = span(name, publish ? attempt_span_id_ : publish_id, op.start, op.end);
  if (publish) s.span_id = publish_id;
  s.kind = publish ? tel::SpanKind::kInternal : tel::SpanKind::kClient;
  s.attributes.push_back({"trainer.step", op.step});
  s.attributes.push_back({"trainer.snapshot.id", op.snapshot_id});
  if (!op.kind.empty()) s.attributes.push_back({"trainer.snapshot.kind", op.kind});
  if (!op.status.is_ok()) {
    s.status = tel::SpanStatus::kError;
    s.status_message = op.status.message();
  }
  exporter_->add(std::move(s));
}

}  // namespace trainer::job

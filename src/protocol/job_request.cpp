// The job request and its environment (declared in protocol/job_request.h).
#include "protocol/job_request.h"

#include <cstdlib>

namespace trainer::protocol {
namespace {

// When the writer passes a variable; the reader reads every one that is set.
enum class When {
  kAlways,        // even when empty
  kSet,           // a non-empty string, a positive number, a kind other than train
  kWithEndpoint,  // when the request names an OTLP endpoint
  kWithTracesEndpoint,  // a non-empty string, when the request names an OTLP traces endpoint
};

constexpr JobKind kKinds[] = {JobKind::kTrain, JobKind::kEvaluate, JobKind::kServe, JobKind::kCurate};

// The one list of the request's variables, in the order they are written: `visit(name, member,
// when)` for each. Shared by the writer (a const request) and the reader.
template <class Request, class Visit>
void each_variable(Request& r, Visit&& visit) {
  visit("TRAINER_RUN_ID", r.run_id, When::kAlways);
  visit("TRAINER_ATTEMPT", r.attempt, When::kAlways);
  visit("TRAINER_JOB_KIND", r.kind, When::kSet);
  visit("TRAINER_WORKLOAD", r.identity.workload, When::kSet);
  visit("TRAINER_METHOD", r.identity.method, When::kSet);
  visit("TRAINER_BASE_MODEL", r.identity.base_model, When::kSet);
  visit("TRAINER_BASE_MODEL_SHA", r.identity.base_model_sha, When::kSet);
  visit("TRAINER_PROFILE", r.identity.profile, When::kSet);
  visit("TRAINER_PIPELINE_ID", r.identity.pipeline_id, When::kSet);
  visit("TRAINER_PIPELINE_STAGE", r.identity.pipeline_stage, When::kSet);
  visit("TRAINER_OTLP_ENDPOINT", r.otlp_endpoint, When::kSet);
  visit("TRAINER_OTLP_INTERVAL_MS", r.otlp_interval_ms, When::kWithEndpoint);
  visit("TRAINER_OTLP_TRACES_ENDPOINT", r.otlp_traces_endpoint, When::kSet);
  visit("TRACEPARENT", r.traceparent, When::kWithTracesEndpoint);
  visit("TRAINER_CATALOG_URL", r.catalog_url, When::kSet);
  visit("TRAINER_CATALOG_CA_FILE", r.catalog_ca_file, When::kSet);
  visit("TRAINER_JOB_ID", r.job_id, When::kSet);
  visit("TRAINER_JOB_TOKEN", r.job_token, When::kSet);
  visit("TRAINER_LAUNCH_FENCE", r.launch_fence, When::kSet);
  visit("TRAINER_ARTIFACT_ROOT", r.artifact_root, When::kSet);
  visit("TRAINER_S3_ENDPOINT", r.store.s3_endpoint, When::kSet);
  visit("AWS_REGION", r.store.region, When::kSet);
  visit("AWS_ACCESS_KEY_ID", r.store.access_key_id, When::kSet);
  visit("AWS_SECRET_ACCESS_KEY", r.store.secret_access_key, When::kSet);
  visit("TRAINER_INPUT_CACHE", r.store.input_cache, When::kSet);
  visit("TRAINER_PUBLISH_DEADLINE_SECONDS", r.store.publish_deadline_seconds, When::kSet);
  visit("TRAINER_RESUME_SNAPSHOT", r.resume_snapshot, When::kSet);
  visit("TRAINER_HEARTBEAT_SECONDS", r.heartbeat_seconds, When::kSet);
  visit("TRAINER_BRANCH_SNAPSHOT", r.branch_snapshot, When::kSet);
  visit("TRAINER_BRANCH_RESTORE", r.branch_restore, When::kSet);
  visit("TRAINER_WARM_START_ADAPTER", r.warm_start_adapter, When::kSet);
  visit("TRAINER_OUTBOUND_ALLOW", r.outbound_allow, When::kSet);
  visit("TRAINER_SERVE_SECRET", r.serve_secret, When::kSet);
  visit("TRAINER_OUTBOUND_PROXY", r.outbound_proxy, When::kSet);
}

bool is_set(const std::string& v) { return !v.empty(); }
bool is_set(int64_t v) { return v > 0; }
bool is_set(JobKind v) { return v != JobKind::kTrain; }

std::string text_of(const std::string& v) { return v; }
std::string text_of(int64_t v) { return std::to_string(v); }
std::string text_of(JobKind v) { return std::string(job_kind_name(v)); }

Status parse(const char*, const std::string& text, std::string* out) {
  *out = text;
  return Status::ok();
}

Status parse(const char* name, const std::string& text, int64_t* out) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || value <= 0) return invalid_field(name, "'" + text + "' is not a positive integer");
  *out = static_cast<int64_t>(value);
  return Status::ok();
}

Status parse(const char* name, const std::string& text, JobKind* out) {
  for (JobKind kind : kKinds) {
    if (text == job_kind_name(kind)) {
      *out = kind;
      return Status::ok();
    }
  }
  return invalid_field(name, "'" + text + "' is not a job kind; use train, evaluate, serve or curate");
}

}  // namespace

std::string_view job_kind_name(JobKind kind) {
  switch (kind) {
    case JobKind::kTrain: return "train";
    case JobKind::kEvaluate: return "evaluate";
    case JobKind::kServe: return "serve";
    case JobKind::kCurate: return "curate";
  }
  return "train";
}

std::vector<std::pair<std::string, std::string>> job_environment(const JobRequest& request) {
  std::vector<std::pair<std::string, std::string>> env;
  each_variable(request, [&](const char* name, const auto& value, When when) {
    const bool pass = when == When::kAlways || (when == When::kSet && is_set(value)) ||
                      (when == When::kWithEndpoint && !request.otlp_endpoint.empty()) ||
                      (when == When::kWithTracesEndpoint && is_set(value) && !request.otlp_traces_endpoint.empty());
    if (pass) env.emplace_back(name, text_of(value));
  });
  return env;
}

std::vector<std::string> job_arguments(const JobRequest& request) {
  if (request.kind == JobKind::kServe) {
    if (request.events_path.empty()) return {"serve", "--spec", request.plan_path};
    return {"serve", "--spec", request.plan_path, "--events", request.events_path};
  }
  const bool evaluate = request.kind == JobKind::kEvaluate;
  return {evaluate ? "evaluate" : "run", evaluate ? "--spec" : "--plan", request.plan_path,
          "--output",                    request.output_dir,             "--events",
          request.events_path};
}

Result<JobRequest> job_request_from_environment(const Getenv& getenv) {
  JobRequest request;
  Status st = Status::ok();
  each_variable(request, [&](const char* name, auto& value, When) {
    const char* text = getenv(name);
    if (st.is_ok() && text != nullptr && *text != '\0') st = parse(name, text, &value);
  });
  TRAINER_RETURN_IF_ERROR(st);
  if (!request.branch_snapshot.empty() && request.branch_restore.empty()) request.branch_restore = kRestoreWeights;
  if (!request.branch_restore.empty() && request.branch_restore != kRestoreWeights &&
      request.branch_restore != kRestoreTrainingState) {
    return invalid_field("TRAINER_BRANCH_RESTORE", "'" + request.branch_restore + "' is not weights or trainingState");
  }
  return request;
}

}  // namespace trainer::protocol

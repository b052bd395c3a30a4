#include "service/run_record.h"

#include <filesystem>

#include "common/json_parse.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;

// The storage key of a file in trainerd's data folder: its folder and name (datasets/HASH.jsonl).
std::string key_of_stored_file(const std::string& path) {
  const std::filesystem::path p(path);
  return (p.parent_path().filename() / p.filename()).string();
}

// Reads typed fields of one object of a stored document; errors name "prefix.key".
class FieldReader {
 public:
  FieldReader(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }

  Status str(const char* key, std::string* out, bool required = true) const {
    if (!has(key)) return required ? missing(key) : Status::ok();
    if (!obj_[key].is_string()) return wrong(key, "a string");
    *out = obj_[key].get<std::string>();
    return Status::ok();
  }
  Status opt_str(const char* key, std::optional<std::string>* out) const {
    if (!has(key)) return Status::ok();
    if (!obj_[key].is_string()) return wrong(key, "a string");
    *out = obj_[key].get<std::string>();
    return Status::ok();
  }
  Status number(const char* key, double* out, bool required = true) const {
    if (!has(key)) return required ? missing(key) : Status::ok();
    if (!obj_[key].is_number()) return wrong(key, "a number");
    *out = obj_[key].get<double>();
    return Status::ok();
  }
  Status opt_number(const char* key, std::optional<double>* out) const {
    if (!has(key)) return Status::ok();
    if (!obj_[key].is_number()) return wrong(key, "a number");
    *out = obj_[key].get<double>();
    return Status::ok();
  }
  Status integer(const char* key, int64_t* out, bool required = true) const {
    if (!has(key)) return required ? missing(key) : Status::ok();
    if (!obj_[key].is_number_integer()) return wrong(key, "an integer");
    *out = obj_[key].get<int64_t>();
    return Status::ok();
  }
  Status boolean(const char* key, bool* out) const {
    if (!has(key)) return Status::ok();
    if (!obj_[key].is_boolean()) return wrong(key, "true or false");
    *out = obj_[key].get<bool>();
    return Status::ok();
  }
  Status phase(const char* key, std::optional<Phase>* out, bool required) const {
    std::optional<std::string> name;
    TRAINER_RETURN_IF_ERROR(opt_str(key, &name));
    if (!name) return required ? missing(key) : Status::ok();
    auto p = parse_phase(*name);
    if (!p) return invalid_field(path(key), "'" + *name + "' is not a phase");
    *out = *p;
    return Status::ok();
  }
  std::string path(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

 private:
  Status missing(const char* key) const { return invalid_field(path(key), "missing"); }
  Status wrong(const char* key, const char* what) const {
    return invalid_field(path(key), std::string("must be ") + what + ", got " + obj_[key].type_name());
  }

  const json& obj_;
  std::string prefix_;
};

std::optional<JobOutcome> parse_outcome(const std::string& s) {
  if (s.empty()) return JobOutcome::kNone;
  if (s == "completed") return JobOutcome::kCompleted;
  if (s == "failed") return JobOutcome::kFailed;
  if (s == "cancelled") return JobOutcome::kCancelled;
  if (s == "paused") return JobOutcome::kPaused;
  return std::nullopt;
}

Result<JobRecord> job_from_json(const json& j) {
  if (!j.is_object()) return invalid_field("_.job", "must be an object");
  FieldReader r(j, "_.job");
  JobRecord job;
  if (r.has("handle")) {
    TRAINER_RETURN_IF_ERROR(r.str("handle", &job.handle.value));
  } else if (r.has("pid")) {
    // Written before handles were opaque: the local backend's pid and start time.
    int64_t pid = 0, start = 0;
    TRAINER_RETURN_IF_ERROR(r.integer("pid", &pid));
    TRAINER_RETURN_IF_ERROR(r.integer("startTime", &start, false));
    job.handle.value = json{{"pid", pid}, {"startTime", start}}.dump();
  } else {
    return invalid_field("_.job.handle", "missing");
  }
  TRAINER_RETURN_IF_ERROR(r.number("startedAt", &job.started_at));
  TRAINER_RETURN_IF_ERROR(r.str("eventsPath", &job.events_path));
  TRAINER_RETURN_IF_ERROR(r.str("logPath", &job.log_path));
  TRAINER_RETURN_IF_ERROR(r.str("outputDir", &job.output_dir));
  TRAINER_RETURN_IF_ERROR(r.integer("offset", &job.offset, false));
  if (job.offset < -1) return invalid_field("_.job.offset", "must be -1 or more");
  if (r.has("jobId")) TRAINER_RETURN_IF_ERROR(r.str("jobId", &job.job_id));
  TRAINER_RETURN_IF_ERROR(r.integer("launchFence", &job.launch_fence, false));
  if (job.launch_fence < 0) return invalid_field("_.job.launchFence", "must be 0 or more");
  TRAINER_RETURN_IF_ERROR(r.integer("seq", &job.seq, false));
  TRAINER_RETURN_IF_ERROR(r.opt_number("endedAt", &job.ended_at));
  TRAINER_RETURN_IF_ERROR(r.opt_number("endGuess", &job.end_guess));
  TRAINER_RETURN_IF_ERROR(r.opt_number("heardAt", &job.heard_at));
  TRAINER_RETURN_IF_ERROR(r.opt_number("hungAt", &job.hung_at));
  if (r.has("exitCode")) {
    int64_t code = 0;
    TRAINER_RETURN_IF_ERROR(r.integer("exitCode", &code));
    job.exit_code = static_cast<int>(code);
  }
  return job;
}

json job_to_json(const JobRecord& job) {
  json j = {{"handle", job.handle.value}, {"startedAt", job.started_at}, {"eventsPath", job.events_path},
            {"logPath", job.log_path},     {"outputDir", job.output_dir}, {"offset", job.offset}};
  if (!job.job_id.empty()) {
    j["jobId"] = job.job_id;
    j["seq"] = job.seq;
  }
  if (job.launch_fence > 0) j["launchFence"] = job.launch_fence;
  if (job.ended_at) j["endedAt"] = *job.ended_at;
  if (job.end_guess) j["endGuess"] = *job.end_guess;
  if (job.exit_code) j["exitCode"] = *job.exit_code;
  if (job.heard_at) j["heardAt"] = *job.heard_at;
  if (job.hung_at) j["hungAt"] = *job.hung_at;
  return j;
}

}  // namespace

const char* job_outcome_name(JobOutcome outcome) {
  switch (outcome) {
    case JobOutcome::kNone: return "";
    case JobOutcome::kCompleted: return "completed";
    case JobOutcome::kFailed: return "failed";
    case JobOutcome::kCancelled: return "cancelled";
    case JobOutcome::kPaused: return "paused";
  }
  return "";
}

json RunRecord::public_json() const {
  json out = view;
  out["runId"] = id;
  out["workload"] = {{"id", workload_id}, {"name", workload_name}};
  out["baseModel"] = base_model;
  out["method"] = method;
  out["phase"] = phase_name(phase);
  out["attempt"] = attempt;
  if (outcome) out["outcome"] = *outcome;
  else out.erase("outcome");
  if (failure_reason) out["failureReason"] = *failure_reason;
  else out.erase("failureReason");
  out.erase("_");
  return out;
}

json RunRecord::to_json() const {
  json out = public_json();
  json in = {{"request", request},
             {"pool", pool},
             {"devices", devices},
             {"createdAt", created_at},
             {"enteredAt", entered_at},
             {"datasetKey", dataset_key},
             {"validationKey", validation_key ? json(*validation_key) : json(nullptr)},
             {"rows", rows},
             {"accumulatedSeconds", accumulated_seconds},
             {"jobSettingsSha", job_settings_sha},
             {"cancelRequested", cancel_requested},
             {"killSent", kill_sent}};
  if (base_model_sha) in["baseModelSha"] = *base_model_sha;
  if (job) in["job"] = job_to_json(*job);
  if (job_outcome != JobOutcome::kNone) in["jobOutcome"] = job_outcome_name(job_outcome);
  if (!job_reason.empty()) in["jobReason"] = job_reason;
  if (!engine_config.is_null()) in["engineConfig"] = engine_config;
  if (!engine_runtime.is_null()) in["engineRuntime"] = engine_runtime;
  if (adapter_dir) in["adapterDir"] = *adapter_dir;
  if (stop_sent_at) in["stopSentAt"] = *stop_sent_at;
  if (failed_in) in["failedIn"] = phase_name(*failed_in);
  if (terminal) in["terminal"] = phase_name(*terminal);
  if (paused_step) in["pausedStep"] = *paused_step;
  if (paused_snapshot) in["pausedSnapshot"] = *paused_snapshot;
  if (paused_by_plan) in["pausedByPlan"] = true;
  if (resume_from) in["resumeFrom"] = *resume_from;
  if (attempt_base != 1) in["attemptBase"] = attempt_base;
  if (next_attempt_at) in["nextAttemptAt"] = *next_attempt_at;
  if (!trace_id.empty()) {
    in["trace"] = {{"traceId", trace_id}, {"rootSpanId", root_span_id}};
    if (!link_trace_id.empty()) in["trace"]["link"] = {{"traceId", link_trace_id}, {"spanId", link_span_id}};
  }
  out["_"] = std::move(in);
  return out;
}

Result<RunRecord> RunRecord::from_json(const json& doc) {
  if (!doc.is_object()) return invalid_field("run", "must be a JSON object");
  RunRecord r;
  FieldReader top(doc, "");
  TRAINER_RETURN_IF_ERROR(top.str("runId", &r.id));
  if (!doc.contains("workload") || !doc["workload"].is_object()) return invalid_field("workload", "must be an object");
  FieldReader w(doc["workload"], "workload");
  TRAINER_RETURN_IF_ERROR(w.str("id", &r.workload_id));
  TRAINER_RETURN_IF_ERROR(w.str("name", &r.workload_name, false));
  TRAINER_RETURN_IF_ERROR(top.str("baseModel", &r.base_model, false));
  TRAINER_RETURN_IF_ERROR(top.str("method", &r.method, false));
  std::optional<Phase> phase;
  TRAINER_RETURN_IF_ERROR(top.phase("phase", &phase, true));
  r.phase = *phase;
  int64_t attempt = 1;
  TRAINER_RETURN_IF_ERROR(top.integer("attempt", &attempt, false));
  if (attempt < 1) return invalid_field("attempt", "must be at least 1");
  r.attempt = static_cast<int>(attempt);
  TRAINER_RETURN_IF_ERROR(top.opt_str("outcome", &r.outcome));
  TRAINER_RETURN_IF_ERROR(top.opt_str("failureReason", &r.failure_reason));
  // The presentation fields the service updates must have their shapes.
  for (const char* key : {"progress", "latest", "cost", "plan"}) {
    if (doc.contains(key) && !doc[key].is_object()) return invalid_field(key, "must be an object");
  }
  if (doc.contains("phaseHistory") && !doc["phaseHistory"].is_array()) {
    return invalid_field("phaseHistory", "must be a list");
  }
  r.view = doc;
  r.view.erase("_");
  if (!r.view.contains("progress")) r.view["progress"] = json::object();
  if (!r.view.contains("latest")) r.view["latest"] = json::object();
  if (!r.view.contains("phaseHistory")) r.view["phaseHistory"] = json::array();
  if (!r.view.contains("plan")) r.view["plan"] = json::object();

  if (!doc.contains("_") || !doc["_"].is_object()) return invalid_field("_", "must be an object");
  const json& in = doc["_"];
  FieldReader b(in, "_");
  TRAINER_RETURN_IF_ERROR(b.str("request", &r.request, false));
  TRAINER_RETURN_IF_ERROR(b.str("pool", &r.pool));
  int64_t devices = 1;
  TRAINER_RETURN_IF_ERROR(b.integer("devices", &devices));
  if (devices < 1 || devices > 1000000) return invalid_field("_.devices", "must be between 1 and 1000000");
  r.devices = static_cast<int>(devices);
  TRAINER_RETURN_IF_ERROR(b.number("createdAt", &r.created_at));
  r.entered_at = r.created_at;
  TRAINER_RETURN_IF_ERROR(b.number("enteredAt", &r.entered_at, false));
  // Storage keys; a record an older trainerd wrote names files of its data folder instead
  // (DATA/datasets/HASH.jsonl), whose last two parts are the key.
  TRAINER_RETURN_IF_ERROR(b.str("datasetKey", &r.dataset_key, false));
  TRAINER_RETURN_IF_ERROR(b.opt_str("validationKey", &r.validation_key));
  if (!b.has("datasetKey")) {
    std::string path;
    TRAINER_RETURN_IF_ERROR(b.str("datasetPath", &path));
    r.dataset_key = key_of_stored_file(path);
    std::optional<std::string> validation;
    TRAINER_RETURN_IF_ERROR(b.opt_str("validationPath", &validation));
    if (validation) r.validation_key = key_of_stored_file(*validation);
  }
  TRAINER_RETURN_IF_ERROR(b.integer("rows", &r.rows));
  TRAINER_RETURN_IF_ERROR(b.number("accumulatedSeconds", &r.accumulated_seconds, false));
  TRAINER_RETURN_IF_ERROR(b.opt_str("baseModelSha", &r.base_model_sha));
  if (!r.base_model_sha && doc.contains("baseModelHash") && doc["baseModelHash"].is_string()) {
    r.base_model_sha = doc["baseModelHash"].get<std::string>();
  }
  if (b.has("job")) {
    auto job = job_from_json(in["job"]);
    if (!job.is_ok()) return job.status();
    r.job = std::move(*job);
  }
  std::string outcome;
  TRAINER_RETURN_IF_ERROR(b.str("jobOutcome", &outcome, false));
  auto parsed = parse_outcome(outcome);
  if (!parsed) return invalid_field("_.jobOutcome", "'" + outcome + "' is not an outcome");
  r.job_outcome = *parsed;
  TRAINER_RETURN_IF_ERROR(b.str("jobReason", &r.job_reason, false));
  TRAINER_RETURN_IF_ERROR(b.opt_str("adapterDir", &r.adapter_dir));
  r.job_settings_sha = in.value("jobSettingsSha", json(nullptr));
  r.engine_config = in.value("engineConfig", json(nullptr));
  r.engine_runtime = in.value("engineRuntime", json(nullptr));
  for (const char* key : {"engineConfig", "engineRuntime"}) {
    if (b.has(key) && !in[key].is_object()) return invalid_field(std::string("_.") + key, "must be an object");
  }
  TRAINER_RETURN_IF_ERROR(b.boolean("cancelRequested", &r.cancel_requested));
  TRAINER_RETURN_IF_ERROR(b.opt_number("stopSentAt", &r.stop_sent_at));
  if (r.stop_sent_at && *r.stop_sent_at == 0.0) r.stop_sent_at.reset();
  TRAINER_RETURN_IF_ERROR(b.boolean("killSent", &r.kill_sent));
  TRAINER_RETURN_IF_ERROR(b.phase("failedIn", &r.failed_in, false));
  TRAINER_RETURN_IF_ERROR(b.phase("terminal", &r.terminal, false));
  if (b.has("pausedStep")) {
    int64_t step = 0;
    TRAINER_RETURN_IF_ERROR(b.integer("pausedStep", &step));
    r.paused_step = step;
  }
  TRAINER_RETURN_IF_ERROR(b.opt_str("pausedSnapshot", &r.paused_snapshot));
  TRAINER_RETURN_IF_ERROR(b.boolean("pausedByPlan", &r.paused_by_plan));
  TRAINER_RETURN_IF_ERROR(b.opt_str("resumeFrom", &r.resume_from));
  if (b.has("attemptBase")) {
    int64_t base = 1;
    TRAINER_RETURN_IF_ERROR(b.integer("attemptBase", &base));
    if (base < 1 || base > r.attempt) return invalid_field("_.attemptBase", "must be between 1 and the run's attempt");
    r.attempt_base = static_cast<int>(base);
  }
  TRAINER_RETURN_IF_ERROR(b.opt_number("nextAttemptAt", &r.next_attempt_at));
  if (b.has("trace")) {
    if (!in["trace"].is_object()) return invalid_field("_.trace", "must be an object");
    FieldReader t(in["trace"], "_.trace");
    TRAINER_RETURN_IF_ERROR(t.str("traceId", &r.trace_id));
    TRAINER_RETURN_IF_ERROR(t.str("rootSpanId", &r.root_span_id));
    if (t.has("link")) {
      if (!in["trace"]["link"].is_object()) return invalid_field("_.trace.link", "must be an object");
      FieldReader l(in["trace"]["link"], "_.trace.link");
      TRAINER_RETURN_IF_ERROR(l.str("traceId", &r.link_trace_id));
      TRAINER_RETURN_IF_ERROR(l.str("spanId", &r.link_span_id));
    }
  }
  return r;
}

Result<RunRecord> parse_run_record(const std::string& text, const std::string& id) {
  const std::string what = "the stored document of run " + id;
  auto doc = parse_json(text, what);
  if (!doc.is_ok()) return internal_error(doc.status().message());
  auto r = RunRecord::from_json(*doc);
  if (!r.is_ok()) return internal_error(what + ": " + r.status().describe());
  if (r->id != id) return internal_error(what + ": runId: '" + r->id + "' is not the run's id");
  return r;
}

}  // namespace trainer::service

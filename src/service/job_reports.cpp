// A job's reports over the API (docs/job-protocol.md, "Reporting to trainerd"): each attempt has
// an id and a token (registered when its job is started, passed as TRAINER_JOB_ID and
// TRAINER_JOB_TOKEN); its posted events and log lines are stored by (attempt, seq), and the
// events are read back by read_job_events() (job_event_source.h) when the task kernel steps the
// attempt's owner.
#include <fstream>

#include "service/service_state.h"

namespace trainer::service {
namespace {

// Items one post may carry (a job sends fewer; a bigger batch is refused, not truncated).
constexpr size_t kMaxItemsPerPost = 5000;

// The items of `body[key]`: [{seq, <field>}], each seq a positive integer, each <field> an
// object (events) or a string (log lines), kept as text.
Result<std::vector<store::JobItem>> items_of(const json& body, const char* key, const char* field, bool object) {
  const std::string where = std::string("body.") + key;
  if (!body.contains(key) || !body[key].is_array()) return invalid_field(where, "must be an array");
  const json& list = body[key];
  if (list.size() > kMaxItemsPerPost) {
    return invalid_field(where, "has " + std::to_string(list.size()) + " items; at most " +
                                    std::to_string(kMaxItemsPerPost) + " per post");
  }
  std::vector<store::JobItem> items;
  items.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const json& item = list[i];
    if (!item.is_object()) return invalid_field(at, "must be an object {seq, " + std::string(field) + "}");
    if (!item.contains("seq") || !item["seq"].is_number_integer() || item["seq"].get<int64_t>() < 1) {
      return invalid_field(at + ".seq", "must be a positive integer");
    }
    const json& value = item.contains(field) ? item[field] : json();
    if (object ? !value.is_object() : !value.is_string()) {
      return invalid_field(at + "." + field, object ? "must be an object (one event)" : "must be a string");
    }
    items.push_back({item["seq"].get<int64_t>(), object ? value.dump() : value.get<std::string>()});
  }
  return items;
}

}  // namespace

// A new attempt's token: 32 random bytes from the kernel, as hex.
std::string new_job_token() {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  unsigned char bytes[32] = {};
  urandom.read(reinterpret_cast<char*>(bytes), sizeof(bytes));
  if (!urandom) return random_hex(64);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

Status ServiceImpl::authenticate_job(const std::string& job_id, const std::string& token) {
  return core_.authenticated_attempt(job_id, token).status();
}

Status ServiceImpl::ingest_job_metrics(std::string_view otlp_json, const std::string& job_id,
                                       const std::string& token) {
  if (job_id.empty() || token.empty()) {
    return Status(StatusCode::kUnauthenticated, kJobIdHeader,
                  "a job's metrics need its attempt's credentials: X-Trainer-Job: TRAINER_JOB_ID and Authorization: "
                  "Bearer TRAINER_JOB_TOKEN (docs/security.md, \"Jobs\")");
  }
  auto attempt = core_.authenticated_attempt(job_id, token);
  if (!attempt.is_ok() && attempt.status().code() == StatusCode::kNotFound) {
    return Status(StatusCode::kUnauthenticated, kJobIdHeader, "no job attempt " + job_id);
  }
  if (!attempt.is_ok()) {
    return Status(StatusCode::kPermissionDenied, kJobIdHeader, "the token is not job attempt " + job_id + "'s");
  }
  return capacity_.ingest_job_metrics(otlp_json, attempt->owner_id);
}

Result<std::string> ServiceImpl::job_workload(const std::string& job_id, const std::string& token) {
  TRAINER_ASSIGN_OR_RETURN(store::JobAttemptRow attempt, core_.authenticated_attempt(job_id, token));
  if (attempt.owner_kind != "run") {
    return permission_denied("job attempt " + job_id + " works for a " + attempt.owner_kind + ", not a run");
  }
  TRAINER_ASSIGN_OR_RETURN(RunRecord run, core_.resolve_run(attempt.owner_id, "X-Trainer-Job"));
  return run.workload_id;
}

Result<json> ServiceImpl::post_job_events(const std::string& job_id, const json& body) {
  TRAINER_ASSIGN_OR_RETURN(auto items, items_of(body, "events", "event", true));
  TRAINER_ASSIGN_OR_RETURN(int64_t stored, store_->put_job_events(job_id, items));
  if (stored > 0) kernel_->wake();  // the attempt's owner reads them on its next step
  return json{{"received", items.size()}, {"stored", stored}};
}

Result<json> ServiceImpl::post_job_logs(const std::string& job_id, const json& body) {
  TRAINER_ASSIGN_OR_RETURN(auto items, items_of(body, "lines", "text", false));
  TRAINER_ASSIGN_OR_RETURN(int64_t stored, store_->put_job_log_lines(job_id, items));
  return json{{"received", items.size()}, {"stored", stored}};
}

// Reads only: the run's job is recorded by the step that started it, in the transaction that checked
// the step's lease, so a record that names this attempt is the one job the store's lease holder
// started (or adopted); a stopped replica's later start never commits its record.
Result<json> ServiceImpl::confirm_job_start(const std::string& job_id, const json& body) {
  const json fence_value = body.is_object() ? body.value("launchFence", json()) : json();
  if (!fence_value.is_number_integer() || fence_value.get<int64_t>() < 1) {
    return invalid_field("launchFence", "must be a positive integer (the job's TRAINER_LAUNCH_FENCE)");
  }
  const int64_t fence = fence_value.get<int64_t>();
  TRAINER_ASSIGN_OR_RETURN(std::optional<store::JobAttemptRow> attempt, store_->get_job_attempt(job_id));
  if (!attempt) return not_found("no job attempt " + job_id);
  if (attempt->owner_kind != "run") return json{{"train", true}};  // only a run's jobs carry a fence
  TRAINER_ASSIGN_OR_RETURN(std::optional<json> doc, store_->get_run(attempt->owner_id));
  if (!doc) return not_found("job attempt " + job_id + ": no run " + attempt->owner_id);
  TRAINER_ASSIGN_OR_RETURN(RunRecord run, RunRecord::from_json(*doc));
  const std::string current = run.id + "-" + std::to_string(run.attempt);
  if (run.job && run.job->job_id == job_id) {
    if (run.job->launch_fence == 0 || run.job->launch_fence == fence) return json{{"train", true}};
    return Status(StatusCode::kFailedPrecondition, "launchFence",
                  "job attempt " + job_id + " was started under lease fence " + std::to_string(fence) +
                      " by a trainerd replica that had lost run " + run.id + "'s lease; the attempt's job is the one " +
                      "started under fence " + std::to_string(run.job->launch_fence) + ": this one must not train");
  }
  if (job_id == current && !run.outcome) {
    return unavailable("job attempt " + job_id + ": its start is not committed yet; ask again");
  }
  return Status(StatusCode::kFailedPrecondition, "launchFence",
                "job attempt " + job_id + " is not run " + run.id + "'s current attempt (" +
                    (run.outcome ? "the run ended " + *run.outcome : "attempt " + std::to_string(run.attempt)) +
                    "): this job must not train");
}

}  // namespace trainer::service

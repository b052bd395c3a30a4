// The service's shared state: construction, run lookups and the notice of run changes.
#include "service/service_core.h"
#include "service/tokens.h"

#include <algorithm>
#include <cstdio>

namespace trainer::service {
namespace {

// A job's series go jobSeriesRetentionSeconds after its run ended, and live at least that long
// (and a few export intervals) after its last push while the run has not ended.
telemetry::RelayOptions relay_options(const TelemetryConfig& t) {
  telemetry::RelayOptions o;
  o.after_end_seconds = t.job_series_retention_seconds;
  o.retention_seconds = std::max({t.job_series_retention_seconds, 300.0, 3 * t.otlp_interval_ms / 1000.0});
  o.max_body_bytes = kMaxOtlpBodyBytes;
  return o;
}

// The options as the service keeps them: with the paths policy of its data folder.
ServiceOptions with_confined_paths(ServiceOptions o) {
  o.config.paths = confined_paths(o.config, o.data_dir);
  return o;
}

}  // namespace

ServiceCore::ServiceCore(ServiceOptions opts, std::unique_ptr<store::Store> st, std::unique_ptr<backend::Backend> be,
                         std::unique_ptr<storage::Storage> sto)
    : options(with_confined_paths(std::move(opts))),
      store(std::move(st)),
      backend(std::move(be)),
      storage(std::move(sto)),
      kernel(std::make_unique<tasks::TaskKernel>(
          *store, options.clock, tasks::KernelOptions{.owner = options.replica,
                                                   .lease_seconds = options.lease_seconds,
                                                   .kill_after = options.kill_after})),
      own_token(new_token_secret()),
      metrics(options.instance),
      relay(relay_options(options.config.telemetry)),
      traces(options.config.telemetry.otlp_traces_endpoint, options.instance) {}

std::string ServiceCore::artifact_uri(const std::string& key) const {
  const std::string& uri = options.config.artifact_store.uri;
  if (!uri.empty()) return uri + (uri.back() == '/' ? "" : "/") + key;
  return "file://" + storage->local_path(key);
}

Result<RunRecord> ServiceCore::resolve_run(const std::string& ref, const std::string& field) {
  if (!is_hex(ref)) {
    return field_status(StatusCode::kNotFound, field, "no run with id '" + ref + "' (run ids are lowercase hex)");
  }
  std::string id = ref;
  auto exact = store->run_ids_with_prefix(ref, 10);
  if (!exact.is_ok()) return exact.status();
  const auto& ids = *exact;
  if (std::find(ids.begin(), ids.end(), ref) == ids.end()) {
    if (ids.size() > 1) {
      std::string c;
      for (const auto& i : ids) c += (c.empty() ? "" : ", ") + i;
      return invalid_field(field, "'" + ref + "' is an ambiguous id prefix (candidates: " + c + ")");
    }
    if (ids.empty()) return field_status(StatusCode::kNotFound, field, "no run with id '" + ref + "'");
    id = ids.front();
  }
  auto row = store->get_run_row(id);
  if (!row.is_ok()) return row.status();
  if (!row->has_value()) return field_status(StatusCode::kNotFound, field, "no run with id '" + ref + "'");
  return parse_run_record((*row)->doc, id);
}

void ServiceCore::notify() {
  notify_here();
  Status st = store->announce_change(options.replica);
  if (!st.is_ok() && announce_errors.fetch_add(1) == 0) {
    std::fprintf(stderr, "trainerd: warning: telling the other replicas of a change failed (counted in info's "
                 "driver.announceErrors; said once): %s\n", st.describe().c_str());
  }
}

void ServiceCore::notify_here() {
  std::vector<std::function<void()>> subscribers;
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    ++events_version_;
    subscribers = subscribers_;
  }
  events_cv_.notify_all();
  for (const auto& on_change : subscribers) on_change();
}

void ServiceCore::subscribe(std::function<void()> on_change) {
  std::lock_guard<std::mutex> lock(events_mu_);
  subscribers_.push_back(std::move(on_change));
}

uint64_t ServiceCore::change_version() {
  std::lock_guard<std::mutex> lock(events_mu_);
  return events_version_;
}

void ServiceCore::wait_for_change(uint64_t seen, std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lock(events_mu_);
  events_cv_.wait_until(lock, until, [&] { return events_version_ != seen; });
}

std::string ServiceCore::job_catalog_urls() const {
  const double window = kLiveBeats * std::chrono::duration<double>(options.heartbeat).count();
  auto live = store->live_replicas(now() - window);
  std::string urls = catalog_url;
  if (!live.is_ok()) return urls;
  for (const store::ReplicaRow& r : *live) {
    if (r.name != options.replica && !r.url.empty() && r.url.find(',') == std::string::npos) urls += "," + r.url;
  }
  return urls;
}

Result<store::JobAttemptRow> ServiceCore::authenticated_attempt(const std::string& job_id, const std::string& token) {
  auto attempt = store->get_job_attempt(job_id);
  if (!attempt.is_ok()) return attempt.status();
  if (!attempt->has_value()) return not_found("job attempt " + job_id + ": no such attempt (TRAINER_JOB_ID)");
  // Compared in full whatever differs first: the time taken says nothing of the token.
  const std::string& expected = (*attempt)->token;
  unsigned diff = expected.size() == token.size() && !expected.empty() ? 0u : 1u;
  for (size_t i = 0; i < token.size() && !expected.empty(); ++i) {
    diff |= static_cast<unsigned>(token[i] ^ expected[i % expected.size()]);
  }
  if (diff != 0) {
    return invalid_argument("job attempt " + job_id +
                            ": the token does not match the attempt's (send Authorization: Bearer TRAINER_JOB_TOKEN)");
  }
  return std::move(**attempt);
}

// The job's last `n` log lines: the ones it posted, else its log file's.
std::string ServiceCore::job_log_tail(const std::string& job_id, const std::string& log_path, int n) {
  if (!job_id.empty()) {
    auto posted = store->job_log_tail(job_id, n);
    if (posted.is_ok() && !posted->empty()) {
      std::string out;
      for (const store::JobItem& line : *posted) out += (out.empty() ? "" : "\n") + line.text;
      return out;
    }
  }
  return last_lines(log_path, n);
}

Result<std::optional<std::string>> ServiceCore::durable_job_token(const std::string& job_id,
                                                                 const std::string& owner_kind,
                                                                 const std::string& owner_id) {
  TRAINER_ASSIGN_OR_RETURN(std::optional<store::JobAttemptRow> known, store->get_job_attempt(job_id));
  if (known) return std::optional<std::string>(known->token);
  TRAINER_RETURN_IF_ERROR(store->register_job_attempt({job_id, owner_kind, owner_id, new_job_token()}).status());
  kernel->step_again_at_once();  // the next pass, after this step's commit, starts the job
  return std::optional<std::string>();
}

}  // namespace trainer::service

// Capacity (pools, claims, quotas), cost settlement, choosing a pool, and the gauges of /metrics
// (with the series jobs push to the relay). The reports are in capacity_reports.cpp.
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>

#include "service/admission.h"
#include "service/capacity.h"
#include "common/json_parse.h"
#include "common/utc_time.h"
#include "telemetry/instruments.h"

namespace trainer::service {

const PoolConfig* Capacity::pool_named(const std::string& name) const {
  for (const auto& p : core_.options.config.pools) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

namespace {

std::string attempt_key(const RunRecord& run) { return run.id + "/" + std::to_string(run.attempt); }

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// What the service knows of a job that never pushed its metrics (killed or crashed before its
// first export, or a job binary that exports nothing), as the push that job would have made at
// its end: the resource the service gave the job (the identity of docs/job-protocol.md), and the
// series the service holds the figures of from the job's events file. sft.step.count is the steps
// the job reported (0 for a job that died before training: a dead loop is visible, not absent);
// job.devices is 0 (it holds nothing now); the most recent step's loss, learning rate, gradient
// norm, token accuracy and throughput, the validation loss and the row counts when the job
// reported them. Nothing is made up: a figure the job never reported is not published.
std::string what_the_service_knows(const RunRecord& run, const std::string& profile) {
  namespace tel = trainer::telemetry;
  const json empty = json::object();
  const json& plan = run.view.contains("plan") && run.view["plan"].is_object() ? run.view["plan"] : empty;
  const json config = plan.value("config", json::object());
  const json hyper = config.is_object() ? config.value("hyperparams", json::object()) : json::object();
  auto number = [](const json& doc, const char* section, const char* key) -> std::optional<double> {
    if (!doc.is_object() || !doc.contains(section) || !doc[section].is_object()) return std::nullopt;
    const json& v = doc[section].value(key, json());
    return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
  };
  const std::string method = upper(run.method);
  const std::string settings =
      run.view.contains("settingsSha") && run.view["settingsSha"].is_string() ? run.view["settingsSha"].get<std::string>() : "";
  const std::string submission = run.id + "-" + std::to_string(run.attempt);
  tel::TrainingJobResource resource{.run_id = run.id,
                                    .run_attempt = run.attempt,
                                    .workload = run.workload_name,
                                    .run_method = method,
                                    .run_engine = "native",
                                    .run_base_model = run.base_model,
                                    .run_settings_sha = settings,
                                    .run_lora_rank = static_cast<int64_t>(number(hyper, "lora", "rank").value_or(0)),
                                    .run_learning_rate = number(hyper, "optimizer", "learningRate").value_or(0),
                                    .job_submission_id = submission,
                                    .profile = profile};
  if (run.base_model_sha) resource.run_base_model_sha = *run.base_model_sha;
  tel::MeterProvider provider(resource.to_resource("trainer-job"));
  tel::JobMetrics m(provider);
  m.job_devices.set(0);
  if (run.method == "sft") {
    const auto step = number(run.view, "progress", "step");
    m.sft_step_count.add(static_cast<int64_t>(step.value_or(0)));
    if (auto v = number(run.view, "latest", "loss")) m.sft_loss.set(*v);
    if (auto v = number(run.view, "latest", "learningRate")) m.sft_learning_rate.set(*v);
    if (auto v = number(run.view, "latest", "gradNorm")) m.sft_grad_norm.set(*v);
    if (auto v = number(run.view, "latest", "tokenAccuracy")) m.sft_token_accuracy.set(*v);
    if (auto v = number(run.view, "latest", "tokensPerSecond")) m.sft_throughput.set(*v);
    if (auto v = number(run.view, "latest", "validationLoss")) m.sft_validation_loss.set(*v);
    auto rows = [&](tel::SftDataFit fit, std::optional<double> v) {
      if (v) m.sft_data_rows.set(static_cast<int64_t>(*v), {.sft_data_fit = fit});
    };
    rows(tel::SftDataFit::kTruncated, number(run.view, "dataFit", "truncated"));
    rows(tel::SftDataFit::kAtLimit, number(run.view, "dataFit", "exact"));
    rows(tel::SftDataFit::kDropped, number(run.view, "dataFit", "dropped"));
    if (auto train = number(run.view, "dataSplit", "trainRows")) {
      rows(tel::SftDataFit::kAll, train);
      const bool held = run.view["dataSplit"].value("heldOut", false);
      rows(tel::SftDataFit::kHeldOut, held ? number(run.view, "dataSplit", "validationRows") : 0.0);
    }
  }
  return tel::otlp_json(provider.collect());
}

}  // namespace

// cost.gpu.time is "GPU compute time": the devices of a GPU pool's claim, from the job's start,
// estimated from timestamps (gpu.derived=true). A CPU pool's device-seconds are not GPU time
// and count nowhere in it. Called on every driver tick while the job runs, and when it ends.
void Capacity::publish_gpu_time(const RunRecord& run, double upto) {
  if (!run.job || run.job->ended_at) return;
  const PoolConfig* pool = pool_named(run.pool);
  if (!pool || pool->accelerator == "cpu") return;
  const double total = std::max(0.0, upto - run.job->started_at) * run.devices;
  double& done = gpu_published_[attempt_key(run)];
  if (total <= done) return;
  core_.metrics.gpu_time(run.workload_name, pool->accelerator, total - done);
  done = total;
}

// Moves the time of an ended job into the run's cost, and tells the relay the run ended.
void Capacity::settle_cost(RunRecord& run, double t) {
  if (run.job && !run.job->ended_at) {
    const double end = run.job->end_guess.value_or(t);
    const double seconds = std::max(0.0, end - run.job->started_at) * run.devices;
    publish_gpu_time(run, end);
    gpu_published_.erase(attempt_key(run));
    run.job->ended_at = end;
    run.accumulated_seconds += seconds;
    // With the embedded relay, a job that never pushed still leaves its series on /metrics.
    if (core_.options.config.telemetry.otlp_endpoint.empty() && !core_.relay.holds(run.id, run.attempt)) {
      const PoolConfig* pool = pool_named(run.pool);
      Status st = core_.relay.ingest(what_the_service_knows(run, pool ? pool->accelerator : ""), t);
      if (!st.is_ok()) {
        std::fprintf(stderr, "trainerd: run %s: its job's series could not be published: %s\n", run.id.c_str(),
                     st.describe().c_str());
      }
    }
  }
  run.view["cost"] = run_cost_json(run.view.value("plan", json::object()), run.accumulated_seconds, false);
  core_.relay.run_ended(run.id, run.attempt, t);
}

void Capacity::read() {
  auto devices = core_.backend->observed_devices();
  auto in_use = core_.backend->devices_in_use();
  const double t = core_.now();
  std::lock_guard<std::mutex> lock(observed_mu_);
  observed_ = devices;
  in_use_ = std::move(in_use);
  observed_read_ = true;
  observed_at_ = t;
}

void Capacity::read_if_older(std::chrono::seconds age) {
  std::unique_lock<std::mutex> reading(reading_mu_, std::try_to_lock);
  if (!reading.owns_lock()) return;  // another request is reading it now
  const auto t = std::chrono::steady_clock::now();
  if (t - read_steady_ < age) return;
  read();
  read_steady_ = std::chrono::steady_clock::now();
}

int Capacity::observed_for(const PoolConfig& p, const std::map<std::string, int>& observed) {
  if (p.accelerator == "cpu") {
    auto it = observed.find("cpu");
    return it == observed.end() ? 0 : it->second;
  }
  int n = 0;
  for (const auto& [profile, count] : observed) {
    if (profile == "cpu") continue;
    if (p.accelerator == "any" || profile == p.accelerator) n += count;
  }
  return n;
}


namespace {

// The family names of a text exposition (its "# TYPE name kind" lines).
std::set<std::string> family_names(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    const size_t end = line.find(' ', 7);
    names.insert(line.substr(7, end == std::string::npos ? std::string::npos : end - 7));
  }
  return names;
}

// `text` without the families named in `drop` (each family is its HELP and TYPE lines and the
// samples after them): a job cannot add a second family of a name the service emits.
std::string without_families(const std::string& text, const std::set<std::string>& drop) {
  std::string out;
  out.reserve(text.size());
  bool skipping = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size() - 1;
    std::string_view line(text.data() + pos, nl + 1 - pos);
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::string_view rest = line.substr(7);
      const size_t end = rest.find_first_of(" \n");
      skipping = drop.count(std::string(rest.substr(0, end))) > 0;
    }
    if (!skipping) out.append(line);
    pos = nl + 1;
  }
  return out;
}

}  // namespace

bool Capacity::reports_fleet_gauges() {
  const double window = ServiceCore::kLiveBeats * std::chrono::duration<double>(core_.options.heartbeat).count();
  auto live = core_.store->live_replicas(core_.now() - window);
  if (!live.is_ok()) return fleet_reporter_.load();  // the store did not answer: as at the last scrape
  const store::ReplicaRow* first = nullptr;
  for (const auto& r : *live) {
    if (first == nullptr || r.started_at < first->started_at ||
        (r.started_at == first->started_at && r.name < first->name)) {
      first = &r;
    }
  }
  // None live (one trainerd on SQLite beats nowhere; a replica back from a stop before its beat
  // finds its own row stale and others' too): this one reports.
  const bool reporter = first == nullptr || first->name == core_.options.replica;
  fleet_reporter_.store(reporter);
  return reporter;
}

std::string Capacity::metrics_text() {
  std::string own;
  if (reports_fleet_gauges()) {
    refresh_gauges();
    own = core_.metrics.render();
  } else {
    // Another live replica publishes the fleet's gauges: the same store's figures under a second
    // `instance` would count every claim and run once per replica in a sum over instances.
    const std::set<std::string> fleet = {
        std::string(telemetry::metrics::PoolClaims::kPrometheusName),
        std::string(telemetry::metrics::PoolDevicesClaimed::kPrometheusName),
        std::string(telemetry::metrics::PoolDevicesDeclared::kPrometheusName),
        std::string(telemetry::metrics::PoolDevicesObserved::kPrometheusName),
        std::string(telemetry::metrics::WorkloadDevicesClaimed::kPrometheusName),
        std::string(telemetry::metrics::WorkloadDevicesQuota::kPrometheusName),
        std::string(telemetry::metrics::RunActive::kPrometheusName),
        std::string(telemetry::metrics::PipelineActive::kPrometheusName)};
    own = without_families(core_.metrics.render(), fleet);
  }
  const std::string jobs = core_.relay.render_prometheus(core_.now());
  if (!jobs.empty()) own += without_families(jobs, family_names(own));
  return own;
}

Status Capacity::ingest_job_metrics(std::string_view otlp_json, const std::string& run_id) {
  return core_.relay.ingest(otlp_json, core_.now(), run_id);
}

void Capacity::refresh_gauges() {
  auto claims = core_.store->list_claims();
  auto workloads = core_.store->list_workloads();
  if (!claims.is_ok() || !workloads.is_ok()) return;
  std::map<std::string, int> observed;
  bool read;
  {
    std::lock_guard<std::mutex> lock(observed_mu_);
    observed = observed_;
    read = observed_read_;
  }
  std::vector<PoolGauge> pools;
  for (const auto& p : core_.options.config.pools) {
    PoolGauge g;
    g.accelerator = p.accelerator;
    g.serving = p.serving;
    g.declared = declared_at(p, core_.now());  // DECLARED: with the windows open now
    if (read) g.observed = observed_for(p, observed);
    for (const auto& c : *claims) {
      if (c.pool != p.name) continue;
      if (c.state == "GRANTED") {
        ++g.granted_claims;
        g.granted_devices += c.devices;
      } else {
        ++g.queued_claims;
        g.queued_devices += c.devices;
      }
    }
    pools.push_back(g);
  }
  core_.metrics.set_pools(pools);
  std::vector<WorkloadGauge> wg;
  for (const auto& w : *workloads) {
    WorkloadGauge g;
    g.name = w.value("name", std::string());
    g.quota = w.value("gpuQuota", 0);
    for (const auto& c : *claims) {
      if (c.workload_id != w.value("id", std::string())) continue;
      (c.state == "GRANTED" ? g.granted_devices : g.queued_devices) += c.devices;
    }
    wg.push_back(g);
  }
  core_.metrics.set_workloads(wg);
  std::map<Phase, int> active;
  for (int i = 0; i < kPhaseCount; ++i) {
    Phase p = phase_at(i);
    if (is_terminal(p)) continue;
    store::RunFilter f;
    f.phases = {phase_name(p)};
    f.limit = 0;
    auto page = core_.store->list_run_rows(f);
    if (!page.is_ok()) return;
    active[p] = static_cast<int>(page->total);
  }
  core_.metrics.set_runs_active(active);
}

Result<std::map<std::string, store::ClaimRow>> Capacity::claims_by_owner() {
  auto claims = core_.store->list_claims();
  if (!claims.is_ok()) return claims.status();
  std::map<std::string, store::ClaimRow> out;
  for (auto& c : *claims) out[c.owner] = c;
  return out;
}

std::string Capacity::never_granted(const std::string& pool, int devices) {
  const PoolConfig* p = pool_named(pool);
  const double t = core_.now();
  if (p == nullptr || devices <= peak_from(*p, t)) return "";
  std::string windows;
  for (const auto& w : p->windows) windows += (windows.empty() ? "" : "; ") + window_text(w, t);
  return "pool " + p->name + " can never hold this claim of " + std::to_string(devices) + " device" +
         (devices == 1 ? "" : "s") + ": it declares " + std::to_string(p->declared) +
         (windows.empty() ? std::string() : " and no remaining window adds enough (windows: " + windows + ")") +
         "; start it again with fewer devices";
}

// A run with execution.gpus N > 0 goes to a GPU pool. Where the deployment declares no GPU
// training pool, it goes to a CPU pool, whose declared devices are CPU slots: it holds N of them
// and trains as N data-parallel ranks on the CPU (docs/data-parallel.md). A CPU run (gpus 0)
// holds one slot.
Result<const PoolConfig*> Capacity::choose_pool(int gpus, int devices) {
  bool gpu_pools = false;
  for (const auto& p : core_.options.config.pools) gpu_pools = gpu_pools || (!p.serving && p.accelerator != "cpu");
  const bool on_cpu = gpus == 0 || !gpu_pools;
  const double t = core_.now();
  const PoolConfig* best = nullptr;
  int best_peak = 0;
  std::string seen;
  for (const auto& p : core_.options.config.pools) {
    if (p.serving) continue;
    bool cpu_pool = p.accelerator == "cpu";
    if (on_cpu != cpu_pool) continue;
    std::string windows;
    for (const auto& w : p.windows) windows += (windows.empty() ? "" : "; ") + window_text(w, t);
    seen += (seen.empty() ? "" : ", ") + p.name + " (maxClaim " + std::to_string(p.max_claim) + ", declared " +
            std::to_string(p.declared) + (windows.empty() ? std::string() : ", windows: " + windows) + ")";
    // Now, or once a window still to come opens: a claim waits for it.
    const int peak = peak_from(p, t);
    if (devices <= p.max_claim && devices <= peak && (!best || peak > best_peak)) {
      best = &p;
      best_peak = peak;
    }
  }
  if (best) return best;
  std::string kind = on_cpu ? "CPU" : "GPU";
  return field_status(StatusCode::kFailedPrecondition, "execution.gpus",
                      "no " + kind + " training pool can ever hold a claim of " + std::to_string(devices) + " device" +
                          (devices == 1 ? "" : "s") +
                          (seen.empty() ? std::string(" (the deployment declares no such pool)")
                                        : " (pools: " + seen + ")") +
                          (seen.find("windows:") == std::string::npos
                               ? std::string("; ask for fewer devices")
                               : std::string("; no remaining window adds enough; ask for fewer devices")));
}

}  // namespace trainer::service

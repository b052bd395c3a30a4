// Capacity (pools, claims, quotas), cost settlement, and the gauges of /metrics.
#include <algorithm>

#include "service/service_state.h"

namespace trainer::service {

const PoolConfig* ServiceImpl::pool_named(const std::string& name) const {
  for (const auto& p : opt_.config.pools) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// Moves the time of an ended job into the run's cost.
void ServiceImpl::settle_cost(RunRecord& run, double t) {
  if (run.job && !run.job->ended_at) {
    const double end = run.job->end_guess.value_or(t);
    const double seconds = std::max(0.0, end - run.job->started_at) * run.devices;
    run.job->ended_at = end;
    run.accumulated_seconds += seconds;
    const PoolConfig* pool = pool_named(run.pool);
    metrics_.gpu_time(run.workload_name, pool ? pool->accelerator : "unknown", seconds);
  }
  run.view["cost"] = {{"gpuSeconds", run.accumulated_seconds}, {"estimated", false}};
}

void ServiceImpl::read_capacity() {
  auto devices = backend_->observed_devices();
  std::lock_guard<std::mutex> lock(observed_mu_);
  observed_ = devices;
  observed_read_ = true;
}

int ServiceImpl::observed_for(const PoolConfig& p, const std::map<std::string, int>& observed) {
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

Result<json> ServiceImpl::capacity() {
  auto claims = store_->list_claims();
  if (!claims.is_ok()) return claims.status();
  auto workloads = store_->list_workloads();
  if (!workloads.is_ok()) return workloads.status();
  std::map<std::string, std::string> names;
  for (const auto& w : *workloads) names[w.value("id", std::string())] = w.value("name", std::string());
  std::map<std::string, int> observed;
  bool read;
  {
    std::lock_guard<std::mutex> lock(observed_mu_);
    observed = observed_;
    read = observed_read_;
  }
  json pools = json::array();
  for (const auto& p : opt_.config.pools) {
    int granted = 0, queued = 0;
    for (const auto& c : *claims) {
      if (c.pool != p.name) continue;
      (c.state == "GRANTED" ? granted : queued) += c.devices;
    }
    json pj = {{"name", p.name},         {"accelerator", p.accelerator}, {"serving", p.serving},
               {"declared", p.declared}, {"maxClaim", p.max_claim},      {"granted", granted},
               {"queued", queued},       {"free", std::max(0, p.declared - granted)}};
    if (read) pj["observed"] = observed_for(p, observed);
    pools.push_back(pj);
  }
  json cl = json::array();
  std::map<std::string, std::pair<int, int>> per_workload;
  for (const auto& c : *claims) {
    cl.push_back({{"kind", c.kind},
                  {"owner", c.owner},
                  {"workload", names.count(c.workload_id) ? names[c.workload_id] : c.workload_id},
                  {"devices", c.devices},
                  {"pool", c.pool},
                  {"state", c.state},
                  {"since", c.since}});
    auto& pw = per_workload[c.workload_id];
    (c.state == "GRANTED" ? pw.first : pw.second) += c.devices;
  }
  json quotas = json::array();
  for (const auto& w : *workloads) {
    auto pw = per_workload[w.value("id", std::string())];
    quotas.push_back({{"workload", w.value("name", std::string())},
                      {"quota", w.value("gpuQuota", json(nullptr))},
                      {"held", pw.first},
                      {"queued", pw.second}});
  }
  return json{{"pools", pools}, {"claims", cl}, {"quotas", quotas}};
}

std::string ServiceImpl::metrics_text() {
  refresh_gauges();
  return metrics_.render();
}

void ServiceImpl::refresh_gauges() {
  auto claims = store_->list_claims();
  auto workloads = store_->list_workloads();
  if (!claims.is_ok() || !workloads.is_ok()) return;
  std::map<std::string, int> observed;
  bool read;
  {
    std::lock_guard<std::mutex> lock(observed_mu_);
    observed = observed_;
    read = observed_read_;
  }
  std::vector<PoolGauge> pools;
  for (const auto& p : opt_.config.pools) {
    PoolGauge g;
    g.accelerator = p.accelerator;
    g.serving = p.serving;
    g.declared = p.declared;
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
  metrics_.set_pools(pools);
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
  metrics_.set_workloads(wg);
  std::map<Phase, int> active;
  for (int i = 0; i < kPhaseCount; ++i) {
    Phase p = phase_at(i);
    if (is_terminal(p)) continue;
    store::RunFilter f;
    f.phases = {phase_name(p)};
    f.limit = 0;
    auto page = store_->list_run_rows(f);
    if (!page.is_ok()) return;
    active[p] = static_cast<int>(page->total);
  }
  metrics_.set_runs_active(active);
}

}  // namespace trainer::service

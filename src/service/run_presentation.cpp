// Runs out: one run, pages of runs (with the cache of ended runs' text), events (long poll),
// step metrics and hyperparameters.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "service/service_state.h"

namespace trainer::service {
namespace {

std::string phase_list() {
  std::string s;
  for (int i = 0; i < kPhaseCount; ++i) s += std::string(i ? ", " : "") + phase_name(phase_at(i));
  return s;
}

// What a list shows for a run whose stored document cannot be read (until the driver fails it).
json unreadable_run(const store::RunRow& row, const Status& why) {
  return {{"runId", row.id},
          {"workload", {{"id", row.workload_id}}},
          {"phase", row.phase},
          {"failureReason", why.message()}};
}

constexpr double kBytesPerGb = 1024.0 * 1024.0 * 1024.0;

// A stored step as `runs metrics` shows it: the step as the job reported it, plus the figures
// docs/api.md names at top level (memory in GiB; for reinforcement steps the reward, the shares
// of zero-spread groups and of rollouts scored zero and full, kl, idle fractions), the other
// scalar RL figures under `measured`, and each reward term's weighted mean under `rewardTerms`
// (with `total`, the mean reward).
json present_step(json s) {
  if (s.contains("memory") && s["memory"].is_object()) {
    const json& m = s["memory"];
    auto gb = [&](const char* key) -> std::optional<double> {
      if (!m.contains(key) || !m[key].is_number()) return std::nullopt;
      return m[key].get<double>() / kBytesPerGb;
    };
    if (auto v = gb("allocatedPeakBytes")) s["maxMemoryGb"] = *v;
    if (auto v = gb("reservedPeakBytes")) {
      s["maxMemoryReservedGb"] = *v;
      // The device memory the process held at its peak: the allocator's and what lies outside it.
      const json usage = m.value("usage", json::object());
      const double outside = usage.contains("outsideAllocator") && usage["outsideAllocator"].is_number()
                                 ? usage["outsideAllocator"].get<double>()
                                 : 0.0;
      s["maxDeviceMemoryGb"] = *v + outside / kBytesPerGb;
    }
  }
  if (!s.contains("rl") || !s["rl"].is_object()) return s;
  const json& rl = s["rl"];
  static const std::pair<const char*, const char*> kNamed[] = {
      {"reward", "rewardMean"},           {"zeroSpreadGroupShare", "zeroStdGroupShare"},
      {"zeroRewardShare", "rewardZeroShare"}, {"fullRewardShare", "rewardFullShare"},
      {"kl", "kl"},                       {"trainerIdle", "trainerIdle"},
      {"rolloutIdle", "rolloutIdle"}};
  json measured = json::object();
  for (auto it = rl.begin(); it != rl.end(); ++it) {
    if (it->is_number()) measured[it.key()] = *it;
  }
  for (const auto& [name, key] : kNamed) {
    if (measured.contains(key)) {
      s[name] = measured[key];
      measured.erase(key);
    }
  }
  json terms = json::object();
  for (const auto& t : rl.value("terms", json::array())) {
    if (t.is_object() && t.contains("name") && t["name"].is_string()) terms[t["name"].get<std::string>()] = t.value("mean", 0.0);
  }
  if (s.contains("reward")) terms["total"] = s["reward"];
  s["measured"] = std::move(measured);
  s["rewardTerms"] = std::move(terms);
  return s;
}

}  // namespace

Result<std::string> ServiceImpl::list_runs_text(const RunListQuery& q) {
  store::RunFilter f;
  if (q.phase == "open") {
    for (int i = 0; i < kPhaseCount; ++i) {
      if (!is_terminal(phase_at(i))) f.phases.push_back(phase_name(phase_at(i)));
    }
  } else if (!q.phase.empty()) {
    if (!parse_phase(q.phase)) {
      return invalid_field("phase", "'" + q.phase + "' is not a phase; use open or one of " + phase_list());
    }
    f.phases.push_back(q.phase);
  }
  if (q.limit < 1 || q.limit > 1000) return invalid_field("limit", "must be between 1 and 1000");
  if (q.offset < 0) return invalid_field("offset", "must not be negative");
  // A page shows only what the store's change_count() covers (runs, workloads, claims), except
  // the estimated cost of a running job, which moves with the clock: pages without one are
  // kept until the version changes, so a repeated list costs a lookup.
  auto counted = store_->change_count();
  if (!counted.is_ok()) return counted.status();
  const uint64_t version = *counted;
  const std::string page_key = q.phase + '\n' + q.workload + '\n' + std::to_string(q.limit) + '\n' +
                               std::to_string(q.offset);
  {
    std::lock_guard<std::mutex> lock(pages_mu_);
    auto it = pages_.find(page_key);
    if (it != pages_.end() && it->second.first == version) return it->second.second;
  }
  if (!q.workload.empty()) {
    auto w = resolve_workload(q.workload, "workload");
    if (!w.is_ok()) return w.status();
    f.workload_id = w->value("id", std::string());
  }
  f.limit = q.limit;
  f.offset = q.offset;
  auto page = store_->list_run_rows(f);
  if (!page.is_ok()) return page.status();
  auto claims = capacity_.claims_by_owner();
  if (!claims.is_ok()) return claims.status();
  auto workloads = store_->list_workloads();
  if (!workloads.is_ok()) return workloads.status();
  std::map<std::string, std::string> names;
  for (const auto& w : *workloads) names[w.value("id", std::string())] = w.value("name", std::string());
  // The response is assembled from each run's presented text; an ended run's text only changes
  // when its document or its workload's name does, so it is made once and reused.
  bool timeless = true;  // no running job's estimated cost on the page
  std::string body = "{\"runs\":[";
  for (size_t k = 0; k < page->rows.size(); ++k) {
    const store::RunRow& row = page->rows[k];
    if (k) body += ',';
    auto phase = parse_phase(row.phase);
    const bool ended = phase && is_terminal(*phase);
    const std::string workload = names.count(row.workload_id) ? names[row.workload_id] : "";
    const size_t key = std::hash<std::string>{}(row.doc) ^ (std::hash<std::string>{}(workload) << 1);
    if (ended) {
      std::lock_guard<std::mutex> lock(presented_mu_);
      auto it = presented_.find(row.id);
      if (it != presented_.end() && it->second.first == key) {
        body += it->second.second;
        continue;
      }
    }
    auto record = parse_run_record(row.doc, row.id);
    if (record.is_ok() && record->job && !record->job->ended_at) timeless = false;
    json shown = record.is_ok() ? present_run(*record, &*claims, &names) : unreadable_run(row, record.status());
    std::string text = shown.dump(-1, ' ', false, json::error_handler_t::replace);
    body += text;
    if (ended && record.is_ok()) {
      std::lock_guard<std::mutex> lock(presented_mu_);
      if (presented_.size() > kPresentedCacheSize) presented_.clear();
      presented_[row.id] = {key, std::move(text)};
    }
  }
  body += "],\"total\":" + std::to_string(page->total);
  if (q.offset + static_cast<int64_t>(page->rows.size()) < page->total) {
    body += ",\"nextOffset\":" + std::to_string(q.offset + static_cast<int64_t>(page->rows.size()));
  }
  body += "}";
  if (timeless) {
    std::lock_guard<std::mutex> lock(pages_mu_);
    if (pages_.size() >= kPagesCacheSize) pages_.clear();
    pages_[page_key] = {version, body};
  }
  return body;
}

Result<json> ServiceImpl::list_runs(const RunListQuery& q) {
  auto text = list_runs_text(q);
  if (!text.is_ok()) return text.status();
  return json::parse(*text);  // our own text, written just above
}

Result<json> ServiceImpl::get_run(const std::string& ref) {
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  return present_run(*r);
}

// Long polls wait in real time (a request's deadline), not on the service's clock.
Result<json> ServiceImpl::run_events(const std::string& ref, int64_t after, std::chrono::milliseconds wait) {
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  const std::string id = r->id;
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    const uint64_t version = core_.change_version();
    auto events = store_->run_events(id, after, 1000);
    if (!events.is_ok()) return events.status();
    if (!events->empty() || std::chrono::steady_clock::now() >= deadline || stopping_) {
      auto run = resolve_run(id, "run");
      if (!run.is_ok()) return run.status();
      return json{{"events", *events}, {"run", present_run(*run)}};
    }
    core_.wait_for_change(version, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1)));
  }
}

void ServiceImpl::subscribe_run_changes(std::function<void()> on_change) { core_.subscribe(std::move(on_change)); }

Result<json> ServiceImpl::run_metrics(const std::string& ref, int64_t limit) {
  if (limit < 1 || limit > 100000) return invalid_field("limit", "must be between 1 and 100000");
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  auto steps = store_->step_metrics(r->id, limit);
  if (!steps.is_ok()) return steps.status();
  json out = json::array();
  for (auto& s : *steps) out.push_back(present_step(std::move(s)));
  return json{{"steps", std::move(out)}};
}

Result<json> ServiceImpl::run_hparams(const std::string& ref) {
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  json config = r->view["plan"].value("config", json::object());
  json flat = json::object();
  flatten(config, "config", flat);
  // What the hash is taken over (plan::flatten_config): the native engine is left out of it.
  if (flat.value("config.engine", "") == "native") flat.erase("config.engine");
  return json{{"sha", r->view.value("settingsSha", json(nullptr))}, {"hparams", flat}};
}

Result<json> ServiceImpl::run_engine_config(const std::string& ref) {
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  if (!r->engine_config.is_object()) {
    return not_found("run " + r->id + " has no engine configuration yet: not found until the job writes it, before its "
                     "first training step (phase " + phase_name(r->phase) + ")");
  }
  // The plan's config as submitted: the request's, else (a run made by trainerd, as a branch
  // is) the stored plan's.
  json requested = r->view["plan"].value("config", json::object());
  if (auto submitted = json::parse(r->request, nullptr, false); submitted.is_object() && submitted.contains("config")) {
    requested = submitted["config"];
  }
  return json{{"runId", r->id},
              {"attempt", r->engine_config.value("attempt", json(nullptr))},
              {"requested", std::move(requested)},
              {"resolved", {{"engine", r->engine_config.value("engine", "")},
                            {"config", r->engine_config.value("config", json::object())}}}};
}

Result<json> ServiceImpl::run_engine_runtime(const std::string& ref) {
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  if (!r->engine_runtime.is_object()) {
    return not_found("run " + r->id + " has no engine runtime report yet: not found until the job writes it, once its "
                     "model is loaded (phase " + phase_name(r->phase) + ")");
  }
  json out = r->engine_runtime;
  out["runId"] = r->id;
  return out;
}

namespace {

// Where a QUEUED claim waits in its pool's queue: {"queuePosition": 1-based, "ahead": the claims
// queued before it in the same pool, in admission order (at most kMaxClaimsAhead of them), each
// {owner, kind, devices, since}}.
json queue_place(const store::ClaimRow& claim, const std::map<std::string, store::ClaimRow>& claims) {
  constexpr size_t kMaxClaimsAhead = 10;
  std::vector<const store::ClaimRow*> ahead;
  for (const auto& [owner, other] : claims) {
    if (other.state == "QUEUED" && other.pool == claim.pool && other.seq < claim.seq) ahead.push_back(&other);
  }
  std::sort(ahead.begin(), ahead.end(), [](const store::ClaimRow* a, const store::ClaimRow* b) { return a->seq < b->seq; });
  json listed = json::array();
  for (size_t i = 0; i < ahead.size() && i < kMaxClaimsAhead; ++i) {
    listed.push_back({{"owner", ahead[i]->owner}, {"kind", ahead[i]->kind}, {"devices", ahead[i]->devices},
                      {"since", ahead[i]->since}});
  }
  return {{"queuePosition", static_cast<int64_t>(ahead.size()) + 1}, {"ahead", listed}};
}

}  // namespace

// The run as the API shows it: the cost estimated while a job runs, its claim, and its
// workload's current name (runs keep the workload's id across renames).
json ServiceImpl::present_run(const RunRecord& run, const std::map<std::string, store::ClaimRow>* claims,
                              const std::map<std::string, std::string>* workload_names) {
  json out = run.public_json();
  if (workload_names) {
    auto it = workload_names->find(run.workload_id);
    if (it != workload_names->end()) out["workload"]["name"] = it->second;
  } else if (auto w = store_->get_workload(run.workload_id); w.is_ok() && w->has_value()) {
    out["workload"]["name"] = (**w).value("name", run.workload_name);
  }
  // Cost: while a job runs, an estimate of elapsed time x devices on top of ended attempts.
  if (run.job && !run.job->ended_at) {
    double elapsed = std::max(0.0, now() - run.job->started_at);
    out["cost"] = run_cost_json(run.view.value("plan", json::object()), run.accumulated_seconds + elapsed * run.devices, true);
  }
  // One run alone: its own claim, and the queue ahead of it only while it is queued (not every
  // claim: a thousand queued runs would make every get read them all).
  std::optional<std::map<std::string, store::ClaimRow>> fetched;
  std::optional<store::ClaimRow> claim;
  if (claims) {
    auto it = claims->find(run.id);
    if (it != claims->end()) claim = it->second;
  } else if (auto own = store_->get_claim(run.id); own.is_ok() && own->has_value()) {
    claim = **own;
    if (claim->state == "QUEUED") {
      auto queue = store_->list_claims_in("QUEUED", {claim->pool});
      if (queue.is_ok()) {
        fetched.emplace();
        for (auto& c : *queue) (*fetched)[c.owner] = std::move(c);
        claims = &*fetched;
      }
    }
  }
  if (claim) {
    out["claim"] = {{"pool", claim->pool},   {"devices", claim->devices},      {"state", claim->state},
                    {"since", claim->since}, {"deviceIds", claim->device_ids}};
    if (claim->state == "QUEUED" && claims) out["claim"].update(queue_place(*claim, *claims));
  }
  return out;
}

}  // namespace trainer::service

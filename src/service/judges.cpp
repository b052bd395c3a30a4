// External reward terms on the service's side (declared in service/judges.h).
#include "service/judges.h"

#include <algorithm>

#include "common/http_client.h"
#include "common/path_policy.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;

std::string declared_names(const DeploymentConfig& d) {
  std::string out;
  for (const auto& j : d.judges) out += (out.empty() ? "" : ", ") + j.name;
  return out.empty() ? "none (add judges: [{name, url}] to trainerd's configuration)" : out;
}

// A term's (or the tools') declared network, `at`.network.allow: every HOST:PORT allowed by
// trainerd's outbound.allow, else invalid_field naming the entry's field, `who` and the entry.
Status check_network(const DeploymentConfig& deployment, const std::vector<std::string>& allow, const std::string& at,
                     const std::string& who) {
  for (size_t j = 0; j < allow.size(); ++j) {
    const std::string field = at + ".network.allow[" + std::to_string(j) + "]";
    Status st = check_outbound_entry(deployment.outbound, allow[j], field);
    if (!st.is_ok()) return invalid_field(field, who + " declares network access that trainerd does not allow: " + st.message());
  }
  return Status::ok();
}

}  // namespace

Status check_reward_terms(const plan::RunConfig& config, const DeploymentConfig& deployment,
                          const std::function<Status(const std::string& name)>& served_model) {
  if (!config.is_rl()) return Status::ok();
  for (size_t i = 0; i < config.rewardTerms.size(); ++i) {
    const plan::RewardTermSpec& t = config.rewardTerms[i];
    const std::string at = "config.reward.terms[" + std::to_string(i) + "]";
    const std::optional<plan::TermKind> kind = plan::term_kind(t.kind);
    if (kind == plan::TermKind::kModel) {
      if (t.judge) {
        return invalid_field(at + ".judge", "is set by trainerd from its judges configuration; leave it out");
      }
      const std::string name = plan::term_target(t.kind);
      if (find_judge(deployment, name) == nullptr) {
        if (!served_model) {
          return invalid_field(at + ".kind", "judge '" + name + "' is not declared by this trainerd; declared: " +
                                                 declared_names(deployment));
        }
        Status served = served_model(name);
        if (!served.is_ok()) {
          return invalid_field(at + ".kind", "judge '" + name + "' is neither declared by this trainerd (declared: " +
                                                 declared_names(deployment) + ") nor a model it serves: " +
                                                 served.message());
        }
      }
    }
    if (kind == plan::TermKind::kHttp) {
      // A URL the plan names: only where trainerd's outbound.allow lets calls go (checked again
      // by the job as it connects).
      TRAINER_RETURN_IF_ERROR(check_outbound_url(deployment.outbound, plan::term_target(t.kind), at + ".kind"));
    }
    if (t.caFile) {
      // A PEM file of CA certificates, within the folders requests may name (paths.allow).
      TRAINER_RETURN_IF_ERROR(check_confined_path(deployment.paths, *t.caFile, at + ".caFile", PathKind::kFile));
    }
    TRAINER_RETURN_IF_ERROR(check_network(deployment, t.networkAllow, at, "term '" + plan::term_label(t) + "'"));
    if (kind == plan::TermKind::kRule || kind == plan::TermKind::kBundle) {
      const plan::ScoringFunction f = *plan::scoring_function(t.kind);
      // Within the folders requests may name (paths.allow), or a registered bundle's folder.
      TRAINER_RETURN_IF_ERROR(check_confined_path(deployment.paths, f.path, at + ".kind",
                                                  f.module.empty() ? PathKind::kFile : PathKind::kFolder));
    }
  }
  if (config.rl.tools) {
    TRAINER_RETURN_IF_ERROR(
        check_network(deployment, config.rl.tools->networkAllow, "config.rlHyperparams.tools", "the tools"));
  }
  return Status::ok();
}

Status check_term_path(const std::string& kind, const DeploymentConfig& deployment, const std::string& field) {
  const std::optional<plan::TermKind> k = plan::term_kind(kind);
  if (k != plan::TermKind::kRule && k != plan::TermKind::kBundle) return Status::ok();
  const std::optional<plan::ScoringFunction> f = plan::scoring_function(kind);
  if (!f) return Status::ok();
  if (k == plan::TermKind::kBundle && (f->path.empty() || f->path.front() != '/')) return Status::ok();  // by name
  return check_confined_path(deployment.paths, f->path, field, f->module.empty() ? PathKind::kFile : PathKind::kFolder);
}

json judge_instructions(const plan::Plan& p) {
  json out = json::array();
  for (size_t i = 0; i < p.config.rewardTerms.size(); ++i) {
    const plan::RewardTermSpec& t = p.config.rewardTerms[i];
    if (plan::term_kind(t.kind) != plan::TermKind::kModel) continue;
    out.push_back({{"at", "config.reward.terms[" + std::to_string(i) + "]"},
                   {"grader", t.kind},
                   {"graderInstructionsSource", plan::grader_instructions_source(t)}});
  }
  if (p.grader && plan::term_kind(*p.grader) == plan::TermKind::kModel) {
    out.push_back({{"at", "grader"}, {"grader", *p.grader}, {"graderInstructionsSource", p.graderInstructions ? "plan" : "built-in"}});
  }
  return out;
}

std::vector<const JudgeConfig*> judges_of(const json& plan, const DeploymentConfig& deployment, std::string* missing) {
  std::vector<const JudgeConfig*> out;
  const json* terms = nullptr;
  if (plan.contains("config") && plan["config"].contains("reward") && plan["config"]["reward"].contains("terms")) {
    terms = &plan["config"]["reward"]["terms"];
  }
  if (terms == nullptr || !terms->is_array()) return out;
  for (const auto& t : *terms) {
    const std::string kind = t.is_object() ? t.value("kind", std::string()) : std::string();
    if (plan::term_kind(kind) != plan::TermKind::kModel) continue;
    const std::string name = plan::term_target(kind);
    const JudgeConfig* j = find_judge(deployment, name);
    if (j == nullptr) {
      if (missing) *missing = name;
      continue;
    }
    if (std::find(out.begin(), out.end(), j) == out.end()) out.push_back(j);
  }
  return out;
}

namespace {

// The targets of the plan's model: terms, in term order, without repeats.
std::vector<std::string> model_term_names(const json& plan) {
  std::vector<std::string> out;
  if (!plan.contains("config") || !plan["config"].contains("reward") || !plan["config"]["reward"].contains("terms")) return out;
  const json& terms = plan["config"]["reward"]["terms"];
  if (!terms.is_array()) return out;
  for (const auto& t : terms) {
    const std::string kind = t.is_object() ? t.value("kind", std::string()) : std::string();
    if (plan::term_kind(kind) != plan::TermKind::kModel) continue;
    const std::string name = plan::term_target(kind);
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

}  // namespace

std::vector<std::string> endpoint_judge_names(const json& plan, const DeploymentConfig& deployment) {
  std::vector<std::string> out;
  for (auto& name : model_term_names(plan)) {
    if (find_judge(deployment, name) == nullptr) out.push_back(std::move(name));
  }
  return out;
}

bool has_judges(const json& plan) { return !model_term_names(plan).empty(); }

json judge_endpoint_json(const JudgeConfig& j) {
  json out = {{"url", j.url}, {"model", j.model.empty() ? j.name : j.model}, {"apiKeyEnv", j.api_key_env}, {"caFile", j.ca_file}};
  if (!j.proxy.empty()) out["proxy"] = j.proxy;  // outbound.proxy (never for trainerd's own endpoints)
  return out;
}

void fill_judges(json& job_plan, const DeploymentConfig& deployment, const std::map<std::string, json>& endpoint_judges) {
  if (!job_plan.contains("config") || !job_plan["config"].contains("reward")) return;
  json& terms = job_plan["config"]["reward"]["terms"];
  if (!terms.is_array()) return;
  for (auto& t : terms) {
    const std::string kind = t.is_object() ? t.value("kind", std::string()) : std::string();
    if (plan::term_kind(kind) != plan::TermKind::kModel) continue;
    const std::string name = plan::term_target(kind);
    if (const JudgeConfig* j = find_judge(deployment, name)) {
      t["judge"] = judge_endpoint_json(*j);
    } else if (auto e = endpoint_judges.find(name); e != endpoint_judges.end()) {
      t["judge"] = e->second;
    }
  }
}

JudgeProbes::~JudgeProbes() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [url, p] : probes_) {
    if (p.pending.valid()) p.pending.wait();
  }
}

JudgeProbes::Outcome JudgeProbes::probe(const JudgeConfig& judge) {
  std::string base = judge.url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  const std::string url = base + "/v1/models";
  HttpResponse r = http_call(
      {.method = "GET", .url = url, .timeout_seconds = kProbeTimeoutSeconds, .ca_file = judge.ca_file, .proxy = judge.proxy});
  if (r.failure != HttpFailure::kNone) return {r.detail, r.failure == HttpFailure::kTls};
  if (r.status >= 500) return {"GET " + url + " answered HTTP " + std::to_string(r.status), false};
  return {};
}

bool JudgeProbes::answers(const JudgeConfig& judge, std::string* last_error, bool* tls_failed) {
  std::lock_guard<std::mutex> lock(mu_);
  // By URL and CA file: the same judge trusted differently is another probe.
  Probe& p = probes_[judge.url + "\n" + judge.ca_file];
  const auto now = std::chrono::steady_clock::now();
  if (p.pending.valid() && p.pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    p.last = p.pending.get();
    p.answered = p.last.error.empty();
    if (p.answered) p.answered_at = now;
  }
  if (p.answered && now - p.answered_at < kFreshFor) return true;
  p.answered = false;
  if (!p.pending.valid()) p.pending = std::async(std::launch::async, probe, judge);
  if (last_error) *last_error = p.last.error;
  if (tls_failed) *tls_failed = p.last.tls_failed;
  return false;
}

}  // namespace trainer::service

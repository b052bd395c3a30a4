// External reward terms on the service's side (declared in service/judges.h).
#include "service/judges.h"

#include <httplib.h>

#include <algorithm>
#include <filesystem>

namespace trainer::service {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string declared_names(const DeploymentConfig& d) {
  std::string out;
  for (const auto& j : d.judges) out += (out.empty() ? "" : ", ") + j.name;
  return out.empty() ? "none (add judges: [{name, url}] to trainerd's configuration)" : out;
}

// "" when the judge answers, else why not.
std::string probe(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t slash = scheme == std::string::npos ? std::string::npos : url.find('/', scheme + 3);
  const std::string base = slash == std::string::npos ? url : url.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  httplib::Client client(base);
  const auto limit = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(JudgeProbes::kProbeTimeoutSeconds));
  client.set_connection_timeout(limit);
  client.set_read_timeout(limit);
  auto res = client.Get(prefix + "/v1/models");
  if (!res) return "GET " + url + "/v1/models: " + httplib::to_string(res.error());
  if (res->status >= 500) return "GET " + url + "/v1/models answered HTTP " + std::to_string(res->status);
  return "";
}

}  // namespace

Status check_reward_terms(const plan::RunConfig& config, const DeploymentConfig& deployment) {
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
        return invalid_field(at + ".kind", "judge '" + name + "' is not declared by this trainerd; declared: " +
                                               declared_names(deployment));
      }
    }
    if (kind == plan::TermKind::kRule || kind == plan::TermKind::kBundle) {
      std::string target = plan::term_target(t.kind);
      const bool package = kind == plan::TermKind::kBundle && target.find('#') != std::string::npos;
      if (package) target = target.substr(0, target.find('#'));
      std::error_code ec;
      if (!fs::path(target).is_absolute()) {
        return invalid_field(at + ".kind", "'" + target + "' must be an absolute path on trainerd's host (jobs run elsewhere than your shell)");
      }
      const bool found = package ? fs::is_directory(target, ec) : fs::is_regular_file(target, ec);
      if (!found) {
        return invalid_field(at + ".kind", "'" + target + "': no such " + (package ? "folder" : "file") + " on trainerd's host");
      }
    }
  }
  return Status::ok();
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

void fill_judges(json& job_plan, const DeploymentConfig& deployment) {
  if (!job_plan.contains("config") || !job_plan["config"].contains("reward")) return;
  json& terms = job_plan["config"]["reward"]["terms"];
  if (!terms.is_array()) return;
  for (auto& t : terms) {
    const std::string kind = t.is_object() ? t.value("kind", std::string()) : std::string();
    if (plan::term_kind(kind) != plan::TermKind::kModel) continue;
    if (const JudgeConfig* j = find_judge(deployment, plan::term_target(kind))) {
      t["judge"] = {{"url", j->url}, {"model", j->model.empty() ? j->name : j->model}, {"apiKeyEnv", j->api_key_env}};
    }
  }
}

JudgeProbes::~JudgeProbes() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [url, p] : probes_) {
    if (p.pending.valid()) p.pending.wait();
  }
}

bool JudgeProbes::answers(const JudgeConfig& judge, std::string* last_error) {
  std::lock_guard<std::mutex> lock(mu_);
  Probe& p = probes_[judge.url];
  const auto now = std::chrono::steady_clock::now();
  if (p.pending.valid() && p.pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    p.last_error = p.pending.get();
    p.answered = p.last_error.empty();
    if (p.answered) p.answered_at = now;
  }
  if (p.answered && now - p.answered_at < kFreshFor) return true;
  p.answered = false;
  if (!p.pending.valid()) p.pending = std::async(std::launch::async, probe, judge.url);
  if (last_error) *last_error = p.last_error;
  return false;
}

}  // namespace trainer::service

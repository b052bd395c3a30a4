// Judges and the other external reward terms of RL plans, on the service's side
// (docs/graders.md): what a submission is checked for, what the job's plan is given, and whether
// a judge answers (the WAITING_FOR_GRADER phase).
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "plan/plan.h"
#include "service/config.h"

namespace trainer::service {

// Refuses, naming the term's field: a model: term whose judge the configuration does not
// declare (the message lists those it does), a `judge` written in a submitted plan (it is the
// deployment's), and a rule:/bundle: term whose file or folder is not an absolute path that
// exists on this host.
// `served_model` (runs only): a model: term that names no declared judge may name a model this
// trainerd serves at an endpoint (a base model's name, a run id, a registered model id): it
// answers whether `name` is one (errors say why not); null = declared judges only.
Status check_reward_terms(const plan::RunConfig& config, const DeploymentConfig& deployment,
                          const std::function<Status(const std::string& name)>& served_model = nullptr);

// A rule:/PATH or bundle:/FOLDER#MODULE term or grader `kind`: its file or folder within the
// deployment's paths.allow (docs/security.md, "Paths"), errors naming `field`; other kinds
// (a registered bundle's name among them) pass.
Status check_term_path(const std::string& kind, const DeploymentConfig& deployment, const std::string& field);

// The run's judges and where each one's instructions come from (docs/graders.md), shown by
// `runs get` and a dry run: [{at: "config.reward.terms[I]" | "grader", grader: KIND,
// graderInstructionsSource: "term" | "plan" | "built-in"}], the plan's model: grader last.
nlohmann::json judge_instructions(const plan::Plan& plan);

// The judges the plan's model: terms use, in term order, without repeats. A name the
// configuration does not declare (a judge on an endpoint, endpoint_judge_names) is returned in
// *missing.
std::vector<const JudgeConfig*> judges_of(const nlohmann::json& plan, const DeploymentConfig& deployment,
                                          std::string* missing);

// The endpoint a job's model: grader is given for `judge`: {url, model, apiKeyEnv, caFile}.
nlohmann::json judge_endpoint_json(const JudgeConfig& judge);

// The names of the plan's model: terms that the configuration does not declare as judges: models
// trainerd serves at endpoints of its own (DEPLOYING_GRADER finds or creates them), in term
// order, without repeats.
std::vector<std::string> endpoint_judge_names(const nlohmann::json& plan, const DeploymentConfig& deployment);

// Whether the plan has a model: term (the run passes DEPLOYING_GRADER and WAITING_FOR_GRADER).
bool has_judges(const nlohmann::json& plan);

// Writes config.reward.terms[i].judge (judge_endpoint_json) into the plan given to the job; a
// term naming a model served at one of trainerd's endpoints gets endpoint_judges[name] ({url,
// model, apiKeyEnv, caFile}: trainerd's forwarding route of its endpoint).
void fill_judges(nlohmann::json& job_plan, const DeploymentConfig& deployment,
                 const std::map<std::string, nlohmann::json>& endpoint_judges = {});

// Whether judges answer, asked in the background so the driver never waits on the network: the
// first question starts a probe (GET URL/v1/models; any HTTP answer below 500 counts), later ones
// read its outcome. A judge that answered stays answering for kFreshFor. A probe whose TLS
// handshake failed (an untrusted certificate) reports it as such: waiting will not mend it.
//
// Thread safety: every method may be called from any thread (mu_ guards the map).
class JudgeProbes {
 public:
  static constexpr std::chrono::seconds kFreshFor{30};
  static constexpr double kProbeTimeoutSeconds = 2;

  ~JudgeProbes();  // waits for probes in flight (each bounded by kProbeTimeoutSeconds)

  // True when `judge` answered recently; false while a probe runs or after one failed (the next
  // call starts another). `last_error` receives why the last probe failed, if one did.
  // `tls_failed` (optional) is set when the last probe failed in its TLS handshake.
  bool answers(const JudgeConfig& judge, std::string* last_error, bool* tls_failed = nullptr);

 private:
  struct Outcome {
    std::string error;        // "" when the judge answered, else why not
    bool tls_failed = false;  // the error is a failed TLS handshake
  };
  struct Probe {
    std::future<Outcome> pending;
    std::chrono::steady_clock::time_point answered_at{};
    bool answered = false;
    Outcome last;
  };
  static Outcome probe(const JudgeConfig& judge);
  std::mutex mu_;
  std::map<std::string, Probe> probes_;  // by judge URL; guarded by mu_
};

}  // namespace trainer::service

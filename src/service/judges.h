// Judges and the other external reward terms of RL plans, on the service's side
// (docs/graders.md): what a submission is checked for, what the job's plan is given, and whether
// a judge answers (the WAITING_FOR_GRADER phase).
#pragma once

#include <chrono>
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
Status check_reward_terms(const plan::RunConfig& config, const DeploymentConfig& deployment);

// The judges the plan's model: terms use, in term order, without repeats. A name the
// configuration no longer declares is returned as a nullptr entry's name in *missing.
std::vector<const JudgeConfig*> judges_of(const nlohmann::json& plan, const DeploymentConfig& deployment,
                                          std::string* missing);

// Writes config.reward.terms[i].judge ({url, model, apiKeyEnv}) into the plan given to the job.
void fill_judges(nlohmann::json& job_plan, const DeploymentConfig& deployment);

// Whether judges answer, asked in the background so the driver never waits on the network: the
// first question starts a probe (GET URL/v1/models; any HTTP answer below 500 counts), later ones
// read its outcome. A judge that answered stays answering for kFreshFor.
//
// Thread safety: every method may be called from any thread (mu_ guards the map).
class JudgeProbes {
 public:
  static constexpr std::chrono::seconds kFreshFor{30};
  static constexpr double kProbeTimeoutSeconds = 2;

  ~JudgeProbes();  // waits for probes in flight (each bounded by kProbeTimeoutSeconds)

  // True when `judge` answered recently; false while a probe runs or after one failed (the next
  // call starts another). `last_error` receives why the last probe failed, if one did.
  bool answers(const JudgeConfig& judge, std::string* last_error);

 private:
  struct Probe {
    std::future<std::string> pending;  // "" when the judge answered, else why not
    std::chrono::steady_clock::time_point answered_at{};
    bool answered = false;
    std::string last_error;
  };
  std::mutex mu_;
  std::map<std::string, Probe> probes_;  // by judge URL; guarded by mu_
};

}  // namespace trainer::service

// Workloads: the tasks runs specialise a model for. Each has a name, a GPU quota, an evaluation
// setting (dataset, grader, judge instructions) with its history, three refs (base, candidate,
// champion) pointing at registered models, and an audit log of every change (workloads.cpp);
// and its score tables, built from the completed evaluations under one setting (score_tables.cpp).
//
// Thread safety: every method may be called from any thread; the changes take the core's mu.
// Methods named *_locked need it held (service_core.h).
#pragma once

#include <functional>
#include <string>

#include "service/base_models.h"
#include "service/capacity.h"
#include "service/datasets.h"
#include "service/service_core.h"

namespace trainer::service {

class Workloads {
 public:
  // What a workload needs from the model registry.
  struct Hooks {
    // The REGISTERED model `target` may point at as ref `which` of workload `w` (a model id or
    // prefix; for base also a base model's name; for candidate and champion also a completed run
    // of the workload); mu held.
    std::function<Result<json>(const json& w, const std::string& which, const std::string& target)> ref_target_locked;
  };

  Workloads(ServiceCore& core, BaseModels& base_models, Datasets& datasets, Capacity& capacity, Hooks hooks)
      : core_(core), base_models_(base_models), datasets_(datasets), capacity_(capacity), hooks_(std::move(hooks)) {}

  // Service::create_workload, list_workloads, get_workload, update_workload, set_evaluation,
  // get_ref, set_ref, workload_history, workload_scores.
  Result<json> create(const json& body);
  // `archived`: "" hides archived workloads, "include" shows them too, "only" shows only them.
  Result<json> list(const std::string& archived = "");
  Result<json> get(const std::string& ref) { return resolve(ref, "workload"); }
  Result<json> update(const std::string& ref, const json& body);
  Result<json> set_evaluation(const std::string& ref, const json& body);
  Result<json> get_ref(const std::string& ref, const std::string& which);
  Result<json> set_ref(const std::string& ref, const std::string& which, const json& body);
  Result<json> history(const std::string& ref);
  Result<json> scores(const std::string& ref, const ScoreQuery& query);  // score_tables.cpp
  // Archive: hidden from `list`, still answering `get`, refusing new work (runs, evaluations,
  // endpoints); refused while work is in progress, naming each item. Unarchive undoes it.
  Result<json> archive(const std::string& ref);
  Result<json> unarchive(const std::string& ref);

  // For the other parts: a workload by name, id or unique id prefix; errors name `field`.
  // Reads the store only.
  Result<json> resolve(const std::string& ref, const std::string& field);

  // failed_precondition naming `field` when the workload `w` is archived (it takes no new work).
  static Status check_takes_work(const json& w, const std::string& field);

 private:
  // The workload's open runs, evaluations and endpoints, each named ("run ID (PHASE)"); mu held.
  Result<std::vector<std::string>> work_in_progress(const std::string& id);

  ServiceCore& core_;
  BaseModels& base_models_;
  Datasets& datasets_;
  Capacity& capacity_;
  const Hooks hooks_;
};

// The grader every workload has unless it names another.
inline constexpr const char* kDefaultGrader = "json-label-match";

// invalid_field(field) unless `grader` is json-label-match, model:X, http:X, bundle:X or
// rule:X; with `deployed`, also checked against what this trainerd offers (its judges).
Status check_grader(const std::string& field, const std::string& grader, const DeploymentConfig* deployed = nullptr);

}  // namespace trainer::service

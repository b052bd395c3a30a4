// Endpoints (docs/serving.md, "Endpoints"): a base model, or a candidate's adapter on its base
// model, served by `trainer-job serve` at an OpenAI-compatible address that trainerd forwards
// requests to. Each endpoint is a task of the kernel's "endpoint" kind: AWAITING_CAPACITY until
// admission grants its SERVING claim, STARTING while its process comes up, READY once it answers;
// then DELETING (its process asked to stop) and DELETED, or FAILED with a reason naming how its
// process ended. The claim is held from creation until DELETED or FAILED.
//
// Thread safety: every method may be called from any thread; create() and remove() take the
// core's mu; step_task() runs with it held (the kernel's step); chat() takes no lock and calls
// the serving process outside any transaction.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "service/capacity.h"
#include "service/endpoint_meters.h"
#include "service/service_core.h"

namespace trainer::service {

// The endpoint's phase table (the kernel's "endpoint" kind).
const tasks::PhaseTable& endpoint_phase_table();

class Endpoints {
 public:
  // What endpoints ask of parts that ServiceImpl still keeps (evaluations.cpp, workloads.cpp).
  struct Hooks {
    // The model `ref` names, as an evaluation resolves it: {ref, kind, baseModel, baseModelHash,
    // adapterPath?, artifactUri?, runId?, modelId?, workloadId?}; errors name "model".
    std::function<Result<json>(const std::string& ref)> resolve_model;
    // A workload by name, id or prefix; errors name `field`.
    std::function<Result<json>(const std::string& ref, const std::string& field)> resolve_workload;
    // What calls `model` of endpoint `endpoint_id` and has not ended: runs whose judge it is,
    // curations whose judge and distillations whose teacher it is ("run ID", "curation ID", ...).
    std::function<Result<std::vector<std::string>>(const std::string& endpoint_id, const std::string& model)> judge_users;
  };

  Endpoints(ServiceCore& core, Capacity& capacity, Hooks hooks);

  // Service::create_endpoint, list_endpoints, get_endpoint, delete_endpoint, endpoint_chat.
  Result<json> create(const json& body);
  Result<json> list(const std::string& phase);
  Result<json> get(const std::string& ref);
  // LoRA adapters one serving process holds at once (its --max-adapters).
  static constexpr int kMaxAdaptersLoaded = 4;
  // What an endpoint of this deployment can serve (`endpoints info`).
  Result<json> info() const;
  // Refused while the endpoint serves more than one model (each is named).
  Result<json> remove(const std::string& ref);
  // Service::detach_endpoint_model: stops serving `model` (a name, run id, model id or prefix);
  // detaching the last model takes the endpoint down (DELETING).
  Result<json> detach(const std::string& ref, const std::string& model);
  // Service::set_endpoint_model_enabled: a disabled model stays attached, but trainerd answers
  // 409 for it.
  Result<json> set_enabled(const std::string& ref, const std::string& model, bool enabled);
  // endpoint_forwarding.cpp: a whole answer, or for `stream: true` the call to relay.
  Result<ForwardedAnswer> chat(const std::string& ref, const std::string& body);

  // The endpoints' families for trainerd's /metrics (endpoint_meters.h): the forwarded requests'
  // counts, tokens and latencies, and each READY process's KV blocks, read now.
  std::string metrics_text();

  // Runs' judges on endpoints (docs/graders.md, "Judges on endpoints"):
  // Whether `model` is something an endpoint can serve (a submission's check; errors say why not).
  Status servable(const std::string& model);
  // DEPLOYING_GRADER (mu held, inside the run's step): {endpointId, model: its request name} of an
  // endpoint not ended that serves `model`, else of one created for it (a base model's in
  // `workload_id`, a candidate's in its own workload).
  Result<json> judge_endpoint_locked(const std::string& model, const std::string& workload_id);

  // The kernel's "endpoint" kind, added by ServiceImpl.
  tasks::TaskKind& task_kind() { return tasks_; }

  // For the other parts: whether `owner`'s claim belongs to an endpoint that still holds it
  // (a restarted trainerd keeps it).
  Result<bool> holds_claim(const std::string& owner);

 private:
  // The pool an endpoint's device is claimed from; null when the deployment has none.
  const PoolConfig* serving_pool() const;
  std::string dir_of(const std::string& id) const;
  // A document stored before models could be attached (its base listed beside a candidate's
  // adapter, no `enabled`) in today's shape.
  static void upgrade(json& doc);
  Result<json> resolve(const std::string& ref);
  // The model and workload of a create request, checked: {model, workload, served: {name, kind, ...}}.
  Result<json> resolve_request(const json& body);
  // A candidate attached to a READY endpoint of its base model and workload with room for one
  // more adapter, without new devices; nullopt when there is none (a new endpoint is created).
  // `lock` holds core_.mu; it is let go while the serving process loads the adapter.
  Result<std::optional<json>> attach_to_served(std::unique_lock<std::mutex>& lock, const json& request);
  // The model of `doc` that `ref` names (name, run id, model id, or a prefix of one of them):
  // its index in doc["models"]; errors name "model".
  Result<size_t> attached_model(const json& doc, const std::string& ref) const;
  // The request's model checked against the endpoint: filled in when absent (the last attached
  // enabled one); an OpenAI-shaped answer instead of forwarding when the endpoint does not serve
  // it (404) or it is disabled (409).
  std::optional<ForwardedAnswer> refusal_for(const json& doc, json& request) const;
  // Takes the endpoint down (mu held): DELETED at once without a process, else DELETING.
  Result<json> take_down_locked(json doc);
  // POST or DELETE on the serving process's /v1/adapters (no lock held).
  Status call_adapters(const json& doc, const std::string& method, const json& body, const std::string& name) const;
  Result<std::optional<store::ClaimRow>> claim_of(const std::string& id);
  // endpoint_inputs.cpp: whether the serving process reads its inputs from the S3 artifact store
  // (a cluster backend with one), which trainerd stages them in.
  bool stages_inputs() const;
  // An adapter's folder on this host: `path` itself, or for a storage key (a cluster run's
  // adapter) its two files fetched from the artifact store into the endpoint's folder.
  Result<std::string> adapter_folder(const std::string& id, const std::string& name, const std::string& path);
  // The process's spec with its model and adapters where it reads them: folders on this host, or,
  // when stages_inputs(), their staged s3:// URIs (mu held).
  Status stage_spec_locked(const json& doc, json& spec);
  // The path POST /v1/adapters names for `served` (an adapter model entry) on endpoint `id`: its
  // folder, or its staged URI (mu held).
  Result<std::string> attach_path_locked(const std::string& id, const json& served);
  // Creates an endpoint for a resolved request (mu held): its id.
  Result<std::string> create_locked(const json& request);
  // Refuses to `what` (take it down, detach it, disable it) a model of `doc` (every one when
  // `model` is "") that a run's judge still uses, naming the run.
  Status refuse_if_judging(const json& doc, const std::string& model, const std::string& what);
  // Refuses an endpoint its workload's quota cannot hold now (errors name "workload").
  Status check_quota(const json& workload);

  // The kernel's step and its parts (mu held, inside the step's transaction).
  Status step_task(tasks::Step& step);
  Status launch_locked(json& doc, const store::ClaimRow& claim);
  Status restart_locked(json& doc, const std::string& reason);
  Status follow_locked(json& doc, tasks::Step& step);
  Status watch_process_silence(json& doc, const backend::JobHandle& handle);  // STARTING, READY: a hung process stopped
  // The job record (`_job`) with the host and port the process answers at (its "listening" line,
  // and `node_address`, the backend's word for its node), once GET /health answers; nullopt until then.
  std::optional<json> answering_at(const json& doc, const std::string& node_address) const;
  Status end_locked(json& doc, const std::string& phase, const std::string& reason);

  ServiceCore& core_;
  Capacity& capacity_;
  const Hooks hooks_;
  tasks::FunctionKind tasks_;
  EndpointMeters meters_;
  // Adapters being attached now (endpoint id -> count), counted against maxAdaptersLoaded while
  // their serving process loads them outside the lock; guarded by core_.mu.
  std::map<std::string, int> attaching_;
};

}  // namespace trainer::service

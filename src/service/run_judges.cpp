// A run's judges (docs/graders.md, "Phases" and "Judges on endpoints"): the judges trainerd's
// configuration declares by URL, and models trainerd serves itself at endpoints, which
// DEPLOYING_GRADER finds or creates; WAITING_FOR_GRADER waits until every one answers. The job
// calls an endpoint judge through trainerd's forwarding route; while the run has not ended, the
// endpoint refuses to detach, disable or take down that model (Endpoints::refuse_if_judging).
#include <string>
#include <vector>

#include "service/judges.h"
#include "service/service_state.h"

namespace trainer::service {
namespace {

// How long WAITING_FOR_GRADER waits for a judge's endpoint to be READY (its process loads the
// model) before the run fails.
constexpr double kEndpointJudgeReadySeconds = 600;

}  // namespace

// DEPLOYING_GRADER: each model: term that names no declared judge gets an endpoint serving its
// model, recorded in the run's `judgeEndpoints` ({term name: {endpointId, model}}).
Status ServiceImpl::deploy_judges(RunRecord& run) {
  json& found = run.view["judgeEndpoints"];
  if (!found.is_object()) found = json::object();
  for (const std::string& name : endpoint_judge_names(run.view["plan"], opt_.config)) {
    if (found.contains(name)) continue;
    auto endpoint = endpoints_.judge_endpoint_locked(name, run.workload_id);
    if (!endpoint.is_ok()) {
      return fail(run, "judge '" + name + "' could not be served at an endpoint: " + endpoint.status().message());
    }
    found[name] = *endpoint;
  }
  return transition(run, Phase::kWaitingForGrader);
}

// WAITING_FOR_GRADER: every judge of the run answers, then devices are claimed. A declared judge
// that has not answered within its readyTimeoutSeconds fails the run, naming it; an endpoint
// judge fails it when its endpoint ends or is not READY within kEndpointJudgeReadySeconds.
Status ServiceImpl::wait_for_judges(RunRecord& run) {
  std::string missing;
  const std::vector<const JudgeConfig*> judges = judges_of(run.view["plan"], opt_.config, &missing);
  for (const JudgeConfig* j : judges) {
    std::string why;
    bool tls_failed = false;
    if (judge_probes_.answers(*j, &why, &tls_failed)) continue;
    if (tls_failed) {  // an untrusted certificate: waiting will not mend it
      return fail(run, "judge '" + j->name + "' at " + j->url + " failed TLS verification: " + why +
                           "; declare the judge's caFile in trainerd's configuration if it uses a private CA");
    }
    if (now() - run.entered_at > j->ready_timeout_seconds) {
      return fail(run, "judge '" + j->name + "' at " + j->url + " did not answer within " +
                           std::to_string(j->ready_timeout_seconds) + " s (readyTimeoutSeconds)" +
                           (why.empty() ? std::string() : ": " + why));
    }
    return Status::ok();
  }
  const json found = run.view.value("judgeEndpoints", json::object());
  for (const std::string& name : endpoint_judge_names(run.view["plan"], opt_.config)) {
    if (!found.contains(name)) return fail(run, "judge '" + name + "' has no endpoint (DEPLOYING_GRADER did not record one)");
    const std::string id = found[name].value("endpointId", std::string());
    TRAINER_ASSIGN_OR_RETURN(std::optional<json> endpoint, store_->get_endpoint(id));
    const std::string phase = endpoint ? endpoint->value("phase", std::string()) : "gone";
    if (phase == "READY") continue;
    if (!endpoint || phase == "FAILED" || phase == "DELETED" || phase == "DELETING") {
      return fail(run, "judge '" + name + "': its endpoint " + id + " is " + phase +
                           (endpoint && endpoint->contains("failureReason")
                                ? " (" + endpoint->value("failureReason", std::string()) + ")" : std::string()));
    }
    if (now() - run.entered_at > kEndpointJudgeReadySeconds) {
      return fail(run, "judge '" + name + "': its endpoint " + id + " was not READY within " +
                           std::to_string(static_cast<int>(kEndpointJudgeReadySeconds)) + " s (it is " + phase + ")");
    }
    return Status::ok();
  }
  return claim_devices(run);
}

// What the job's plan is given for its endpoint judges: trainerd's forwarding route of each.
std::map<std::string, json> ServiceImpl::endpoint_judges(const RunRecord& run) const {
  std::map<std::string, json> out;
  const json found = run.view.value("judgeEndpoints", json::object());
  for (const auto& [name, e] : found.items()) {
    out[name] = {{"url", core_.catalog_url + "/v1/endpoints/" + e.value("endpointId", std::string())},
                 {"model", e.value("model", std::string())},
                 // trainerd's forwarding route takes the attempt's own credentials (docs/security.md)
                 {"apiKeyEnv", "TRAINER_JOB_TOKEN"},
                 {"jobIdEnv", "TRAINER_JOB_ID"},
                 {"caFile", core_.job_catalog_ca_file()}};  // trainerd's API over TLS: its CA
  }
  return out;
}

Result<std::vector<std::string>> ServiceImpl::judge_users(const std::string& endpoint_id, const std::string& model) {
  store::RunFilter filter;
  for (int i = 0; i < kPhaseCount; ++i) {
    if (!is_terminal(phase_at(i))) filter.phases.push_back(phase_name(phase_at(i)));
  }
  filter.limit = -1;  // every one
  TRAINER_ASSIGN_OR_RETURN(store::RunRowPage page, store_->list_run_rows(filter));
  std::vector<std::string> out;
  for (const auto& row : page.rows) {
    if (row.doc.find(endpoint_id) == std::string::npos) continue;  // most runs: no parse
    const json r = json::parse(row.doc, nullptr, false);
    const json found = r.is_object() ? r.value("judgeEndpoints", json::object()) : json::object();
    for (const auto& [name, e] : found.items()) {
      if (e.value("endpointId", std::string()) == endpoint_id && e.value("model", std::string()) == model) {
        out.push_back("run " + row.id);
        break;
      }
    }
  }
  // A curation's judge and a distillation's teacher, until they end (a paused one calls it again
  // when resumed).
  auto calls_it = [&](const json& target) {
    return target.is_object() && target.value("endpointId", std::string()) == endpoint_id &&
           target.value("model", std::string()) == model;
  };
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> curations, store_->list_curations());
  for (const auto& c : curations) {
    const std::string phase = c.value("phase", std::string());
    if (phase == "COMPLETED" || phase == "FAILED") continue;
    if (calls_it(c.value("_judge", json()))) out.push_back("curation " + c.value("curationId", std::string()));
  }
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> distillations, store_->list_distillations());
  for (const auto& d : distillations) {
    const std::string phase = d.value("phase", std::string());
    if (phase == "COMPLETED" || phase == "FAILED" || phase == "CANCELLED") continue;
    if (calls_it(d.value("_teacher", json()))) {
      out.push_back("distillation " + d.value("distillationId", std::string()));
    }
  }
  return out;
}

}  // namespace trainer::service

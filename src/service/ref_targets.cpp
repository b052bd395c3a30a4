// What a workload's ref may point at (Workloads::Hooks::ref_target_locked): a registered model,
// a base model registered on the way, or a completed run's model.
#include "service/registry.h"
#include "service/service_state.h"

namespace trainer::service {

// The registered model `target` names for ref `which` of workload `w`: a model id (or prefix); for
// `base` also a base model's name (registered as a BASE model when new); for candidate and
// champion also a completed run of the workload (its registered model).
Result<json> ServiceImpl::ref_target_locked(const json& w, const std::string& which, const std::string& target) {
  auto model = registry_.resolve(target, "target");
  if (!model.is_ok() && model.status().code() == StatusCode::kNotFound) {
    if (which == "base") {
      auto m = base_models_.resolve(target, "target");
      if (!m.is_ok()) {
        return field_status(StatusCode::kNotFound, "target",
                            "'" + target + "' is neither a registered model nor a selected base model");
      }
      return registry_.register_base_locked(*m, "target");
    }
    auto r = resolve_run(target, "target");
    if (!r.is_ok()) return model.status();
    if (r->workload_id != w["id"]) return invalid_field("target", "run " + r->id + " belongs to another workload");
    if (r->phase != Phase::kCompleted || !r->view.contains("modelId")) {
      return field_status(StatusCode::kFailedPrecondition, "target",
                          "run " + r->id + " is " + phase_name(r->phase) + "; only a completed run's model can be a " +
                              which);
    }
    model = registry_.resolve(r->view["modelId"].get<std::string>(), "target");
  }
  if (!model.is_ok()) return model.status();
  const std::string id = model->value("modelId", std::string());
  if (model->value("status", std::string()) != kModelRegistered) {
    return field_status(StatusCode::kFailedPrecondition, "target",
                        "model " + id + " is " + model->value("status", std::string()) +
                            "; only a REGISTERED model can be a ref (see trainer trained-models get " + id + ")");
  }
  const std::string variant = model->value("variant", std::string());
  if (which == "base") {
    if (variant != kVariantBase) {
      return invalid_field("target", "model " + id + " is an " + variant + " model; base must point at a BASE model");
    }
    return *model;
  }
  if (variant != kVariantAdapter) {
    return invalid_field("target", "model " + id + " is a " + variant + " model; " + which +
                                       " must point at an adapter model of this workload");
  }
  const json mw = model->value("workload", json(nullptr));
  if (!mw.is_object() || mw.value("id", std::string()) != w["id"]) {
    return invalid_field("target", "model " + id + " belongs to " +
                                       (mw.is_object() ? "workload " + mw.value("name", std::string()) : std::string("no workload")) +
                                       ", not to " + w.value("name", std::string()));
  }
  return *model;
}

}  // namespace trainer::service

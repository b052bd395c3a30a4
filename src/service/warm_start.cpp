// A run warm-started from a registered adapter (the plan's warmStartModelId): the model must be a
// REGISTERED ADAPTER of the plan's base model whose adapter_config.json has the plan's LoRA rank,
// alpha and target modules (else the weights would not load, or would load into another
// function). Refusals name the field and both sides.
#include <algorithm>
#include <set>
#include <string>

#include "common/json_parse.h"
#include "plan/plan.h"
#include "service/registry.h"
#include "service/service_state.h"

namespace trainer::service {
namespace {

constexpr const char* kField = "warmStartModelId";

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Status refuse(StatusCode code, const std::string& id, const std::string& why) {
  return field_status(code, kField, "model " + id + " " + why);
}

}  // namespace

Result<json> ServiceImpl::resolve_warm_start(const plan::Plan& p, const json& base_model) {
  auto m = registry_.resolve(*p.warmStartModelId, kField);
  if (!m.is_ok()) return m.status();
  const std::string id = m->value("modelId", std::string());
  if (m->value("variant", std::string()) != kVariantAdapter) {
    return refuse(StatusCode::kFailedPrecondition, id,
                  "is a BASE model: a run warm-starts from an ADAPTER (a trained or imported LoRA adapter); leave "
                  "warmStartModelId out to start from the base model");
  }
  if (m->value("status", std::string()) != kModelRegistered) {
    return refuse(StatusCode::kFailedPrecondition, id,
                  "is " + m->value("status", std::string("unknown")) + "; a run warm-starts from a REGISTERED model "
                  "(trainer trained-models get " + id + ")");
  }
  const std::string model_base = m->value("baseModel", json::object()).value("name", std::string());
  const std::string plan_base = base_model.value("name", std::string());
  if (model_base != plan_base) {
    return refuse(StatusCode::kInvalidArgument, id,
                  "is an adapter of base model '" + model_base + "', but the plan's base model is '" + plan_base +
                      "': a warm start keeps the base model");
  }
  auto config_text = registry_.file(id, "adapter_config.json");
  if (!config_text.is_ok()) return Status(config_text.status().code(), kField, config_text.status().message());
  auto config = parse_json(*config_text, "adapter_config.json");
  if (!config.is_ok() || !config->is_object()) {
    return refuse(StatusCode::kFailedPrecondition, id, "has an adapter_config.json that does not parse");
  }
  const plan::LoraSettings& lora = p.config.lora;
  const json r = config->value("r", json(nullptr));
  if (!r.is_number_integer() || r.get<int>() != lora.rank) {
    return refuse(StatusCode::kInvalidArgument, id,
                  "has LoRA rank " + r.dump() + ", the plan's config.hyperparams.lora.rank is " +
                      std::to_string(lora.rank) + ": set the plan's rank to the model's");
  }
  const json alpha = config->value("lora_alpha", json(nullptr));
  if (!alpha.is_number() || alpha.get<double>() != lora.alpha) {
    return refuse(StatusCode::kInvalidArgument, id,
                  "has lora_alpha " + alpha.dump() + ", the plan's config.hyperparams.lora.alpha is " +
                      json(lora.alpha).dump() + ": set the plan's alpha to the model's");
  }
  std::set<std::string> model_targets;
  if (const json t = config->value("target_modules", json(nullptr)); t.is_array()) {
    for (const auto& name : t) {
      if (name.is_string()) model_targets.insert(name.get<std::string>());
    }
  }
  const std::set<std::string> plan_targets(lora.targetModules.begin(), lora.targetModules.end());
  if (model_targets != plan_targets) {
    return refuse(StatusCode::kInvalidArgument, id,
                  "adapts [" + joined(model_targets) + "], the plan's config.hyperparams.lora.targetModules are [" +
                      joined(plan_targets) + "]: set the plan's to the model's");
  }
  const json artifact = m->value("artifact", json::object());
  return json{{"modelId", id},
              {"artifactKey", artifact.is_object() ? artifact.value("key", json(nullptr)) : json(nullptr)},
              {"sourceRunId", m->value("source", json::object()).value("runId", json(nullptr))}};
}

}  // namespace trainer::service

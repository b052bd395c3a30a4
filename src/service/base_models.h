// Base models: the deployment's allowed list, selection, and preparation into the model cache
// (hash the folder, publish a copy under models/HASH through Storage). Preparation is the task
// kernel's "base_model" kind: a selected model is PREPARING until its work (off the driver) makes
// it READY or FAILED.
//
// Thread safety: every method may be called from any thread; select() and resume() take the
// core's mu; step_task() runs with it held (the kernel's step).
#pragma once

#include <optional>
#include <string>

#include "service/service_core.h"

namespace trainer::service {

// The base model's phase table (the task kernel's "base_model" kind): PREPARING, then READY, or
// FAILED until it is selected again.
const tasks::PhaseTable& base_model_phase_table();

class BaseModels {
 public:
  explicit BaseModels(ServiceCore& core);
  BaseModels(const BaseModels&) = delete;
  BaseModels& operator=(const BaseModels&) = delete;

  // Service::list_base_models, get_base_model, select_base_model.
  Result<json> list(bool all);
  Result<json> get(const std::string& ref);
  Result<json> select(const std::string& name);

  // The kernel's "base_model" kind, added by ServiceImpl before the run kind (a run waiting for
  // its base model sees it ready in the same pass).
  tasks::TaskKind& task_kind() { return tasks_; }
  // start(): models an older trainerd left preparing get their task.
  Status resume();

  // For the other parts:
  // A selected base model by name, id or unique id prefix; errors name `field`.
  Result<json> resolve(const std::string& ref, const std::string& field);
  // The stored document of the selected model `name`; none when it is not selected.
  Result<std::optional<json>> find_selected(const std::string& name);
  // Whether the deployment admits a run of `shape` on base model `name` (its baseModels[].shapes;
  // none listed = every shape). Outside every row: strict (shapeCatalog), failed_precondition naming
  // the nearest row and the field that differs; advisory, ok with a {field, message} warning
  // appended to `warnings`.
  Status check_shape(const std::string& name, const AdmittedShape& shape, json& warnings) const;
  // Service::base_model_envelopes: per base model and shape, what completed runs measured (peak
  // device memory, tokens per second), beside the admitted rows; and the catalog's mode.
  Result<json> envelopes();

  // The deployment's entry of `name`; null when it is not allowed.
  const AllowedBaseModel* find_allowed(const std::string& name) const;
  // Why `name` is refused: it is not one of the deployment's base models (which are listed).
  std::string not_allowed_message(const std::string& name) const;
  // The model cache's storage key of the content `content_hash` ("models/HASH"), and the folder
  // it is on this host ("" when the hash is empty or the storage has no local folders). Stored
  // documents keep the key; the folder is found when a job is started.
  static std::string cache_key(const std::string& content_hash);
  std::string cache_path(const std::string& content_hash) const;
  // The cache folder of a selected, ready model's document.
  std::string cache_path_of(const json& model) const;

 private:
  static std::string id_of(const std::string& name);
  static json present(json model);
  // One step of a base model's preparation (the kernel's "base_model" kind).
  Status step_task(tasks::Step& step);
  // The work of a preparation (off the driver): the changes to the model's document.
  Result<json> prepare(const std::string& name);

  ServiceCore& core_;
  tasks::FunctionKind tasks_;
};

}  // namespace trainer::service

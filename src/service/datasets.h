// Datasets: content-addressed chat JSONL rows (validated by dataset/validator.h) stored under
// datasets/HASH.jsonl, with movable names; and their token lengths under a base model's tokenizer
// (trainer-job analyze), cached.
//
// Thread safety: every method may be called from any thread; register_rows() takes the core's mu.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "service/base_models.h"
#include "service/service_core.h"
#include "service/storage_quotas.h"

namespace trainer::service {

class Datasets {
 public:
  Datasets(ServiceCore& core, BaseModels& base_models) : core_(core), base_models_(base_models) {}

  // Service::register_dataset, list_datasets, get_dataset, measure_dataset.
  // With `owner` (an upload through the API), new rows are checked against its storage quota and
  // recorded as its (storage_quotas.h); without (a curation's or distillation's output), neither.
  Result<std::pair<json, bool>> register_rows(const std::optional<std::string>& name, const std::string& rows,
                                              const StorageOwner* owner = nullptr);
  Result<json> list();
  Result<json> get(const std::string& ref);
  // Points the alias `name` at the dataset `ref` (a name, hash or unique prefix) without an upload;
  // the answer is the dataset, with `movedFrom` when the name pointed at other rows before.
  Result<json> name(const std::string& name, const std::string& ref);
  Result<json> measure(const std::string& ref, const std::string& base_model, std::optional<int> max_seq_length);

  // For the other parts:
  // Refuses a name a dataset cannot have, naming `field`.
  static Status check_name(const std::string& name, const std::string& field);
  // A dataset by name, full hash or unique hash prefix; errors name `field`.
  Result<json> resolve(const std::string& ref, const std::string& field);
  // trainer-job analyze of a stored dataset under a ready base model, cached by dataset hash,
  // model cache path and length (datasets and cached models never change under their names).
  Result<json> measure_cached(const json& dataset, const json& model, std::optional<int> max_seq_length);
  // The storage key of the rows with content hash `hash` (datasets/HASH.jsonl), and where a
  // stored dataset's file is on this host (stored documents keep the key).
  static std::string key_of(const std::string& hash);
  std::string local_path(const json& dataset) const;

 private:
  Result<json> present(const json& d);

  ServiceCore& core_;
  BaseModels& base_models_;

  // measure_cached()'s answers by key.
  static constexpr size_t kMeasuredCacheSize = 1024;
  std::mutex measured_mu_;
  std::map<std::string, json> measured_;  // guarded by measured_mu_
};

}  // namespace trainer::service

// Names and helpers of the model registry (ModelRegistry, model_registry.h: trained_models.cpp,
// registration.cpp) that other files of src/service share: variants, statuses, the registration
// hold, model ids and keys. Internal to src/service.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::service {

inline constexpr const char* kVariantBase = "BASE";
inline constexpr const char* kVariantAdapter = "ADAPTER";

// A model's status: a registration moves PENDING -> COPYING -> REGISTERED or FAILED; imports
// and base models are REGISTERED when they are stored.
inline constexpr const char* kModelPending = "PENDING";
inline constexpr const char* kModelCopying = "COPYING";
inline constexpr const char* kModelRegistered = "REGISTERED";
inline constexpr const char* kModelFailed = "FAILED";

// The holder name of a registration's hold on its source snapshot (see the snapshot's `holds`).
inline constexpr const char* kRegistrationHold = "registration";

// How long the engine may take to load an imported adapter onto its base model (trainer-job score).
inline constexpr int kAdapterLoadTimeoutSeconds = 300;

// How long `trainer-job merge` may take to merge an adapter into its base model's weights.
inline constexpr int kMergeTimeoutSeconds = 3600;

// A model id (16 lowercase hex) derived from what identifies it: `kind` ("snapshot", "run",
// "import", "baseModel") and its parts, so registering the same thing again gives the same id.
std::string model_id(const std::string& kind, const std::vector<std::string>& parts);

// The artifact key of a registered adapter's copy: "registry/models/<id>".
std::string model_key(const std::string& id);

// The model as the API shows it (no bookkeeping keys).
nlohmann::json present_model(const nlohmann::json& doc);

// A staging folder under DATA/registry-staging, removed with everything in it when it goes out of
// scope (the copy it held was published, or the registration failed).
class StagingFolder {
 public:
  explicit StagingFolder(std::filesystem::path path) : path_(std::move(path)) {}
  ~StagingFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;

 private:
  std::filesystem::path path_;
};

}  // namespace trainer::service

// A job's inputs in the artifact store (declared in protocol/inputs.h).
#include "protocol/inputs.h"

namespace trainer::protocol {
namespace {

constexpr const char* kModelsPrefix = "inputs/models/";
constexpr const char* kDatasetsPrefix = "inputs/datasets/";
constexpr const char* kDatasetSuffix = ".jsonl";
constexpr size_t kHashLength = 64;

}  // namespace

std::string model_input_key(const std::string& sha) { return kModelsPrefix + sha; }

std::string dataset_input_key(const std::string& sha) { return kDatasetsPrefix + sha + kDatasetSuffix; }

std::string evaluation_rows_key(const std::string& evaluation_id) { return "evaluations/" + evaluation_id + "/rows.jsonl"; }

bool is_content_hash(const std::string& s) {
  if (s.size() != kHashLength) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<InputKey> parse_input_key(const std::string& key, const std::string& field) {
  const std::string models = kModelsPrefix, datasets = kDatasetsPrefix, suffix = kDatasetSuffix;
  InputKey out;
  if (key.rfind(models, 0) == 0) {
    out.folder = true;
    out.sha = key.substr(models.size());
  } else if (key.rfind(datasets, 0) == 0 && key.size() > datasets.size() + suffix.size() && key.ends_with(suffix)) {
    out.sha = key.substr(datasets.size(), key.size() - datasets.size() - suffix.size());
  } else {
    return invalid_field(field, "'" + key + "' is not an input of the artifact store (" + models + "SHA or " +
                                    datasets + "SHA" + suffix + ")");
  }
  if (!is_content_hash(out.sha)) {
    return invalid_field(field, "'" + key + "' does not name a content hash (64 lowercase hexadecimal characters)");
  }
  return out;
}

}  // namespace trainer::protocol

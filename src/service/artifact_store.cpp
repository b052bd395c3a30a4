// The deployment's artifact store (declared in service/artifact_store.h).
#include "service/artifact_store.h"

#include <cstdlib>

#include "storage/s3_storage.h"

namespace trainer::service {
namespace {

std::string env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v == nullptr ? "" : v;
}

}  // namespace

Result<std::unique_ptr<storage::Storage>> open_artifact_store(const ArtifactStoreConfig& config) {
  for (const std::string* name : {&config.access_key_env, &config.secret_key_env}) {
    if (env(*name).empty()) {
      return invalid_argument("artifactStore: the environment variable " + *name + " (its " +
                              (name == &config.access_key_env ? "accessKeyEnv" : "secretKeyEnv") +
                              ") is not set in trainerd's environment");
    }
  }
  storage::S3Options options;
  const std::string rest = config.uri.substr(5);  // after "s3://" (the parser checked it)
  options.bucket = rest.substr(0, rest.find('/'));
  if (rest.find('/') != std::string::npos) options.prefix = rest.substr(rest.find('/') + 1);
  options.endpoint = config.endpoint;
  options.region = config.region;
  options.access_key = env(config.access_key_env);
  options.secret_key = env(config.secret_key_env);
  options.deadline_seconds = 20;
  auto store = storage::make_s3_storage(options);
  if (!store.is_ok()) return Status(store.status().code(), "artifactStore " + config.uri + ": " + store.status().message());
  return store;
}

protocol::StoreAccess artifact_store_access(const ArtifactStoreConfig& config) {
  protocol::StoreAccess access;
  access.s3_endpoint = config.endpoint;
  access.region = config.region;
  access.access_key_id = env(config.access_key_env);
  access.secret_access_key = env(config.secret_key_env);
  access.input_cache = config.input_cache;
  return access;
}

}  // namespace trainer::service

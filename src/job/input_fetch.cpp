// Fetching a job's inputs from the artifact store (declared in job/input_fetch.h).
#include "job/input_fetch.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "common/files.h"
#include "protocol/inputs.h"
#include "storage/content_hash.h"
#include "storage/storage.h"

namespace trainer::job {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kDefaultCacheName = "trainer-inputs";

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::string(v);
}

// Opens the artifact store on the first fetch: a job whose inputs are all cached needs no store.
class LazyStore {
 public:
  explicit LazyStore(std::string root) : root_(std::move(root)) {}
  Result<storage::Storage*> get() {
    if (!store_) {
      TRAINER_ASSIGN_OR_RETURN(store_, storage::open_storage(root_));
    }
    return store_.get();
  }

 private:
  std::string root_;
  std::unique_ptr<storage::Storage> store_;
};

// Writes the artifact under `key` (a file, or a folder's files) to `dest`, which must not exist.
Result<int64_t> download(storage::Storage& store, const std::string& key, bool folder, const fs::path& dest) {
  int64_t bytes = 0;
  std::error_code ec;
  if (!folder) {
    TRAINER_ASSIGN_OR_RETURN(std::string payload, store.get(key));
    fs::create_directories(dest.parent_path(), ec);
    TRAINER_RETURN_IF_ERROR(write_file_atomic(dest.string(), payload));
    return static_cast<int64_t>(payload.size());
  }
  // A folder counts only once its commit object is there (a half-written upload does not).
  TRAINER_ASSIGN_OR_RETURN(bool committed, store.exists(key));
  if (!committed) return not_found("no committed folder " + key + " in " + store.describe());
  TRAINER_ASSIGN_OR_RETURN(std::vector<std::string> files, store.list(key));
  for (const std::string& file : files) {
    TRAINER_ASSIGN_OR_RETURN(std::string payload, store.get(file));
    const fs::path local = dest / file.substr(key.size() + 1);
    fs::create_directories(local.parent_path(), ec);
    TRAINER_RETURN_IF_ERROR(write_file_atomic(local.string(), payload));
    bytes += static_cast<int64_t>(payload.size());
  }
  return bytes;
}

// The verified local copy of the input `uri` (`field` names it in messages).
Result<std::string> fetch_one(const std::string& field, const std::string& uri, const InputFetchOptions& options,
                              LazyStore& store) {
  const std::string root = options.artifact_root;
  if (root.empty() || uri.rfind(root + "/", 0) != 0) {
    return invalid_argument(field + " " + uri + ": not under the artifact store TRAINER_ARTIFACT_ROOT (" +
                            (root.empty() ? std::string("not set") : root) + ")");
  }
  const std::string key = uri.substr(root.size() + 1);
  TRAINER_ASSIGN_OR_RETURN(protocol::InputKey input, protocol::parse_input_key(key, field));
  // CACHE/models/SHA or CACHE/datasets/SHA.jsonl: the key without its "inputs/".
  const fs::path cached = fs::path(options.cache_dir) / key.substr(key.find('/') + 1);
  std::error_code ec;
  if (fs::exists(cached, ec)) {
    std::fprintf(stderr, "trainer-job run: %s %s: reusing the verified copy %s\n", field.c_str(), uri.c_str(),
                 cached.c_str());
    return cached.string();
  }
  const auto t0 = Clock::now();
  auto opened = store.get();
  if (!opened.is_ok()) {
    return unavailable(field + " " + uri + ": cannot reach the artifact store " + root + ": " +
                       opened.status().message());
  }
  const fs::path partial =
      fs::path(options.cache_dir) / (".partial-" + std::to_string(::getpid()) + "-" + input.sha);
  fs::remove_all(partial, ec);
  auto fetched = download(**opened, key, input.folder, partial);
  auto discard = [&] { fs::remove_all(partial, ec); };
  if (!fetched.is_ok()) {
    discard();
    const bool missing = fetched.status().code() == StatusCode::kNotFound;
    const std::string what = missing ? "not in the artifact store " : "cannot fetch it from the artifact store ";
    return Status(fetched.status().code(),
                  field + " " + uri + ": " + what + root + ": " + fetched.status().message());
  }
  auto hashed = input.folder ? storage::folder_content_hash(partial.string())
                             : storage::file_content_hash(partial.string());
  if (!hashed.is_ok()) {
    discard();
    return Status(hashed.status().code(), field + " " + uri + ": " + hashed.status().message());
  }
  if (hashed->sha256 != input.sha) {
    discard();
    return invalid_argument(field + " " + uri + ": the fetched copy's content hash is " + hashed->sha256 + ", not " +
                            input.sha + " (the store holds other bytes under this key)");
  }
  fs::create_directories(cached.parent_path(), ec);
  fs::rename(partial, cached, ec);
  if (ec) {
    // Another job on this node put its verified copy there first: use that one.
    discard();
    std::error_code there;
    if (!fs::exists(cached, there)) {
      return internal_error(field + " " + uri + ": cannot move the fetched copy into " + cached.string() + ": " +
                            ec.message());
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::fprintf(stderr, "trainer-job run: %s %s: fetched %lld bytes into %s in %.2f s (content hash checked)\n",
               field.c_str(), uri.c_str(), static_cast<long long>(*fetched), cached.c_str(), seconds);
  return cached.string();
}

bool is_s3(const std::string& s) { return s.rfind("s3://", 0) == 0; }

}  // namespace

InputFetchOptions input_fetch_options(const protocol::JobRequest& request) {
  InputFetchOptions o;
  o.artifact_root = request.artifact_root;
  while (!o.artifact_root.empty() && o.artifact_root.back() == '/') o.artifact_root.pop_back();
  o.cache_dir = request.store.input_cache;
  if (o.cache_dir.empty()) o.cache_dir = (fs::path(env_or("TMPDIR", "/tmp")) / kDefaultCacheName).string();
  return o;
}

Status fetch_plan_inputs(plan::Plan& plan, const InputFetchOptions& options) {
  std::vector<std::pair<std::string, std::string*>> inputs;
  if (plan.baseModel) inputs.push_back({"baseModel", &*plan.baseModel});
  inputs.push_back({"config.dataset", &plan.config.dataset});
  if (plan.config.validationDataset) inputs.push_back({"config.validationDataset", &*plan.config.validationDataset});
  return fetch_inputs(inputs, options);
}

Status fetch_inputs(const std::vector<std::pair<std::string, std::string*>>& inputs, const InputFetchOptions& options) {
  LazyStore store(options.artifact_root);
  for (const auto& [field, value] : inputs) {
    if (!is_s3(*value)) continue;
    TRAINER_ASSIGN_OR_RETURN(*value, fetch_one(field, *value, options, store));
  }
  return Status::ok();
}

}  // namespace trainer::job

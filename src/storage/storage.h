// Artifact storage: where adapters, snapshots, datasets' bytes and the model cache live: a folder
// (make_folder_storage) or an S3-compatible object store (storage/s3_storage.h); open_storage
// picks one from a location.
//
// Artifacts are addressed by keys: '/'-separated relative paths ("datasets/ab12.jsonl",
// "models/ab12"). A key names a file, or a folder published as a whole. Writers publish
// atomically: a reader sees nothing or the whole artifact, never part of one, even across a crash.
//
// Thread safety: every method may be called from any thread; concurrent writers of one key
// leave one of their artifacts whole.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/status.h"

namespace trainer::storage {

class Storage {
 public:
  virtual ~Storage() = default;

  // A one-line description for `info` ("folder /var/lib/trainer").
  virtual std::string describe() const = 0;

  // Writes `bytes` under `key` atomically, replacing what was there.
  virtual Status put(const std::string& key, const std::string& bytes) = 0;
  // The bytes of the file under `key`; not_found when absent.
  virtual Result<std::string> get(const std::string& key) = 0;
  // Keys of the files under the folder `prefix` ("" = everything), recursively, sorted.
  virtual Result<std::vector<std::string>> list(const std::string& prefix) = 0;
  // Deletes the file or folder under `key`; ok when absent.
  virtual Status remove(const std::string& key) = 0;
  virtual Result<bool> exists(const std::string& key) = 0;
  // Bytes of the file under `key`, or of every file of the folder; not_found when absent.
  virtual Result<int64_t> size(const std::string& key) = 0;

  // Publishes the local file or folder `source` under `key` atomically, replacing what was there.
  // On failure nothing is left under `key` that was not there before, and no temporary remains.
  virtual Status publish(const std::string& source, const std::string& key) = 0;

  // Publishes `source` under `key` only when nothing is there yet (an immutable destination):
  // already_exists when `key` holds an artifact, whatever its bytes (the caller compares them).
  // Atomic like publish(): of two concurrent callers, one publishes and the other is refused.
  virtual Status publish_new(const std::string& source, const std::string& key) = 0;

  // A path on this host where processes read the artifact under `key` (the folder
  // implementation: root/key). Jobs read datasets and models through it.
  virtual std::string local_path(const std::string& key) const = 0;

  // Removes what publications that died left behind, untouched for `older_than`: the folder
  // store's temporaries ("KEY.tmp.PID.N" beside a destination), judged by the newest change
  // anywhere inside one, so a publish still writing is never touched. The number removed. An
  // object store leaves none (each object appears whole or not at all): 0.
  virtual Result<int64_t> remove_abandoned_temporaries(std::chrono::seconds older_than) = 0;
};

// Artifacts as files under `root` (created when missing): each write goes to a temporary
// beside its destination, is fsynced, then renamed into place, and the folder is fsynced.
Result<std::unique_ptr<Storage>> make_folder_storage(const std::string& root);

// invalid_field("key") unless `key` is a relative '/'-separated path without "." or ".." parts.
Status check_key(const std::string& key);

// The storage a location names: "s3://BUCKET[/PREFIX]" (an object store configured from the
// environment, storage/s3_storage.h: s3_options_from_uri) or a folder path (make_folder_storage).
// `max_operation_seconds` > 0 caps how long one object-store operation retries (a job's
// publication deadline: an upload must not retry past the point its publication gave up).
Result<std::unique_ptr<Storage>> open_storage(const std::string& location, double max_operation_seconds = 0);

}  // namespace trainer::storage

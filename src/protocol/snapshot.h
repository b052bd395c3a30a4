// Snapshots between job and service: the manifest each artifact kind carries, the content-derived
// snapshot id, the storage layout, and the catalog callback's reservation (docs/job-protocol.md,
// "Snapshots").
//
// A snapshot is one save of a run at one engine step. Each artifact kind ("weights": the PEFT
// adapter folder; "trainingState": what resuming needs besides the weights) is a folder of files
// published under snapshot_key(id, kind), holding the payload and `manifest.json`, which lists
// every payload file with its size and SHA-256. The manifest's digest is the SHA-256 of its
// bytes; the snapshot id is the SHA-256 over the run, the step and the digest of each kind, so
// the same save uploaded twice has the same id, and different bytes never share one.
//
// Torch-free; depends on common only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::protocol {

inline constexpr const char* kWeightsKind = "weights";
inline constexpr const char* kTrainingStateKind = "trainingState";
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr int kManifestFormat = 1;

// invalid_field(field) unless `kind` is weights or trainingState.
Status check_artifact_kind(const std::string& kind, const std::string& field);

struct ManifestFile {
  std::string path = {};    // relative to the kind's folder, '/'-separated
  int64_t bytes = 0;
  std::string sha256 = {};  // 64 lowercase hex
  bool operator==(const ManifestFile&) const = default;
};

// What one artifact kind of one snapshot holds.
struct Manifest {
  int format = kManifestFormat;
  std::string kind = {};            // weights | trainingState
  std::string run_id = {};          // the run that saved it
  int64_t engine_step = 0;     // optimizer updates done when saved
  int64_t epoch = 0;           // 0-based epoch of the last update
  std::string base_model_sha = {};  // content hash of the base model; "" when unknown
  std::vector<ManifestFile> files = {};  // sorted by path
  int64_t total_bytes() const;
};

nlohmann::json manifest_to_json(const Manifest& m);
// The manifest's canonical bytes (sorted keys, compact): what is stored and digested.
std::string manifest_text(const Manifest& m);
// A manifest read back; invalid_field naming the field of a malformed one.
Result<Manifest> parse_manifest(const std::string& text);

// The manifest of the files under `dir` (recursively, sorted), digesting each.
Result<Manifest> manifest_of_folder(const std::string& dir, Manifest identity);

// The content-derived id (64 hex) of a run's save at `step` whose kinds have these manifest digests.
std::string snapshot_id(const std::string& run_id, int64_t step, const std::map<std::string, std::string>& digests);

// Storage key of one kind of a snapshot: "snapshots/<id>/<kind>".
std::string snapshot_key(const std::string& snapshot_id, const std::string& kind);

// The artifact folder of a run's TensorBoard event files, one per attempt, which the job writes
// and trainerd serves: "runs/RUN/tensorboard" (docs/tensorboard.md).
std::string tensorboard_key_prefix(const std::string& run_id);
// Whether `name` is an event file's name as the job writes it ("events.out.tfevents.<...>": no
// '/', nothing that climbs out of the folder).
bool is_event_file_name(const std::string& name);

// What the job asks the catalog to reserve before uploading (POST /v1/runs/{run}/snapshots).
struct Reservation {
  std::string snapshot_id = {};
  int64_t attempt = 1;
  int64_t step = 0;
  int64_t epoch = 0;
  struct Kind {
    std::string manifest_digest = {};
    int64_t bytes = 0;
  };
  std::map<std::string, Kind> kinds = {};  // by kind
};

nlohmann::json reservation_to_json(const Reservation& r);
// invalid_field naming the field of a malformed body.
Result<Reservation> parse_reservation(const nlohmann::json& body);

}  // namespace trainer::protocol

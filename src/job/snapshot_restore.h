// Restoring a snapshot into a local folder (docs/job-protocol.md, "Snapshots").
//
// validate: the catalog's entry names the snapshot's run, step and each kind's manifest digest;
// the id must derive from them, each stored manifest must have that digest and declare that
// kind, run and step, and list only relative paths. Only then is the payload fetched.
// materialize: each file is copied into a temporary folder beside `dest`, its size and SHA-256
// checked against the manifest, and the folder renamed into place whole. A corrupted, truncated
// or mismatched payload is refused with failure reason `validation`; unreadable storage is
// `storage`; an unreachable or refusing catalog `catalog`. Both are timed into
// checkpoint.duration with restore.mode.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "job/snapshot_publisher.h"
#include "protocol/snapshot.h"
#include "storage/storage.h"
#include "telemetry/instruments.h"

namespace trainer::job {

struct RestoredSnapshot {
  std::string snapshot_id;
  std::string run_id;        // the run that saved it
  int64_t attempt = 0;       // the attempt that saved it
  int64_t step = 0;          // engine step it was saved at
  int64_t epoch = 0;
  std::map<std::string, std::string> dirs;  // kind -> local folder with its files
};

// Restores `kinds` of snapshot `snapshot_id` into dest/<kind>. `mode`: resume (same run) or branch.
Result<RestoredSnapshot> restore_snapshot(Catalog& catalog, storage::Storage& storage, const std::string& snapshot_id,
                                          const std::vector<std::string>& kinds, const std::string& dest,
                                          telemetry::CheckpointRestoreMode mode, telemetry::MeterProvider& provider);

}  // namespace trainer::job

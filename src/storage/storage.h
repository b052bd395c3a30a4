// Artifact storage: where adapters, snapshots and datasets' bytes live (a folder now, S3 later).
#pragma once

#include <string>

#include "common/status.h"

namespace trainer::storage {

// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename, fsync of the folder.
// Either the whole new content is there afterwards or the old one is.
Status write_file_atomic(const std::string& path, const std::string& bytes);

Result<std::string> read_file(const std::string& path);

}  // namespace trainer::storage

// Content hashes of the artifacts trainerd names by content: a dataset file by the SHA-256 of its
// bytes, a base model folder by folder_content_hash. trainerd computes them when a model or a
// dataset is registered; a job checks a fetched copy against them (job/input_fetch.h).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace trainer::storage {

struct ContentHash {
  std::string sha256;  // 64 lowercase hex
  int64_t bytes = 0;   // bytes hashed: the file's, or all of the folder's files together
};

// SHA-256 over every regular file under `root`, in path order: its path relative to `root`, a NUL
// byte, its bytes, a NUL byte. failed_precondition naming the file that cannot be read.
Result<ContentHash> folder_content_hash(const std::string& root);

// SHA-256 of the file's bytes.
Result<ContentHash> file_content_hash(const std::string& path);

}  // namespace trainer::storage

// Artifact storage in an S3-compatible object store, spoken over libcurl: requests are signed
// with AWS Signature Version 4 (CURLOPT_AWS_SIGV4), path-style (ENDPOINT/BUCKET/KEY).
//
// How the Storage contract maps onto objects (PREFIX/KEY under the bucket):
// - a file is one object. Objects above `multipart_threshold` bytes go up as a multipart upload
//   in parts of `part_size`; S3 makes an object visible only whole, so put/publish are atomic.
// - a folder published as a whole is its files' objects (KEY/RELATIVE/PATH) plus a commit
//   object KEY/.trainer-folder (the file list), written last. A folder exists once its commit
//   object does; list() leaves commit objects out.
// - publish_new is conditional (If-None-Match: *, answered 412 when the object exists): each
//   file of a new folder, then its commit object. A file that is already there with the same
//   bytes counts as written (a retried publication), with other bytes as a conflict
//   (already_exists), and then nothing of the existing artifact was overwritten.
// - every request is retried with exponential backoff on connection errors, 429 and 5xx, until
//   `deadline_seconds` of the operation have passed; 403 (a wrong key or signature) is not
//   retried and fails naming the bucket and the server's error code.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "storage/storage.h"

namespace trainer::storage {

struct S3Options {
  std::string endpoint;    // "http://127.0.0.1:8333"
  std::string bucket;      // 3 to 63 characters
  std::string prefix;      // key prefix inside the bucket ("" or "a/b")
  std::string region = "us-east-1";
  std::string access_key, secret_key;
  int64_t multipart_threshold = 64LL << 20;  // bytes; larger files use a multipart upload
  int64_t part_size = 16LL << 20;            // bytes per part (S3 requires at least 5 MiB)
  double deadline_seconds = 120;             // per operation, retries included
};

// Connects to the bucket (created when missing); fails naming the endpoint, the bucket and the
// server's answer when it refuses the credentials.
Result<std::unique_ptr<Storage>> make_s3_storage(const S3Options& options);

// Options from a URI "s3://BUCKET[/PREFIX]" and the environment: TRAINER_S3_ENDPOINT (required),
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (required), AWS_REGION (default us-east-1),
// TRAINER_S3_MULTIPART_THRESHOLD and TRAINER_S3_PART_SIZE (bytes), TRAINER_S3_DEADLINE_SECONDS (per
// operation, retries included; default 120). Errors name what is missing.
Result<S3Options> s3_options_from_uri(const std::string& uri);

}  // namespace trainer::storage

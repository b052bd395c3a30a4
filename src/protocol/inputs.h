// A job's inputs in the artifact store (docs/job-protocol.md, "Inputs from the artifact store"):
// where trainerd stages a run's base model and dataset files, and how the job reads back what an
// input URI names. Keys are content-addressed by the hashes trainerd already has: a base model
// folder by its folder hash (storage/content_hash.h), a dataset file by the SHA-256 of its bytes.
//
// Torch-free; depends on common only.
#pragma once

#include <string>

#include "common/status.h"

namespace trainer::protocol {

// "inputs/models/SHA": a base model folder, published as a whole (a folder with a commit object).
std::string model_input_key(const std::string& sha);
// "inputs/datasets/SHA.jsonl": a dataset file.
std::string dataset_input_key(const std::string& sha);

// "evaluations/ID/rows.jsonl": the one output an evaluation job leaves in the store, its rows
// (a cluster job's output folder is on its node; `evaluations rows` reads them there).
std::string evaluation_rows_key(const std::string& evaluation_id);

struct InputKey {
  bool folder = false;  // true: a model folder; false: a dataset file
  std::string sha;      // the content hash the key names (64 lowercase hex)
};

// The input `key` names; invalid_field(field) when it is neither form above with a 64-hex hash.
Result<InputKey> parse_input_key(const std::string& key, const std::string& field);

// True for 64 lowercase hexadecimal characters.
bool is_content_hash(const std::string& s);

}  // namespace trainer::protocol

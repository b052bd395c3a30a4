// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}},
// then the raw tensor bytes. Reader and writer; no torch here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainer::engine::model {

// One tensor's entry in a mapped file. `data` points into the mapping and lives as long as the
// SafetensorsFile that produced it (hold the shared_ptr).
struct TensorView {
  std::string dtype;           // safetensors dtype name: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;  // row-major
  const void* data = nullptr;  // start of the bytes inside the mapping
  size_t nbytes = 0;
};

// A read-only, memory-mapped safetensors file. Thread-safe to read after open().
class SafetensorsFile {
 public:
  // Maps `path` and parses its header. Errors (kInvalidArgument / kNotFound) name the file and,
  // for a bad entry, the tensor and field.
  static Result<std::shared_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* find(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* base_ = nullptr;  // the mapping; nullptr for an empty file
  size_t size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element of a safetensors dtype name; 0 when unknown.
size_t dtype_size(const std::string& dtype);

// A tensor to write: the caller owns `data` until serialize_safetensors returns.
struct TensorToWrite {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// The whole file's bytes, tensors in name order (as the Python writer does), header padded with
// spaces to a multiple of 8 so every tensor starts aligned.
std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata);

}  // namespace trainer::engine::model

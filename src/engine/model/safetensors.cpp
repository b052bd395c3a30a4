#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

namespace trainer::engine::model {

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_ != nullptr) munmap(base_, size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path + ": no such file");
    return invalid_argument(path + ": cannot open: " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return invalid_argument(path + ": cannot stat: " + std::strerror(errno));
  }
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ < 8) {
    ::close(fd);
    return invalid_argument(path + ": not a safetensors file: " + std::to_string(file->size_) +
                            " bytes, shorter than the 8-byte header length");
  }
  // MAP_POPULATE: read the file in once, sequentially, instead of page by page on first use.
  void* base = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return invalid_argument(path + ": cannot map: " + std::strerror(errno));
  file->base_ = base;
  const auto* bytes = static_cast<const uint8_t*>(base);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > file->size_ - 8) {
    return invalid_argument(path + ": not a safetensors file: header length " + std::to_string(header_len) +
                            " exceeds the file size " + std::to_string(file->size_));
  }
  nlohmann::json header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return invalid_argument(path + ": not a safetensors file: the header is not a JSON object");
  }
  const uint8_t* data = bytes + 8 + header_len;
  const size_t data_size = file->size_ - 8 - header_len;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (entry.is_object()) {
        for (auto& [k, v] : entry.items()) {
          if (v.is_string()) file->metadata_[k] = v.get<std::string>();
        }
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!entry.is_object()) return invalid_argument(where + ": entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) return invalid_argument(where + ": field 'dtype' missing");
    if (!entry.contains("shape") || !entry["shape"].is_array()) return invalid_argument(where + ": field 'shape' missing");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return invalid_argument(where + ": field 'data_offsets' must be [begin, end]");
    }
    TensorView view;
    view.dtype = entry["dtype"].get<std::string>();
    size_t elem = dtype_size(view.dtype);
    if (elem == 0) return invalid_argument(where + ": field 'dtype': unsupported '" + view.dtype + "'");
    size_t count = 1;
    for (auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return invalid_argument(where + ": field 'shape' has a bad dimension");
      view.shape.push_back(d.get<int64_t>());
      count *= static_cast<size_t>(d.get<int64_t>());
    }
    auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return invalid_argument(where + ": field 'data_offsets' must hold non-negative integers");
    }
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return invalid_argument(where + ": field 'data_offsets' [" + std::to_string(begin) + ", " + std::to_string(end) +
                              "] lies outside the data (" + std::to_string(data_size) + " bytes): truncated file?");
    }
    if (end - begin != count * elem) {
      return invalid_argument(where + ": field 'data_offsets' spans " + std::to_string(end - begin) +
                              " bytes but dtype and shape need " + std::to_string(count * elem));
    }
    view.data = data + begin;
    view.nbytes = end - begin;
    file->tensors_.emplace(name, std::move(view));
  }
  return file;
}

std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> order;
  order.reserve(tensors.size());
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (auto* t : order) {
    header[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  std::string head = header.dump();
  while (head.size() % 8 != 0) head.push_back(' ');
  std::string out;
  out.reserve(8 + head.size() + offset);
  uint64_t len = head.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += head;
  for (auto* t : order) out.append(static_cast<const char*>(t->data), t->nbytes);
  return out;
}

}  // namespace trainer::engine::model

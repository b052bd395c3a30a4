// SHA-256 (FIPS 180-4), for content hashes of datasets, models and settings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainer {

// Incremental hasher: update() any number of times, then hex_digest() once.
class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  std::string hex_digest();  // 64 lowercase hex characters; the hasher is spent afterwards

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  uint64_t total_bytes_ = 0;
  size_t buffered_ = 0;
};

std::string sha256_hex(std::string_view bytes);

}  // namespace trainer

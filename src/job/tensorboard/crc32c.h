// CRC-32C (Castagnoli, the polynomial 0x1EDC6F41, bits reflected) and the mask TensorBoard's
// record format (TFRecord) applies to the checksums it stores.
#pragma once

#include <cstdint>
#include <string_view>

namespace trainer::job::tensorboard {

// The CRC-32C of `data`: crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view data);

// The checksum as a record stores it: rotated right by 15 bits, plus 0xa282ead8 (so that a CRC
// over bytes that embed CRCs stays informative).
uint32_t masked_crc32c(std::string_view data);

}  // namespace trainer::job::tensorboard

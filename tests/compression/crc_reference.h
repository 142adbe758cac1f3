// The bit-at-a-time CRC32C the frame and CRC tests check the ISA-L-backed one against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace starling::compression::testing {

// Bit-at-a-time CRC32C (reflected polynomial 0x82F63B78, init and final xor ~0): the reference the
// ISA-L-backed crc32c() must agree with.
inline uint32_t referenceCrc32c(std::span<const std::byte> bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (std::byte b : bytes) {
    crc ^= std::to_integer<uint32_t>(b);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

}  // namespace starling::compression::testing

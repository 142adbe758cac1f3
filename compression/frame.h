// The versioned wire frame that carries every Starling message, and the identity codec.
//
// Layout (little-endian, specified byte by byte in docs/wire_format.md):
//   magic "STRL" | version | codec id | element type | reserved | element count (u64) |
//   params length (u32) | reserved (u32) | payload length (u64) | params (padded to 8) |
//   payload | CRC32C of everything before it (u32)
// The payload starts 8-byte aligned, so a receiver can read float64 values in place.
//
// Decoding is hostile-input safe: every length is checked against the bytes actually present and
// against sane maxima before it is used; failures return kCorruption and never read out of
// bounds. Thread-safety: free functions over caller-owned buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace starling::compression {

// Codec ids are part of the wire format: never renumber, only append.
enum class CodecId : uint8_t {
  kIdentity = 0,
  kFp16 = 1,
  kBf16 = 2,
  kTopK = 3,
  kRandK = 4,
  kSign = 5,
  kQsgd = 6,
  kNuqsgd = 7,
  kNatural = 8,
  kNaturalDithering = 9,
  kTopKDithering = 10,
  kCountSketch = 11,
  kAdaComp = 12,
  kDqsgd = 13,
  // Layer-aware compression: inner frames per group of tensors (docs/wire_format.md). Selected by
  // a "compression" object's "layers", not by a kind of its own.
  kLayered = 14,
  kLgc = 15,
  kInt8 = 16,
  kTopK2Bit = 17,
  kDctSign = 18,
};

// Element types of the model state.
enum class ElementType : uint8_t { kFloat32 = 1, kFloat64 = 2 };

template <typename T>
constexpr ElementType elementTypeOf();
template <>
constexpr ElementType elementTypeOf<float>() { return ElementType::kFloat32; }
template <>
constexpr ElementType elementTypeOf<double>() { return ElementType::kFloat64; }

inline constexpr uint32_t kFrameMagic = 0x4C525453;  // "STRL" read as a little-endian u32
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr size_t kFrameTrailerBytes = 4;
inline constexpr uint64_t kMaxFrameElements = uint64_t{1} << 32;  // 4 Gi elements
inline constexpr uint32_t kMaxFrameParamsBytes = 4096;

// A parsed, CRC-checked frame. The spans point into the caller's buffer.
struct FrameView {
  CodecId codec;
  ElementType elementType;
  uint64_t elementCount;
  std::span<const std::byte> params;
  std::span<const std::byte> payload;
};

// Appends one complete frame to `out` (cleared first). Payload bytes are written as given: the
// codec is responsible for their little-endian layout.
void writeFrame(CodecId codec, ElementType type, uint64_t elementCount,
                std::span<const std::byte> params, std::span<const std::byte> payload,
                std::vector<std::byte>& out);

// Whether a decoder checks the frame's CRC32C. kSkip is for bytes whose integrity the transport
// has already established (transport::SharedBytes::intact(): a frame read straight out of the
// sender's sealed shared-memory segment, or one whose MAC or AEAD tag was verified); every
// header field and length is still checked, so a hostile frame is rejected just the same, and
// the CRC pass would only read every byte once more (docs/bench_gossip.md).
enum class Checksum : uint8_t { kVerify, kSkip };

// Checks magic, version, lengths, padding and CRC. kCorruption with a specific message on any
// mismatch; unknown codec ids are accepted here and rejected by the codec dispatch.
core::Result<FrameView> parseFrame(std::span<const std::byte> frame,
                                   Checksum checksum = Checksum::kVerify);

// CRC32C (Castagnoli) of `bytes`, hardware-accelerated through ISA-L.
uint32_t crc32c(std::span<const std::byte> bytes);

// The same over pieces, for a pass that checksums each block while it is in cache:
// Crc32c c; c.update(a); c.update(b); c.value() == crc32c(a ‖ b).
class Crc32c {
 public:
  void update(std::span<const std::byte> bytes);
  uint32_t value() const { return ~state_; }

 private:
  uint32_t state_ = 0xFFFFFFFFu;  // ISA-L's raw register
};

// Total frame size for a dense identity frame of `count` elements of T.
template <typename T>
constexpr size_t denseFrameBytes(size_t count) {
  return kFrameHeaderBytes + count * sizeof(T) + kFrameTrailerBytes;
}

// Identity codec: the vector itself, in the state's own precision.
template <typename T>
void encodeDense(std::span<const T> x, std::vector<std::byte>& out);

// Zero-copy encoding: beginDense() sizes `out` for an identity frame of `count` elements, writes the
// header and returns the (8-byte aligned) payload for the caller to fill in place; sealFrame() then
// writes the CRC32C. The span stays valid until `out` is resized. The payload is not cleared when
// `out` already has the right size: the caller must write every element.
template <typename T>
std::span<T> beginDense(size_t count, std::vector<std::byte>& out);
void sealFrame(std::vector<std::byte>& out);
// The same into a buffer someone else owns (a transport's shared memory): `out` must be exactly
// denseFrameBytes<T>(count) bytes and 8-byte aligned.
template <typename T>
std::span<T> beginDense(size_t count, std::span<std::byte> out);
void sealFrame(std::span<std::byte> out);
// Writes the trailer of `out` from the CRC32C of everything before it, computed by the caller
// (Crc32c over out.first(out.size() - kFrameTrailerBytes)).
void sealFrame(std::span<std::byte> out, uint32_t crc);

// Decodes an identity frame of exactly `expectedCount` elements of T. On a little-endian host with
// an aligned buffer the result views the frame's payload in place (no copy); otherwise the values
// are copied into `scratch` and the result views that. kCorruption for a wrong codec, element
// type or count. Identity frames may carry any IEEE value: a diverging run must show up as NaN in
// its metrics, not as a corrupt frame.
template <typename T>
core::Result<std::span<const T>> decodeDense(std::span<const std::byte> frame, size_t expectedCount,
                                             std::vector<T>& scratch,
                                             Checksum checksum = Checksum::kVerify);

}  // namespace starling::compression

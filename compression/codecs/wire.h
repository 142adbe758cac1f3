// Byte-level building blocks of codec payloads (internal to compression/).
//
// Every multi-byte field is stored little-endian, byte by byte, so the format never depends on
// the host's layout (docs/wire_format.md). The Reader never reads past its span: each read
// reports whether the bytes were there. Thread-safety: values and free functions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "compression/frame.h"
#include "core/simd.h"
#include "core/status.h"

namespace starling::compression::codecs {

// Integers that may alias any object and sit at any address (GCC and Clang attributes): the
// vectorized loops of the codecs read and write payload bytes through them, little-endian only.
// typedef, not using: clang 14 ignores aligned(1) on an alias declaration and assumes natural alignment.
typedef uint16_t AliasU16 __attribute__((may_alias, aligned(1)));
typedef uint32_t AliasU32 __attribute__((may_alias, aligned(1)));
typedef uint64_t AliasU64 __attribute__((may_alias, aligned(1)));

template <typename U>
void storeLe(std::byte* p, U v) {
  static_assert(std::is_unsigned_v<U>);
  for (size_t i = 0; i < sizeof(U); ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

template <typename U>
U loadLe(const std::byte* p) {
  static_assert(std::is_unsigned_v<U>);
  U v = 0;
  for (size_t i = 0; i < sizeof(U); ++i) {
    v |= static_cast<U>(std::to_integer<uint8_t>(p[i])) << (8 * i);
  }
  return v;
}

// The unsigned integer with the bits of a float or double.
template <typename T>
using BitsOf = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

template <typename T>
void storeValue(std::byte* p, T v) {
  storeLe<BitsOf<T>>(p, std::bit_cast<BitsOf<T>>(v));
}

template <typename T>
T loadValue(const std::byte* p) {
  return std::bit_cast<T>(loadLe<BitsOf<T>>(p));
}

template <typename U>
void appendLe(std::vector<std::byte>& out, U v) {
  const size_t at = out.size();
  out.resize(at + sizeof(U));
  storeLe<U>(out.data() + at, v);
}

template <typename T>
void appendValue(std::vector<std::byte>& out, T v) {
  appendLe<BitsOf<T>>(out, std::bit_cast<BitsOf<T>>(v));
}

// Unsigned LEB128: 7 bits per byte, least significant group first, high bit = "more follows".
inline size_t varintLength(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline void appendVarint(std::vector<std::byte>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::byte>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::byte>(v));
}

// Bytes of a frame with params of paramsBytes (padded to 8) and a payload of payloadBytes.
constexpr size_t frameBytesFor(size_t paramsBytes, size_t payloadBytes) {
  return kFrameHeaderBytes + ((paramsBytes + 7) & ~size_t{7}) + payloadBytes + kFrameTrailerBytes;
}

// Writes everything of a frame before its payload (header, params, their padding) at `p`, which
// has frameBytesFor(params.size(), payloadBytes) bytes, exactly as writeFrame does. Returns where
// the payload starts.
std::byte* writeFrameHead(CodecId codec, ElementType type, uint64_t elementCount,
                          std::span<const std::byte> params, size_t payloadBytes, std::byte* p);

// Where an encode writes its one frame: a vector it sizes (Compressor::encode), or a span someone
// else owns, such as a transport's shared memory (Compressor::encodeInto). A codec calls begin()
// once it knows its payload's length, writes every payload byte in place, then seal(). A span too
// small for the frame is never written: begin() returns null and the codec stops there;
// status() then says how many bytes the frame needed.
class FrameOut {
 public:
  explicit FrameOut(std::vector<std::byte>& out) : vector_(&out) {}
  explicit FrameOut(std::span<std::byte> out) : span_(out) {}

  std::byte* begin(CodecId codec, ElementType type, uint64_t elementCount,
                   std::span<const std::byte> params, size_t payloadBytes);
  // begin(), a copy of a payload built on the side, and seal().
  void write(CodecId codec, ElementType type, uint64_t elementCount,
             std::span<const std::byte> params, std::span<const std::byte> payload);
  // Writes the CRC32C trailer.
  void seal();

  bool ok() const { return !frame_.empty(); }
  // kInvalidArgument after a begin() that did not fit.
  core::Status status() const;
  // The frame begin() laid out (its whole length, trailer included), and its payload.
  std::span<std::byte> frame() const { return frame_; }
  std::span<const std::byte> payload() const { return {payload_, payloadBytes_}; }

 private:
  std::vector<std::byte>* vector_ = nullptr;
  std::span<std::byte> span_;
  std::span<std::byte> frame_;
  std::byte* payload_ = nullptr;
  size_t payloadBytes_ = 0;
  size_t needed_ = 0;
};

// encodeInto's common shape: `write(frame)` lays the frame out in `out`, then `see(frame)` fills
// what receivers decode (a codec's decode of the frame, or a cheaper pass over its payload).
// Returns the frame's length, or why it did not fit or does not decode.
template <typename Write, typename See>
core::Result<size_t> writeAndSee(std::span<std::byte> out, Write&& write, See&& see) {
  FrameOut frame(out);
  write(frame);
  if (!frame.ok()) return frame.status();
  STARLING_RETURN_IF_ERROR(see(frame));
  return frame.frame().size();
}

// A bounds-checked cursor over a payload.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  size_t position() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  bool readU8(uint8_t& v) {
    if (remaining() < 1) return false;
    v = std::to_integer<uint8_t>(bytes_[pos_++]);
    return true;
  }

  template <typename U>
  bool readLe(U& v) {
    if (remaining() < sizeof(U)) return false;
    v = loadLe<U>(bytes_.data() + pos_);
    pos_ += sizeof(U);
    return true;
  }

  // A minimal (canonical) LEB128 u64: false on truncation, on more than 64 bits of value and on
  // a redundant trailing zero group, so that every value has exactly one encoding.
  bool readVarint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!readU8(b)) return false;
      const uint64_t group = b & 0x7f;
      if (shift == 63 && group > 1) return false;  // bits beyond 64
      v |= group << shift;
      if ((b & 0x80) == 0) return !(shift > 0 && b == 0);
    }
    return false;  // an eleventh byte would be needed
  }

 private:
  std::span<const std::byte> bytes_;
  size_t pos_ = 0;
};

}  // namespace starling::compression::codecs

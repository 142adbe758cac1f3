// Packing blocks shared by the quantizing codecs (internal to compression/): fixed-width codes in
// a bit stream, the scaled-level quantizer behind qsgd, nuqsgd, natural dithering, top-k dithering
// and dqsgd, and the LEB128 index lists of topk_dithering and adacomp.
//
// The layouts are specified in docs/wire_format.md ("QSGD codes", "Exponential levels", "Sparse
// payloads"). Readers never read past the bytes they are given; the check functions validate a
// whole payload so that callers write their output only after a frame is known to be good.
// Thread-safety: values and free functions over caller-owned buffers.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "compression/codecs/wire.h"
#include "runtime/core/rng.h"
#include "runtime/core/status.h"

namespace starling::compression::codecs {

// Packs codes of `width` bits (1..32), least significant bit first, into a zeroed byte buffer.
class BitWriter {
 public:
  explicit BitWriter(std::byte* out) : out_(out) {}
  void put(uint32_t code, int width) {
    acc_ |= static_cast<uint64_t>(code) << used_;
    used_ += width;
    while (used_ >= 8) {
      *out_++ = static_cast<std::byte>(acc_ & 0xff);
      acc_ >>= 8;
      used_ -= 8;
    }
  }
  void flush() {
    if (used_ > 0) *out_ = static_cast<std::byte>(acc_ & 0xff);
  }

 private:
  std::byte* out_;
  uint64_t acc_ = 0;
  int used_ = 0;
};

// Reads codes written by BitWriter; the caller has checked that the bytes are there.
class BitReader {
 public:
  explicit BitReader(const std::byte* in) : in_(in) {}
  uint32_t get(int width) {
    while (have_ < width) {
      acc_ |= static_cast<uint64_t>(std::to_integer<uint8_t>(*in_++)) << have_;
      have_ += 8;
    }
    const auto code = static_cast<uint32_t>(acc_ & ((uint64_t{1} << width) - 1));
    acc_ >>= width;
    have_ -= width;
    return code;
  }
  // The bits of the current byte not consumed yet (the last byte's padding).
  uint64_t leftover() const { return acc_; }

 private:
  const std::byte* in_;
  uint64_t acc_ = 0;
  int have_ = 0;
};

// A scale a decoder accepts: finite and not negative (-0 included).
inline bool validScale(double s) { return std::isfinite(s) && !std::signbit(s); }

// The smallest float32 >= v, so that |x| / scale never exceeds 1. NaN stays NaN; a norm beyond
// float32's range becomes infinity (and the frame is then rejected by every decoder).
inline float roundUpToFloat(double v) {
  if (std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
  if (v > static_cast<double>(std::numeric_limits<float>::max())) {
    return std::numeric_limits<float>::infinity();
  }
  float f = static_cast<float>(v);
  if (static_cast<double>(f) < v) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

// ||x||_2 (or ||x||_inf) in float64; NaN when x holds a NaN, infinity when it holds an infinity.
template <typename T>
double bucketNorm(std::span<const T> x, bool linf) {
  double maxAbs = 0.0;
  for (T v : x) {
    const double a = std::abs(static_cast<double>(v));
    if (std::isnan(a)) return a;
    maxAbs = std::max(maxAbs, a);
  }
  if (linf || maxAbs == 0.0 || std::isinf(maxAbs)) return maxAbs;
  double sum = 0.0;
  if constexpr (sizeof(T) == 4) {
    // Squares of float32 values cannot overflow a double sum.
    for (T v : x) sum += static_cast<double>(v) * static_cast<double>(v);
    return std::sqrt(sum);
  } else {
    for (T v : x) {
      const double r = static_cast<double>(v) / maxAbs;
      sum += r * r;
    }
    return maxAbs * std::sqrt(sum);
  }
}

// ---------------------------------------------------------------------------------------------
// Scaled codes: per bucket one float32 scale (its norm rounded up), then one code per element:
// a level index in the low `levelBits` bits and the sign above them. Level 0 carries no sign.

enum class LevelSet : uint8_t {
  kUniform,      // level l is l / s of the scale (QSGD)
  kExponential,  // level l >= 1 is 2^(l - s) of the scale, level 0 is 0 (NUQSGD, natural dithering)
};

struct ScaledCodes {
  LevelSet levels = LevelSet::kUniform;
  uint32_t s = 1;       // the highest level index; 1 <= s < 2^levelBits
  int levelBits = 1;    // width of the level field
  uint64_t bucket = 1;  // elements per scale, >= 1
  bool linf = false;    // scale by the bucket's max |x_i| instead of its l2 norm

  int codeBits() const { return levelBits + 1; }
  uint32_t signBit() const { return 1u << levelBits; }
  uint64_t buckets(uint64_t d) const { return (d + bucket - 1) / bucket; }
  uint64_t payloadBytes(uint64_t d) const {
    return 4 * buckets(d) + (d * static_cast<uint64_t>(codeBits()) + 7) / 8;
  }
  // |decoded value| of level l under `scale`, in float64.
  double magnitude(double scale, uint32_t l) const {
    if (levels == LevelSet::kUniform) {
      return scale * static_cast<double>(l) / static_cast<double>(s);
    }
    return l == 0 ? 0.0 : std::ldexp(scale, static_cast<int>(l) - static_cast<int>(s));
  }
  // Rounds |v| onto the levels of `scale` (positive, finite, >= |v|) without bias. Exactly one
  // uniform() draw.
  uint32_t round(double absV, double scale, core::Rng& rng) const {
    if (levels == LevelSet::kUniform) {
      const double r = std::min(static_cast<double>(s) * absV / scale, static_cast<double>(s));
      auto level = static_cast<uint32_t>(r);
      if (rng.uniform() < r - level) ++level;
      return level;
    }
    const double r = std::min(absV / scale, 1.0);
    uint32_t level = 0;
    double up = 0.0;  // probability of the level above
    if (r > 0.0) {
      int e;
      const double f = std::frexp(r, &e);  // r = f * 2^e, f in [1/2, 1): floor(log2 r) = e - 1
      if (e - 1 >= 1 - static_cast<int>(s)) {
        level = static_cast<uint32_t>(e - 1 + static_cast<int>(s));
        up = 2.0 * f - 1.0;  // (r - 2^(e-1)) / 2^(e-1), exact
      } else {
        up = std::ldexp(r, static_cast<int>(s) - 1);  // between 0 and the lowest level 2^(1-s)
      }
    }
    if (rng.uniform() < up) ++level;
    return level;
  }
};

// Writes the scaled codes of x into `out`, which holds payloadBytes(x.size()) zeroed bytes. A
// bucket whose scale is not positive and finite (zeros; or NaN / infinity, which no decoder
// accepts) gets level 0 everywhere and draws nothing.
template <typename T>
void encodeScaledCodes(std::span<const T> x, const ScaledCodes& q, core::Rng& rng, std::byte* out) {
  const uint64_t d = x.size();
  const uint64_t buckets = q.buckets(d);
  BitWriter codes(out + 4 * buckets);
  for (uint64_t b = 0; b < buckets; ++b) {
    const uint64_t lo = b * q.bucket;
    const std::span<const T> part = x.subspan(lo, std::min<uint64_t>(q.bucket, d - lo));
    const float scale = roundUpToFloat(bucketNorm(part, q.linf));
    storeLe<uint32_t>(out + 4 * b, std::bit_cast<uint32_t>(scale));
    const bool quantize = std::isfinite(scale) && scale > 0.0f;
    for (T v : part) {
      uint32_t code = 0;
      if (quantize) {
        const uint32_t level = q.round(std::abs(static_cast<double>(v)), scale, rng);
        // A zero level carries no sign, so every vector has one encoding.
        code = level != 0 && v < 0 ? level | q.signBit() : level;
      }
      codes.put(code, q.codeBits());
    }
  }
  codes.flush();
}

// Validates a payload of scaled codes for n elements: its exact length, every scale, every code
// (level <= s, no signed zero) and the padding. `codec` names the codec in messages.
inline core::Status checkScaledCodes(std::span<const std::byte> payload, const ScaledCodes& q,
                                     uint64_t n, const char* codec) {
  const uint64_t buckets = q.buckets(n);
  if (payload.size() != q.payloadBytes(n)) {
    return core::corruption(std::string(codec) + " payload of " + std::to_string(payload.size()) +
                            " bytes, its params imply " + std::to_string(q.payloadBytes(n)));
  }
  const std::byte* p = payload.data();
  for (uint64_t b = 0; b < buckets; ++b) {
    if (!validScale(std::bit_cast<float>(loadLe<uint32_t>(p + 4 * b)))) {
      return core::corruption(std::string(codec) + " scale is negative, NaN or infinite");
    }
  }
  const uint32_t levelMask = q.signBit() - 1;
  BitReader check(p + 4 * buckets);
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t code = check.get(q.codeBits());
    if (code == q.signBit()) {
      return core::corruption(std::string(codec) + " code for negative zero");
    }
    if ((code & levelMask) > q.s) {
      return core::corruption(std::string(codec) + " level " + std::to_string(code & levelMask) +
                              " above " + std::to_string(q.s));
    }
  }
  if (check.leftover() != 0) {
    return core::corruption(std::string(codec) + " padding bits are not zero");
  }
  return core::Status::ok();
}

// Calls emit(i, value) for the n elements of a payload checkScaledCodes accepted; value is
// sign * magnitude / divisor in float64.
template <typename Emit>
void readScaledCodes(std::span<const std::byte> payload, const ScaledCodes& q, uint64_t n,
                     double divisor, Emit&& emit) {
  const uint64_t buckets = q.buckets(n);
  const std::byte* p = payload.data();
  const uint32_t levelMask = q.signBit() - 1;
  BitReader codes(p + 4 * buckets);
  for (uint64_t b = 0; b < buckets; ++b) {
    const double scale = std::bit_cast<float>(loadLe<uint32_t>(p + 4 * b));
    const uint64_t hi = std::min<uint64_t>(n, (b + 1) * q.bucket);
    for (uint64_t i = b * q.bucket; i < hi; ++i) {
      const uint32_t code = codes.get(q.codeBits());
      double magnitude = q.magnitude(scale, code & levelMask);
      if (divisor != 1.0) magnitude /= divisor;
      emit(i, (code & q.signBit()) != 0 ? -magnitude : magnitude);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Index lists: strictly increasing indices as LEB128 gaps, the first varint being the index.

inline void appendIndexGaps(std::vector<std::byte>& out, std::span<const uint32_t> indices) {
  uint32_t previous = 0;
  for (size_t j = 0; j < indices.size(); ++j) {
    appendVarint(out, j == 0 ? indices[j] : indices[j] - previous);
    previous = indices[j];
  }
}

// Reads n indices written by appendIndexGaps, each < d, into `indices` (replaced). The caller
// bounds n by the payload's size first (every index takes at least one byte).
inline core::Status readIndexGaps(Reader& r, uint64_t n, uint64_t d,
                                  std::vector<uint32_t>& indices) {
  if (n > r.remaining()) {
    return core::corruption("payload too short for " + std::to_string(n) + " indices");
  }
  indices.clear();
  indices.reserve(n);
  uint64_t index = 0;
  for (uint64_t j = 0; j < n; ++j) {
    uint64_t gap;
    if (!r.readVarint(gap)) return core::corruption("malformed index varint");
    if (j > 0 && gap == 0) return core::corruption("indices not strictly increasing");
    if (gap >= d - (j == 0 ? 0 : index)) {
      return core::corruption("index out of range for " + std::to_string(d) + " elements");
    }
    index = j == 0 ? gap : index + gap;
    indices.push_back(static_cast<uint32_t>(index));
  }
  return core::Status::ok();
}

}  // namespace starling::compression::codecs

// The scaled codes of bits.h (docs/wire_format.md, "QSGD codes", "Exponential levels"): bucket
// scales, stochastic rounding onto uniform or exponential levels, validation and decoding.
// A bucket is processed in chunks of kChunk elements, each pass over a chunk (random bits,
// levels, packing) a simple loop over arrays that stay in L1 and vectorize
// (STARLING_SIMD_CLONES, wire.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "compression/codecs/bits.h"
#include "compression/codecs/elementwise.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

constexpr size_t kChunk = 512;  // elements per pass; a multiple of 32 (see fillRoundingBits)

// ---------------------------------------------------------------------------------------------
// Stochastic rounding in fixed point. Each element gets a 16-bit uniform integer u and an integer
// R = round(p * 2^16) for its round-up probability p; it rounds up when u + R >= 2^16, that is
// with probability R / 2^16. When the level is exact (p = 0 or 1) R is 0 or 2^16 despite the
// float rounding below, so exact levels stay deterministic, as with the float64 comparison before.

// 16-bit uniforms for n <= kChunk elements: word w of the generator gives elements 4w .. 4w + 3,
// low bits first.
void fillRoundingBits(UniformBits& gen, size_t n, uint16_t* u) {
  uint64_t words[kChunk / 4];
  const size_t count = (n + 31) / 32 * UniformBits::kLanes;  // whole steps of the 8 lanes
  gen.fill(words, count);
  std::memcpy(u, words, 2 * n);  // little-endian: the same on every host we build for
}

// Uniform levels in float32: R = round(|x| * k), k = s 2^16 / scale. Used when s <= 63 and k is
// a normal float32: the two roundings (k, the product) are each 2^-24 relative, so R is off by at
// most s 2^16 2^-23 < 0.5 and an exact level still gives R = level 2^16 exactly. Products stay
// below 2^22, where adding 0.5 is exact, so truncation rounds half up.
STARLING_SIMD_CLONES
void uniformLevelsFloat(const float* x, size_t n, float k, uint32_t maxR, const uint16_t* u,
                        uint32_t signBit, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i)
    codes[i] = elementwise::uniformCodeFloat(x[i], k, maxR, u[i], signBit);
}

// The same in float64, for 8-bit codes and float64 states: R is off by at most s 2^16 2^-52.
template <typename T>
[[gnu::always_inline]] inline void uniformLevelsDoubleImpl(const T* x, size_t n, double k,
                                                           uint32_t maxR, const uint16_t* u,
                                                           uint32_t signBit, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(x[i]));
    codes[i] = elementwise::uniformCodeDouble(a, x[i] < T(0), k, maxR, u[i], signBit);
  }
}
STARLING_SIMD_CLONES
void uniformLevelsDouble(const float* x, size_t n, double k, uint32_t maxR, const uint16_t* u,
                         uint32_t signBit, uint8_t* codes) {
  uniformLevelsDoubleImpl(x, n, k, maxR, u, signBit, codes);
}
STARLING_SIMD_CLONES
void uniformLevelsDouble(const double* x, size_t n, double k, uint32_t maxR, const uint16_t* u,
                         uint32_t signBit, uint8_t* codes) {
  uniformLevelsDoubleImpl(x, n, k, maxR, u, signBit, codes);
}

// Exponential levels, in float64: r = |x| / scale (as |x| * (1 / scale), within 2^-52 of it), and
// for 2^e <= r < 2^(e+1) the level is e + s or one above with probability (r - 2^e) / 2^e, which
// is the fraction field of r's float64 bits; below the lowest level 2^(1-s), level 0 or 1 with
// probability r 2^(s-1).
template <typename T>
[[gnu::always_inline]] inline void exponentialLevelsImpl(const T* x, size_t n, double invScale,
                                                         uint32_t s, const uint16_t* u,
                                                         uint32_t signBit, uint8_t* codes) {
  const double belowFactor = elementwise::exponentialBelowFactor(s);
  for (size_t i = 0; i < n; ++i) {
    codes[i] = elementwise::exponentialCodeDouble(std::fabs(static_cast<double>(x[i])), x[i] < T(0),
                                                  invScale, s, belowFactor, u[i], signBit);
  }
}
STARLING_SIMD_CLONES
void exponentialLevels(const float* x, size_t n, double invScale, uint32_t s, const uint16_t* u,
                       uint32_t signBit, uint8_t* codes) {
  exponentialLevelsImpl(x, n, invScale, s, u, signBit, codes);
}
STARLING_SIMD_CLONES
void exponentialLevels(const double* x, size_t n, double invScale, uint32_t s, const uint16_t* u,
                       uint32_t signBit, uint8_t* codes) {
  exponentialLevelsImpl(x, n, invScale, s, u, signBit, codes);
}

// The same in float32, for s <= 31 and 1 / scale a normal float32: r is within 2^-23 of
// |x| / scale, so R is off by at most 2^-6 and an exact power of two still gives R = 0 or 2^16.
// Below the lowest level, r 2^(s+15) < 2^16 is exact, and adding 0.5 to it is too.
STARLING_SIMD_CLONES
void exponentialLevelsFloat(const float* x, size_t n, float invScale, uint32_t s, const uint16_t* u,
                            uint32_t signBit, uint8_t* codes) {
  const float belowFactor = elementwise::exponentialBelowFactorFloat(s);
  for (size_t i = 0; i < n; ++i) {
    codes[i] = elementwise::exponentialCodeFloat(x[i], invScale, s, belowFactor, u[i], signBit);
  }
}

// Whether any code is a negative zero or has a level above s. Bytes all the way, so the compares
// run 64 to a vector.
STARLING_SIMD_CLONES
bool anyBadCode(const uint8_t* c, size_t n, uint32_t signBit, uint32_t s) {
  const auto sign = static_cast<uint8_t>(signBit);
  const auto levelMask = static_cast<uint8_t>(signBit - 1);
  const auto top = static_cast<uint8_t>(s);
  uint8_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad |= (c[i] == sign) | ((c[i] & levelMask) > top);
  return bad != 0;
}

// anyBadCode straight on the packed stream, for codes of 2, 4 or 8 bits (a code never straddles
// a byte): SWAR over 64-bit words, every `width`-bit field checked at once. With L the level
// mask and H the sign bit repeated in every field, for a field's level l = x & L:
//   l > s   <=>  l + (L - s) reaches H;   l != 0  <=>  l + L reaches H,
// and neither sum carries out of its field (both stay below 2H). A field is bad when it is above
// s, or is the sign bit alone (negative zero). `bytes` whole bytes of codes, no padding.
STARLING_SIMD_CLONES
bool anyBadPacked(const std::byte* stream, size_t bytes, int width, uint32_t signBit, uint32_t s) {
  uint64_t ones = 0;  // 1 in the lowest bit of every field
  for (int at = 0; at < 64; at += width) ones |= uint64_t{1} << at;
  const uint64_t levelMask = ones * (signBit - 1);
  const uint64_t sign = ones * signBit;
  const uint64_t aboveS = ones * (signBit - 1 - s);
  uint64_t bad = 0;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t x;
    std::memcpy(&x, stream + i, 8);
    const uint64_t level = x & levelMask;
    const uint64_t over = (level + aboveS) & sign;
    const uint64_t nonzero = (level + levelMask) & sign;
    bad |= over | (x & sign & ~nonzero);
  }
  if (i < bytes) {
    uint64_t x = 0;  // zero fields are valid codes
    std::memcpy(&x, stream + i, bytes - i);
    const uint64_t level = x & levelMask;
    bad |= ((level + aboveS) & sign) | (x & sign & ~((level + levelMask) & sign));
  }
  return bad != 0;
}

// Table lookup of decoded values: out[i] = lut[c[i]]. For float32 and tables of up to 64 entries
// (codes of up to 6 bits) the table is held in registers and indexed with vector shuffles
// (vpermps / vpermi2ps on AVX-512), two 32-entry halves selected by bit 5 of the code; the values
// are the table's, bit for bit.
using Floats16 = float __attribute__((vector_size(64)));
using Ints16 = int32_t __attribute__((vector_size(64)));

STARLING_SIMD_CLONES
void lookup(const uint8_t* c, size_t n, const float* lut, int codeBits, float* out) {
  size_t i = 0;
#if defined(__GNUC__) && !defined(__clang__)
  // GCC's __builtin_shuffle takes run-time indices; clang has no equivalent (its
  // __builtin_shufflevector wants constants), so clang builds (the fuzz targets) use the loop.
  if (codeBits <= 6) {
    Floats16 t0, t1, t2, t3;
    std::memcpy(&t0, lut, sizeof(t0));
    std::memcpy(&t1, lut + 16, sizeof(t1));
    std::memcpy(&t2, lut + 32, sizeof(t2));
    std::memcpy(&t3, lut + 48, sizeof(t3));
    for (; i + 16 <= n; i += 16) {
      Ints16 index;
      for (int t = 0; t < 16; ++t) index[t] = c[i + t];
      Floats16 v;
      if (codeBits <= 4) {
        v = __builtin_shuffle(t0, index);
      } else if (codeBits == 5) {
        v = __builtin_shuffle(t0, t1, index);
      } else {
        const Ints16 low = index & 31;
        v = (index & 32) != 0 ? __builtin_shuffle(t2, t3, low) : __builtin_shuffle(t0, t1, low);
      }
      std::memcpy(out + i, &v, sizeof(v));
    }
  }
#else
  (void)codeBits;
#endif
  for (; i < n; ++i) out[i] = lut[c[i]];
}
STARLING_SIMD_CLONES
void lookup(const uint8_t* c, size_t n, const double* lut, int, double* out) {
  for (size_t i = 0; i < n; ++i) out[i] = lut[c[i]];
}
}  // namespace

template <typename T>
void encodeScaledCodes(std::span<const T> x, const ScaledCodes& q, core::Rng& rng, std::byte* out) {
  const uint64_t d = x.size();
  const uint64_t buckets = q.buckets(d);
  const int width = q.codeBits();
  UniformBits gen(rng.nextU64());
  BitWriter stream(out + 4 * buckets);
  uint16_t u[kChunk];
  uint8_t codes[kChunk];
  for (uint64_t b = 0; b < buckets; ++b) {
    const uint64_t first = b * q.bucket;
    const std::span<const T> part = x.subspan(first, std::min<uint64_t>(q.bucket, d - first));
    const float scale = bucketScale<T>(part, q.linf);
    storeLe<uint32_t>(out + 4 * b, std::bit_cast<uint32_t>(scale));
    const bool quantize = std::isfinite(scale) && scale > 0.0f;
    // Per-bucket factors, in float64 from the float32 scale (elementwise.h: scaledFactor, the
    // GPU encoders' per-bucket factor, is the same expression).
    const double k = static_cast<double>(q.s) * 0x1p16 / static_cast<double>(scale);
    const bool inFloat = std::is_same_v<T, float> && elementwise::uniformInFloat(k, q.s);
    const double invScale = 1.0 / static_cast<double>(scale);
    const bool expInFloat =
        std::is_same_v<T, float> && elementwise::exponentialInFloat(invScale, q.s);
    const uint32_t maxR = q.s << kRoundingBits;
    for (size_t lo = 0; lo < part.size(); lo += kChunk) {
      const size_t n = std::min<size_t>(kChunk, part.size() - lo);
      const T* v = part.data() + lo;
      if (!quantize) {
        std::fill(codes, codes + n, uint8_t{0});
      } else {
        fillRoundingBits(gen, n, u);
        const bool exponential = q.levels == LevelSet::kExponential;
        if constexpr (std::is_same_v<T, float>) {
          if (exponential && expInFloat) {
            exponentialLevelsFloat(v, n, static_cast<float>(invScale), q.s, u, q.signBit(), codes);
          } else if (exponential) {
            exponentialLevels(v, n, invScale, q.s, u, q.signBit(), codes);
          } else if (inFloat) {
            uniformLevelsFloat(v, n, static_cast<float>(k), maxR, u, q.signBit(), codes);
          } else {
            uniformLevelsDouble(v, n, k, maxR, u, q.signBit(), codes);
          }
        } else if (exponential) {
          exponentialLevels(v, n, invScale, q.s, u, q.signBit(), codes);
        } else {
          uniformLevelsDouble(v, n, k, maxR, u, q.signBit(), codes);
        }
      }
      packCodes(codes, n, width, stream);
    }
  }
  stream.flush();
}

core::Status checkScaledCodes(std::span<const std::byte> payload, const ScaledCodes& q, uint64_t n,
                              const char* codec) {
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
  const int width = q.codeBits();
  const std::byte* stream = p + 4 * buckets;
  uint8_t codes[kChunk];
  uint64_t lo = 0;
  if (width == 2 || width == 4 || width == 8) {
    // The codes in whole bytes checked packed, without unpacking them (a quarter of the time);
    // any bad one sends the whole stream through the loop below, which names the first.
    const uint64_t whole = n * static_cast<uint64_t>(width) / 8;
    if (!anyBadPacked(stream, static_cast<size_t>(whole), width, q.signBit(), q.s)) {
      lo = whole * 8 / static_cast<uint64_t>(width);
    }
  }
  for (; lo < n; lo += kChunk) {
    const size_t m = static_cast<size_t>(std::min<uint64_t>(kChunk, n - lo));
    unpackCodes(stream, lo, m, width, codes);
    if (!anyBadCode(codes, m, q.signBit(), q.s)) continue;
    for (size_t i = 0; i < m; ++i) {  // the first bad code, for the message
      const uint32_t level = codes[i] & (q.signBit() - 1);
      if (codes[i] == q.signBit()) {
        return core::corruption(std::string(codec) + " code for negative zero");
      }
      if (level > q.s) {
        return core::corruption(std::string(codec) + " level " + std::to_string(level) + " above " +
                                std::to_string(q.s));
      }
    }
  }
  const uint64_t usedBits = n * static_cast<uint64_t>(width);
  if (usedBits % 8 != 0 &&
      (std::to_integer<uint32_t>(stream[usedBits / 8]) >> (usedBits % 8)) != 0) {
    return core::corruption(std::string(codec) + " padding bits are not zero");
  }
  return core::Status::ok();
}

template <typename T>
void decodeScaledCodes(std::span<const std::byte> payload, const ScaledCodes& q, uint64_t n,
                       double divisor, T* out) {
  const uint64_t buckets = q.buckets(n);
  const std::byte* p = payload.data();
  const std::byte* stream = p + 4 * buckets;
  const int width = q.codeBits();
  const uint32_t signBit = q.signBit();
  // Decoded value of each code of the bucket (codes above s never occur: checked), built once per
  // bucket with the very float64 operations of the format, so the values are the same as
  // computing each element's on its own.
  T lut[256] = {};
  double magnitudes[128];
  uint8_t codes[kChunk];
  auto value = [&](double scale, uint32_t code) {
    double magnitude = q.magnitude(scale, code & (signBit - 1));
    if (divisor != 1.0) magnitude /= divisor;
    return static_cast<T>((code & signBit) != 0 ? -magnitude : magnitude);
  };
  for (uint64_t b = 0; b < buckets; ++b) {
    const double scale = std::bit_cast<float>(loadLe<uint32_t>(p + 4 * b));
    const uint64_t lo = b * q.bucket;
    const uint64_t hi = std::min<uint64_t>(n, lo + q.bucket);
    if (hi - lo <= q.s) {  // a bucket smaller than its table: element by element
      for (uint64_t i = lo; i < hi; ++i) {
        unpackCodes(stream, i, 1, width, codes);
        out[i] = value(scale, codes[0]);
      }
      continue;
    }
    // value() for every level and both signs, as loops the compiler vectorizes (the float64
    // divisions dominate the decode of small buckets): the same operations in the same order,
    // each magnitude computed once for its two signs.
    if (q.levels == LevelSet::kUniform) {
      for (uint32_t l = 0; l <= q.s; ++l) {
        magnitudes[l] = elementwise::uniformMagnitude(scale, l, q.s);
      }
    } else {
      // ldexp(scale, l - s) as a product with the exact power 2^(l - s): scale is a float32
      // (>= 2^-149 or 0) and l - s >= -127, so the product stays far inside float64's normal
      // range and is exact, the value ldexp gives, without a libm call per level.
      magnitudes[0] = 0.0;
      for (uint32_t l = 1; l <= q.s; ++l)
        magnitudes[l] = elementwise::exponentialMagnitude(scale, l, q.s);
    }
    if (divisor != 1.0) {
      for (uint32_t l = 0; l <= q.s; ++l) magnitudes[l] /= divisor;
    }
    for (uint32_t l = 0; l <= q.s; ++l) {
      lut[l] = static_cast<T>(magnitudes[l]);
      lut[l | signBit] = static_cast<T>(-magnitudes[l]);
    }
    for (uint64_t at = lo; at < hi; at += kChunk) {
      const size_t m = static_cast<size_t>(std::min<uint64_t>(kChunk, hi - at));
      unpackCodes(stream, at, m, width, codes);
      lookup(codes, m, lut, width, out + at);
    }
  }
}

template void encodeScaledCodes<float>(std::span<const float>, const ScaledCodes&, core::Rng&,
                                       std::byte*);
template void encodeScaledCodes<double>(std::span<const double>, const ScaledCodes&, core::Rng&,
                                        std::byte*);
template void decodeScaledCodes<float>(std::span<const std::byte>, const ScaledCodes&, uint64_t,
                                       double, float*);
template void decodeScaledCodes<double>(std::span<const std::byte>, const ScaledCodes&, uint64_t,
                                        double, double*);

}  // namespace starling::compression::codecs

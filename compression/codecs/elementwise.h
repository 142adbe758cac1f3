// The per-element math of the codecs that also run on a GPU, written once: the CPU codecs
// (dense.cc, scaled_codes.cc) call these in their loops, and the CUDA kernels (cuda/kernels.cu)
// call the same functions, so a kernel adds only the launch and the memory movement
// (docs/cuda.md). Integer operations and exact or correctly rounded IEEE steps only: the result
// does not depend on the rounding mode, the FPU or the device; a compiler must not fuse a * b + c
// into an FMA here (the libraries are built with -ffp-contract=off, the kernels with the same or
// nvcc's --fmad=false).
#pragma once

#include <cstdint>

#include "core/hd.h"

namespace starling::compression::elementwise {

// ---------------------------------------------------------------------------------------------
// fp16 and bf16. A float32 converts to double exactly, so rounding it straight to 16 bits gives
// float16.h's halfFromDouble / bf16FromDouble; these formulas were checked against those on all
// 2^32 float32 and all 2^16 16-bit patterns.

// fp16 bits of the float32 with bits u: round to nearest even, finite overflow saturates to
// 65504, NaN becomes a quiet NaN of the same sign.
STARLING_HD uint16_t halfFromFloatBits(uint32_t u) {
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // Normal fp16 (|x| >= 2^-14): rebias the exponent (127 -> 15, i.e. subtract 112 << 23) and
  // round off the 13 low fraction bits to nearest even: adding 0xfff plus the kept lowest bit
  // carries exactly when the dropped bits exceed half, or equal it with an odd kept part. A carry
  // out of the fraction moves into the exponent, as it should.
  const uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Subnormal fp16: the 24-bit significand in units of 2^-24 is m * 2^(e - 126) for the biased
  // exponent e, so shift right by 126 - e (>= 14 here; 31 flushes float32 subnormals to zero)
  // with the same round-to-nearest-even carry. Clamped so that no lane shifts out of range.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const int rawShift = 126 - static_cast<int>(e);
  const uint32_t shift = static_cast<uint32_t>(rawShift < 1 ? 1 : (rawShift > 31 ? 31 : rawShift));
  const uint32_t sub = (m + ((1u << (shift - 1)) - 1u) + ((m >> shift) & 1u)) >> shift;
  uint32_t h = a >= 0x38800000u ? normal : sub;
  h = h > 0x7bffu ? 0x7bffu : h;  // finite values beyond 65504 saturate
  if (a >= 0x7f800000u) h = a == 0x7f800000u ? 0x7c00u : 0x7e00u;  // infinity; NaN made quiet
  return static_cast<uint16_t>(sign | h);
}

// bf16 bits of the float32 with bits u: its top half rounded to nearest even.
STARLING_HD uint16_t bf16FromFloatBits(uint32_t u) {
  const uint32_t a = u & 0x7fffffffu;
  // The same carry trick on the low 16 bits; bf16 has float32's exponent range, so this is also
  // right for float32 subnormals and for a carry into the exponent. u + 0x8000 cannot wrap: the
  // largest finite magnitude is below 0x7f800000.
  uint32_t h = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  if ((h & 0x7fffu) == 0x7f80u && a < 0x7f800000u) --h;      // rounded up to infinity: saturate
  if (a > 0x7f800000u) h = ((u >> 16) & 0x8000u) | 0x7fc0u;  // NaN made quiet
  return static_cast<uint16_t>(h);
}

// float32 bits of fp16 bits h (exact).
STARLING_HD uint32_t floatBitsFromHalf(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = h & 0x7c00u;
  const uint32_t m = h & 0x3ffu;
  // Rebias the exponent (15 -> 127): add 112 << 23.
  const uint32_t normal = ((h & 0x7fffu) << 13) + 0x38000000u;
  const uint32_t special = 0x7f800000u | (m << 13);  // infinity, NaN with its payload
  // Subnormals and zero: m units of 2^-24, an exact product in float32.
  const uint32_t sub = core::bitsOf(static_cast<float>(m) * 0x1p-24f);
  // Selected with masks rather than branches, so that the loop vectorizes.
  const uint32_t isSpecial = 0u - static_cast<uint32_t>(e == 0x7c00u);
  const uint32_t isSub = 0u - static_cast<uint32_t>(e == 0);
  return sign | (special & isSpecial) | (sub & isSub) | (normal & ~(isSpecial | isSub));
}

// float32 bits of bf16 bits h (exact: bf16 is float32's top half).
STARLING_HD uint32_t floatBitsFromBf16(uint32_t h) { return h << 16; }

// ---------------------------------------------------------------------------------------------
// Uniform levels (QSGD, docs/wire_format.md "QSGD codes"). Stochastic rounding in fixed point:
// R = round(|x| k), k = s 2^16 / scale, is the level times 2^16; with a 16-bit uniform u the code
// rounds up when the dropped part plus u reaches 2^16, that is with probability frac(R / 2^16).
// The code is the level with the sign bit above it; level 0 carries no sign.

inline constexpr int kRoundingBits = 16;

// In float32, for s <= 63 and k a normal float32: the two roundings (k, the product) are each
// 2^-24 relative, so R is off by at most s 2^16 2^-23 < 0.5 and an exact level still gives
// R = level 2^16 exactly. Products stay below 2^22, where adding 0.5 is exact, so truncation
// rounds half up.
STARLING_HD uint8_t uniformCodeFloat(float x, float k, uint32_t maxR, uint32_t u,
                                     uint32_t signBit) {
  const float a = __builtin_fabsf(x);
  const auto r = static_cast<uint32_t>(static_cast<int32_t>(a * k + 0.5f));
  const uint32_t level = ((r < maxR ? r : maxR) + u) >> kRoundingBits;
  return static_cast<uint8_t>(level | (x < 0.0f && level != 0 ? signBit : 0u));
}

// The same in float64, for 8-bit codes and float64 states: R is off by at most s 2^16 2^-52.
STARLING_HD uint8_t uniformCodeDouble(double a, bool negative, double k, uint32_t maxR, uint32_t u,
                                      uint32_t signBit) {
  const auto r = static_cast<uint32_t>(static_cast<int32_t>(a * k + 0.5));
  const uint32_t level = ((r < maxR ? r : maxR) + u) >> kRoundingBits;
  return static_cast<uint8_t>(level | (negative && level != 0 ? signBit : 0u));
}

// The decoded value of uniform level l under `scale` (a float32's value), in float64:
// scale * l / s, the format's definition.
STARLING_HD double uniformMagnitude(double scale, uint32_t l, uint32_t s) {
  return scale * static_cast<double>(l) / static_cast<double>(s);
}

// ---------------------------------------------------------------------------------------------
// Exponential levels (NUQSGD, natural dithering; docs/wire_format.md "Exponential levels"):
// r = |x| / scale (as |x| * (1 / scale)), and for 2^e <= r < 2^(e+1) the level is e + s or one
// above with probability (r - 2^e) / 2^e, which is the fraction field of r's bits; below the
// lowest level 2^(1-s), level 0 or 1 with probability r 2^(s-1).

// 2^(s - 1 + kRoundingBits), the factor of the part below the lowest level, in float64 and float32.
STARLING_HD double exponentialBelowFactor(uint32_t s) {
  return core::doubleOfBits(static_cast<uint64_t>(1023 + s - 1 + kRoundingBits) << 52);
}
STARLING_HD float exponentialBelowFactorFloat(uint32_t s) {
  return core::floatOfBits((127u + s - 1u + static_cast<uint32_t>(kRoundingBits)) << 23);
}

// In float64 (any s, float64 states): r is within 2^-52 of |x| / scale.
STARLING_HD uint8_t exponentialCodeDouble(double a, bool negative, double invScale, uint32_t s,
                                          double belowFactor, uint32_t u, uint32_t signBit) {
  constexpr int kDrop = 52 - kRoundingBits;
  const uint64_t lowest = 1024 - s;  // biased exponent of 2^(1-s)
  const double scaled = a * invScale;
  const double r = 1.0 < scaled ? 1.0 : scaled;  // std::min(scaled, 1.0)
  const uint64_t b = core::bitsOf(r);
  const uint64_t e = b >> 52;
  const auto fraction = static_cast<uint32_t>(
      ((b & ((uint64_t{1} << 52) - 1)) + (uint64_t{1} << (kDrop - 1))) >> kDrop);
  const bool onLevels = e >= lowest;
  // Below the lowest level r 2^(s+15) < 2^16; elsewhere 0, so the conversion never overflows.
  const double rBelow = onLevels ? 0.0 : r;
  const auto below = static_cast<uint32_t>(static_cast<int32_t>(rBelow * belowFactor + 0.5));
  const uint32_t base = onLevels ? static_cast<uint32_t>(e - 1023 + s) : 0u;
  const uint32_t level = base + (((onLevels ? fraction : below) + u) >> kRoundingBits);
  return static_cast<uint8_t>(level | (negative && level != 0 ? signBit : 0u));
}

// In float32, for s <= 31 and 1 / scale a normal float32: r is within 2^-23 of |x| / scale, so
// R is off by at most 2^-6 and an exact power of two still gives R = 0 or 2^16. Below the lowest
// level, r 2^(s+15) < 2^16 is exact, and adding 0.5 to it is too.
STARLING_HD uint8_t exponentialCodeFloat(float x, float invScale, uint32_t s, float belowFactor,
                                         uint32_t u, uint32_t signBit) {
  constexpr int kDrop = 23 - kRoundingBits;
  const uint32_t lowest = 128 - s;  // biased float32 exponent of 2^(1-s)
  const float scaled = __builtin_fabsf(x) * invScale;
  const float r = 1.0f < scaled ? 1.0f : scaled;
  const uint32_t b = core::bitsOf(r);
  const uint32_t e = b >> 23;
  const uint32_t fraction = ((b & 0x7fffffu) + (1u << (kDrop - 1))) >> kDrop;
  const bool onLevels = e >= lowest;
  const float rBelow = onLevels ? 0.0f : r;
  const auto below = static_cast<uint32_t>(static_cast<int32_t>(rBelow * belowFactor + 0.5f));
  const uint32_t base = onLevels ? e - 127 + s : 0u;
  const uint32_t level = base + (((onLevels ? fraction : below) + u) >> kRoundingBits);
  return static_cast<uint8_t>(level | (x < 0.0f && level != 0 ? signBit : 0u));
}

// The decoded value of exponential level l under `scale` (a float32's value), in float64:
// 0 for level 0, else scale 2^(l - s) as a product with the exact power of two (scale >= 2^-149
// or 0 and l - s >= -127, so the product is exact: ldexp's value).
STARLING_HD double exponentialMagnitude(double scale, uint32_t l, uint32_t s) {
  if (l == 0) return 0.0;
  return scale *
         core::doubleOfBits(
             static_cast<uint64_t>(1023 + static_cast<int64_t>(l) - static_cast<int64_t>(s)) << 52);
}

// ---------------------------------------------------------------------------------------------
// The counter-based rounding bits of the GPU encoders (docs/cuda.md): element i's 16-bit uniform
// is 16-bit lane i mod 4 (low bits first) of SplitMix64's output i / 4 from `seed`, that is
// mix64(seed + (i / 4) * gamma). Any element's bits come without the ones before it, which a
// GPU thread needs; the CPU codecs' sequential xoshiro256++ streams (bits.h) do not allow that,
// so a GPU frame of a stochastic codec is a valid frame of the same codec whose rounding
// differs from the CPU encoder's, and equals a CPU encoding with these bits byte for byte.
// The 64-bit word that holds element i's bits (and its three neighbours').
STARLING_HD uint64_t counterWord(uint64_t seed, uint64_t i) {
  return core::mix64(seed + (i >> 2) * 0x9e3779b97f4a7c15ULL);
}
STARLING_HD uint32_t counterUniform16(uint64_t seed, uint64_t i) {
  return static_cast<uint32_t>((counterWord(seed, i) >> (16 * (i & 3))) & 0xffffu);
}

// ---------------------------------------------------------------------------------------------
// A bucket's factor for its codes, from its scale: k = s 2^16 / scale for uniform levels,
// 1 / scale for exponential ones, both in float64 as scaled_codes.cc computes them; 0 when the
// bucket is not quantized (its scale is 0, infinite or NaN: every code 0). And which precision
// the codes take, as scaled_codes.cc decides it for float32 states.
STARLING_HD double scaledFactor(float scale, uint32_t s, bool exponential) {
  if (!(scale - scale == 0.0f && scale > 0.0f)) return 0.0;
  const double sc = static_cast<double>(scale);
  return exponential ? 1.0 / sc : static_cast<double>(s) * 0x1p16 / sc;
}
STARLING_HD bool uniformInFloat(double k, uint32_t s) {
  return s <= 63 && k <= 3.4028234663852886e38;  // FLT_MAX
}
STARLING_HD bool exponentialInFloat(double invScale, uint32_t s) {
  return s <= 31 && invScale >= 1.1754943508222875e-38 && invScale <= 3.4028234663852886e38;
}

// ---------------------------------------------------------------------------------------------
// Top-k's order (sparse.cc): larger |x_i| first, every NaN above everything else and equal to
// the other NaNs, equal magnitudes by lower index. A float32's magnitude key is its bits with the
// sign cleared (they order like the magnitudes), NaNs all mapped to the one key above infinity's.
inline constexpr uint32_t kTopkNanKey = 0x7f800001u;
STARLING_HD uint32_t topkKeyOfBits(uint32_t u) {
  const uint32_t a = u & 0x7fffffffu;
  return a < kTopkNanKey ? a : kTopkNanKey;
}

// The radix select that finds the k-th largest key on a GPU (cuda/kernels.cu) takes the key's
// bytes from the top, one pass each: `pass` 0 to 3. A key is still a candidate in pass p when its
// top 8p bits are `prefix` (the digits chosen so far); its digit in pass p is the next 8 bits.
STARLING_HD bool topkCandidate(uint32_t key, int pass, uint32_t prefix) {
  return pass == 0 || (key >> (32 - 8 * pass)) == prefix;
}
STARLING_HD uint32_t topkDigit(uint32_t key, int pass) {
  return (key >> (24 - 8 * pass)) & 0xffu;
}

// One pass's choice: the digit of the k-th largest candidate (1 <= k <= the candidates), given
// the candidates' histogram of digits, and how many candidates have a larger digit.
struct TopkDigit {
  uint32_t digit;
  uint64_t above;
};
STARLING_HD TopkDigit topkSelectDigit(const uint32_t* histogram, uint64_t k) {
  uint64_t above = 0;
  for (uint32_t d = 255;; --d) {
    if (above + histogram[d] >= k || d == 0) return {d, above};
    above += histogram[d];
  }
}

// Whether an element is among the k largest once K, the k-th largest key, is known: its key is
// above K, or it is K and fewer than equalKept elements with key K come before it (equalRank).
STARLING_HD bool topkKept(uint32_t key, uint32_t kthKey, uint64_t equalKept, uint64_t equalRank) {
  return key > kthKey || (key == kthKey && equalRank < equalKept);
}

// ---------------------------------------------------------------------------------------------
// One neighbour's term of the gossip combine in difference form (optim/combine.h):
//   out_k = start_k + sum_j c_j (m_jk - self_k), each element's terms added in neighbour order.
template <typename T>
STARLING_HD T combineTerm(T acc, T c, T m, T self) {
  return acc + c * (m - self);
}

// Count-Sketch (codecs/sketch.cc, compression/sketch_hash.h). Row j's bucket and sign of
// coordinate i from its hash coefficients (a0, b0) and (a1, b1): the multiply-add-shift hashes
// the CPU's block kernels compute by induction (a i + b mod 2^64 for consecutive i).
STARLING_HD uint32_t sketchBucket(uint64_t a, uint64_t b, uint64_t cols, uint64_t i) {
  return static_cast<uint32_t>((((a * i + b) >> 32) * cols) >> 32);
}
STARLING_HD bool sketchNegative(uint64_t a, uint64_t b, uint64_t i) {
  return ((a * i + b) >> 63) != 0;
}

// std::min and std::max, as the CPU's median networks call them (which of two equal values,
// +0 and -0, comes out is theirs).
template <typename T>
STARLING_HD T minOf(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
STARLING_HD T maxOf(T a, T b) {
  return a < b ? b : a;
}

// The lower median of v[0], ..., v[r - 1] for 1 <= r <= 7: the CPU decoder's comparison networks
// (codecs/sketch.cc, medianImpl) with the same comparisons in the same order, so the same value,
// down to the sign of a zero. Reorders v.
template <typename T>
STARLING_HD T median3(T a, T b, T c) {
  return maxOf(minOf(a, b), minOf(maxOf(a, b), c));
}
// The 2nd and 3rd smallest of a..d are the larger of the pairs' minima and the smaller of their
// maxima; the median of five is the median of those two and e.
template <typename T>
STARLING_HD T median5(T a, T b, T c, T d, T e) {
  const T m1 = maxOf(minOf(a, b), minOf(c, d));
  const T m2 = minOf(maxOf(a, b), maxOf(c, d));
  return median3(m1, m2, e);
}
// One comparator of an odd-even transposition sort: (a, b) <- (min, max).
template <typename T>
STARLING_HD void sortPair(T& a, T& b) {
  const T lo = minOf(a, b);
  const T hi = maxOf(a, b);
  a = lo;
  b = hi;
}
template <typename T>
STARLING_HD T sketchMedian(T* v, uint32_t r) {
  if (r == 1) return v[0];
  if (r == 2) return minOf(v[0], v[1]);
  if (r == 3) return median3(v[0], v[1], v[2]);
  if (r == 5) return median5(v[0], v[1], v[2], v[3], v[4]);
  // Odd-even transposition sort: r passes sort r values.
  for (uint32_t pass = 0; pass < r; ++pass) {
    for (uint32_t j = pass % 2; j + 1 < r; j += 2) sortPair(v[j], v[j + 1]);
  }
  return v[(r - 1) / 2];
}

// v[0..n) sorted ascending in place by heap sort: the GPU's Count-Sketch orders each bucket's
// coordinates by index (their atomic placement is in any order) so that the bucket sums its
// terms in index order, as the CPU's row-by-row scatter does.
STARLING_HD void siftDown(uint32_t* v, uint64_t root, uint64_t end) {
  for (;;) {
    uint64_t child = 2 * root + 1;
    if (child >= end) return;
    if (child + 1 < end && v[child] < v[child + 1]) ++child;
    if (!(v[root] < v[child])) return;
    const uint32_t t = v[root];
    v[root] = v[child];
    v[child] = t;
    root = child;
  }
}
STARLING_HD void sortAscending(uint32_t* v, uint64_t n) {
  for (uint64_t start = n / 2; start-- > 0;) siftDown(v, start, n);
  for (uint64_t end = n; end-- > 1;) {
    const uint32_t t = v[0];
    v[0] = v[end];
    v[end] = t;
    siftDown(v, 0, end);
  }
}

}  // namespace starling::compression::elementwise

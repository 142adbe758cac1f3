// The building blocks of bits.h: lane sums, bucket scales, the random bits of stochastic
// rounding and the packing of fixed-width codes. The loops are written to vectorize
// (STARLING_SIMD_CLONES, wire.h) and use only exact operations.
#include "compression/codecs/bits.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace starling::compression::codecs {
namespace {

constexpr size_t kSumLanes = 32;  // 4 AVX-512 accumulators hide the adds' latency

// ---------------------------------------------------------------------------------------------
// Lane sums (bits.h, "Sums that must equal a serial float64 loop").

// The interval around a lane sum of n nonnegative terms that holds their serial sum.
LaneSum boundLanes(double sum, size_t n) {
  LaneSum r;
  r.sum = sum;
  // A term takes part in at most n/32 + 4 additions here (its lane, then 5 tree levels) and in
  // at most n - 1 in the serial loop; S (exact) <= sum / (1 - gamma). For n < 2^40 the gammas'
  // denominators cost less than the factor 1 + 2^-10, and 8 units more than the 3 needed cover
  // the rounding of delta, lo and hi themselves.
  const double units = static_cast<double>(n) + static_cast<double>(n / kSumLanes) + 8.0;
  const double delta = units * 0x1p-53 * (1.0 + 0x1p-10) * r.sum;
  r.lo = r.sum - delta;
  r.hi = r.sum + delta;
  return r;
}

// Adds the lanes pairwise (lane j + w into lane j, w = 16, 8, 4, 2, 1) and bounds the result.
LaneSum finishLanes(double (&acc)[kSumLanes], size_t n) {
  for (size_t w = kSumLanes / 2; w >= 1; w /= 2) {
    for (size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return boundLanes(acc[0], n);
}

// Serial float64 sums, exactly as the codecs computed them before the lane sums.
double serialSumSquares(std::span<const float> x) {
  double sum = 0.0;
  for (float v : x) sum += static_cast<double>(v) * static_cast<double>(v);
  return sum;
}

// ---------------------------------------------------------------------------------------------
// Bit packing of codes (width 1..8 bits, LSB first).

// 8 codes of W bits, packed in the low 8W bits of a u64, moved to one byte each (spreadCodes),
// and back (gatherCodes): three steps that halve the pieces, 4W bits to 32-bit halves, 2W bits to
// 16-bit quarters, W bits to bytes. A software pdep / pext for these masks.
constexpr uint64_t repeated(uint64_t pattern, int period) {
  uint64_t r = 0;
  for (int i = 0; i < 64; i += period) r |= pattern << i;
  return r;
}
template <int W>
[[gnu::always_inline]] inline uint64_t spreadCodes(uint64_t v) {
  constexpr uint64_t k4 = (uint64_t{1} << (4 * W)) - 1;
  constexpr uint64_t k2 = repeated((uint64_t{1} << (2 * W)) - 1, 32);
  constexpr uint64_t k1 = repeated((uint64_t{1} << W) - 1, 16);
  v = (v & k4) | ((v >> (4 * W)) & k4) << 32;
  v = (v & k2) | ((v >> (2 * W)) & k2) << 16;
  return (v & k1) | ((v >> W) & k1) << 8;
}
template <int W>
[[gnu::always_inline]] inline uint64_t gatherCodes(uint64_t c) {
  constexpr uint64_t k4 = (uint64_t{1} << (4 * W)) - 1;
  constexpr uint64_t k2 = repeated((uint64_t{1} << (2 * W)) - 1, 32);
  constexpr uint64_t k1 = repeated((uint64_t{1} << W) - 1, 16);
  c = (c & k1) | ((c >> 8) & k1) << W;
  c = (c & k2) | ((c >> 16) & k2) << (2 * W);
  return (c & k4) | ((c >> 32) & k4) << (4 * W);
}

// Packs n codes of W bits, n a multiple of 8, starting at a byte boundary: every 8 codes fill W
// bytes exactly. Templated on W so that the shifts are constants and the loops vectorize.
template <int W>
[[gnu::always_inline]] inline void packGroups(const uint8_t* __restrict c, size_t n,
                                              uint8_t* __restrict o) {
  if constexpr (W == 8) {
    std::memcpy(o, c, n);
  } else if constexpr (W == 4) {
    for (size_t j = 0; j < n / 2; ++j) o[j] = static_cast<uint8_t>(c[2 * j] | c[2 * j + 1] << 4);
  } else if constexpr (W == 2) {
    for (size_t j = 0; j < n / 4; ++j) {
      o[j] = static_cast<uint8_t>(c[4 * j] | c[4 * j + 1] << 2 | c[4 * j + 2] << 4 |
                                  c[4 * j + 3] << 6);
    }
  } else {
    // Each group's W bytes go out as one 8-byte store while 8 bytes fit in the output: its top
    // bytes are zeros that the next group's store overwrites.
    const size_t groups = n / 8;
    const size_t wide = groups * W >= 8 ? (groups * W - 8) / W + 1 : 0;  // g W + 8 <= groups W
    const auto* c64 = reinterpret_cast<const AliasU64*>(c);
    for (size_t g = 0; g < groups; ++g) {
      const uint64_t v = gatherCodes<W>(c64[g]);
      if (g < wide) {
        *reinterpret_cast<AliasU64*>(o + W * g) = v;
      } else {
        for (int b = 0; b < W; ++b) o[W * g + b] = static_cast<uint8_t>(v >> (8 * b));
      }
    }
  }
}

STARLING_SIMD_CLONES
void packAligned(const uint8_t* c, size_t n, int width, std::byte* out) {
  auto* o = reinterpret_cast<uint8_t*>(out);  // std::byte and uint8_t may alias each other
  switch (width) {
    case 1:
      return packGroups<1>(c, n, o);
    case 2:
      return packGroups<2>(c, n, o);
    case 3:
      return packGroups<3>(c, n, o);
    case 4:
      return packGroups<4>(c, n, o);
    case 5:
      return packGroups<5>(c, n, o);
    case 6:
      return packGroups<6>(c, n, o);
    case 7:
      return packGroups<7>(c, n, o);
    default:
      return packGroups<8>(c, n, o);
  }
}

// Unpacks n codes of W bits, n a multiple of 8, from a byte boundary: the inverse of packGroups.
// Each input byte (W = 2, 4) or group of 8 codes (other W) becomes one 32- or 64-bit store of
// whole output bytes, built with shifts and masks (little-endian host).
template <int W>
[[gnu::always_inline]] inline void unpackGroups(const uint8_t* __restrict b, size_t n,
                                                uint8_t* __restrict c) {
  if constexpr (W == 8) {
    std::memcpy(c, b, n);
  } else if constexpr (W == 4) {
    auto* c16 = reinterpret_cast<AliasU16*>(c);
    for (size_t j = 0; j < n / 2; ++j) {
      c16[j] = static_cast<uint16_t>((b[j] & 15) | (b[j] >> 4) << 8);
    }
  } else if constexpr (W == 2) {
    // Byte t of the u32 gets bits 2t, 2t + 1 of the input byte: spread the nibbles to bytes 0
    // and 2, then each nibble's halves to adjacent bytes.
    auto* c32 = reinterpret_cast<AliasU32*>(c);
    for (size_t j = 0; j < n / 4; ++j) {
      uint32_t v = b[j];
      v = (v | v << 12) & 0x000f000fu;
      v = (v | v << 6) & 0x03030303u;
      c32[j] = v;
    }
  } else {
    // One 8-byte load per group while 8 bytes are there to read; its top bytes are ignored.
    constexpr uint64_t kLow = (uint64_t{1} << (8 * W)) - 1;
    const size_t groups = n / 8;
    const size_t wide = groups * W >= 8 ? (groups * W - 8) / W + 1 : 0;  // g W + 8 <= groups W
    auto* c64 = reinterpret_cast<AliasU64*>(c);
    for (size_t g = 0; g < groups; ++g) {
      uint64_t v = 0;
      if (g < wide) {
        v = *reinterpret_cast<const AliasU64*>(b + W * g) & kLow;
      } else {
        for (int k = 0; k < W; ++k) v |= static_cast<uint64_t>(b[W * g + k]) << (8 * k);
      }
      c64[g] = spreadCodes<W>(v);
    }
  }
}

STARLING_SIMD_CLONES
void unpackAligned(const std::byte* in, size_t n, int width, uint8_t* c) {
  const auto* b = reinterpret_cast<const uint8_t*>(in);
  switch (width) {
    case 1:
      return unpackGroups<1>(b, n, c);
    case 2:
      return unpackGroups<2>(b, n, c);
    case 3:
      return unpackGroups<3>(b, n, c);
    case 4:
      return unpackGroups<4>(b, n, c);
    case 5:
      return unpackGroups<5>(b, n, c);
    case 6:
      return unpackGroups<6>(b, n, c);
    case 7:
      return unpackGroups<7>(b, n, c);
    default:
      return unpackGroups<8>(b, n, c);
  }
}

// With AVX-512 VBMI: 64 codes (8 W bytes) at a time, for every width. Unpack: a byte
// permutation gives qword q the W bytes of codes 8q .. 8q + 7, a multishift takes the 8-bit
// field at bit 0, W, ..., 7W of each qword, and a mask keeps W bits. Pack: the three steps of
// gatherCodes on each qword, then a byte permutation closes the gaps. Loads and stores are
// masked to the 8 W bytes, so they never touch bytes past the group.
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_undefined_* in intrinsics
#endif
constexpr size_t kVbmiCodes = 64;

// The byte permutations and field offsets of each width (1..8), built at compile time.
struct VbmiTables {
  alignas(64) uint8_t unpackIndex[9][64] = {};
  alignas(64) uint8_t unpackShift[9][64] = {};
  alignas(64) uint8_t packIndex[9][64] = {};
};
constexpr VbmiTables makeVbmiTables() {
  VbmiTables t;
  for (int w = 1; w <= 8; ++w) {
    for (int q = 0; q < 8; ++q) {
      for (int k = 0; k < 8; ++k) {
        t.unpackIndex[w][8 * q + k] = static_cast<uint8_t>(q * w + k);  // <= 7 * 8 + 7
        t.unpackShift[w][8 * q + k] = static_cast<uint8_t>(k * w);
      }
    }
    for (int o = 0; o < 8 * w; ++o) t.packIndex[w][o] = static_cast<uint8_t>(8 * (o / w) + o % w);
  }
  return t;
}
constexpr VbmiTables kVbmiTables = makeVbmiTables();

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void unpackVbmi(const std::byte* in,
                                                                       size_t n, int width,
                                                                       uint8_t* c) {
  const __m512i perm = _mm512_load_si512(kVbmiTables.unpackIndex[width]);
  const __m512i fields = _mm512_load_si512(kVbmiTables.unpackShift[width]);
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1u << width) - 1));
  const size_t bytes = 8 * static_cast<size_t>(width);
  const __mmask64 loadMask = bytes == 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
  for (size_t i = 0; i < n; i += kVbmiCodes) {
    const __m512i b = _mm512_maskz_loadu_epi8(loadMask, in + i / 8 * width);
    const __m512i v = _mm512_multishift_epi64_epi8(fields, _mm512_permutexvar_epi8(perm, b));
    _mm512_storeu_si512(c + i, _mm512_and_si512(v, mask));
  }
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void packVbmi(const uint8_t* c, size_t n,
                                                                     int width, std::byte* out) {
  const uint64_t w = static_cast<uint64_t>(width);
  auto repeat = [](uint64_t pattern, int period) {
    uint64_t r = 0;
    for (int i = 0; i < 64; i += period) r |= pattern << i;
    return r;
  };
  const __m512i k1 = _mm512_set1_epi64(static_cast<long long>(repeat((uint64_t{1} << w) - 1, 16)));
  const __m512i k2 =
      _mm512_set1_epi64(static_cast<long long>(repeat((uint64_t{1} << (2 * w)) - 1, 32)));
  const __m512i k4 = _mm512_set1_epi64(static_cast<long long>((uint64_t{1} << (4 * w)) - 1));
  const __m128i s1 = _mm_cvtsi64_si128(static_cast<long long>(w));
  const __m128i s2 = _mm_cvtsi64_si128(static_cast<long long>(2 * w));
  const __m128i s4 = _mm_cvtsi64_si128(static_cast<long long>(4 * w));
  const __m512i perm = _mm512_load_si512(kVbmiTables.packIndex[width]);
  const size_t bytes = 8 * static_cast<size_t>(width);
  const __mmask64 storeMask = bytes == 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
  for (size_t i = 0; i < n; i += kVbmiCodes) {
    __m512i v = _mm512_loadu_si512(c + i);
    v = _mm512_or_si512(_mm512_and_si512(v, k1),
                        _mm512_sll_epi64(_mm512_and_si512(_mm512_srli_epi64(v, 8), k1), s1));
    v = _mm512_or_si512(_mm512_and_si512(v, k2),
                        _mm512_sll_epi64(_mm512_and_si512(_mm512_srli_epi64(v, 16), k2), s2));
    v = _mm512_or_si512(_mm512_and_si512(v, k4),
                        _mm512_sll_epi64(_mm512_and_si512(_mm512_srli_epi64(v, 32), k4), s4));
    _mm512_mask_storeu_epi8(out + i / 8 * width, storeMask, _mm512_permutexvar_epi8(perm, v));
  }
}
#pragma GCC diagnostic pop

#endif

// packAligned / unpackAligned, through the VBMI loops for whole groups of 64 codes where the
// CPU has them (n a multiple of 8). Widths 2, 4 and 8 keep their direct loops, which are as fast.
bool vbmiWidth(int width) { return width != 2 && width != 4 && width != 8; }
void packAlignedFast(const uint8_t* c, size_t n, int width, std::byte* out) {
  size_t done = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (vbmiWidth(width) && hasVbmi()) {
    done = n / kVbmiCodes * kVbmiCodes;
    if (done > 0) packVbmi(c, done, width, out);
  }
#endif
  if (done < n) packAligned(c + done, n - done, width, out + done / 8 * width);
}

void unpackAlignedFast(const std::byte* in, size_t n, int width, uint8_t* c) {
  size_t done = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (vbmiWidth(width) && hasVbmi()) {
    done = n / kVbmiCodes * kVbmiCodes;
    if (done > 0) unpackVbmi(in, done, width, c);
  }
#endif
  if (done < n) unpackAligned(in + done / 8 * width, n - done, width, c + done);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The lane sums of the loops below in four AVX-512 registers (lanes 0-7, 8-15, 16-23, 24-31),
// the same additions in the same order, so the same bits: a square of a float32 is exact in
// float64, so the fused multiply-add rounds as the separate add does; a partial last group loads
// zeros into the lanes it does not reach, and adding +0 leaves a lane as it was; the pairwise
// tree stays in registers. What it saves is the loop's bookkeeping and the tree's trip through
// memory (docs/bench_codecs.md, "Current results": +12-22% on the l2 quantizers' encodes).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_undefined_* in intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
template <bool kSquares>
__attribute__((target("avx512f,avx512vl"))) inline __m512d addToLanes(__m512d acc, __m256 x8) {
  const __m512d v = _mm512_cvtps_pd(x8);
  if constexpr (kSquares) return _mm512_fmadd_pd(v, v, acc);
  const __m512i absMask = _mm512_set1_epi64(0x7fffffffffffffffLL);
  return _mm512_add_pd(acc, _mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(v), absMask)));
}

template <bool kSquares>
__attribute__((target("avx512f,avx512vl"))) LaneSum laneSumAvx512(const float* x, size_t n) {
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(),
                    _mm512_setzero_pd()};
  size_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (size_t k = 0; k < 4; ++k) {
      acc[k] = addToLanes<kSquares>(acc[k], _mm256_loadu_ps(x + i + 8 * k));
    }
  }
  for (size_t k = 0; k < 4 && i + 8 * k < n; ++k) {
    const size_t left = std::min<size_t>(8, n - i - 8 * k);
    const auto mask = static_cast<__mmask8>((1u << left) - 1);
    acc[k] = addToLanes<kSquares>(acc[k], _mm256_maskz_loadu_ps(mask, x + i + 8 * k));
  }
  const __m512d a01 = _mm512_add_pd(_mm512_add_pd(acc[0], acc[2]), _mm512_add_pd(acc[1], acc[3]));
  const __m256d a4 = _mm256_add_pd(_mm512_castpd512_pd256(a01), _mm512_extractf64x4_pd(a01, 1));
  const __m128d a2 = _mm_add_pd(_mm256_castpd256_pd128(a4), _mm256_extractf128_pd(a4, 1));
  return boundLanes(_mm_cvtsd_f64(_mm_add_sd(a2, _mm_unpackhi_pd(a2, a2))), n);
}
#pragma GCC diagnostic pop
#endif

}  // namespace

STARLING_SIMD_CLONES
LaneSum laneSumSquaresPortable(const float* x, size_t n) {
  double acc[kSumLanes] = {};
  size_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (size_t j = 0; j < kSumLanes; ++j) {
      const double v = x[i + j];
      acc[j] += v * v;
    }
  }
  for (size_t j = 0; i + j < n; ++j) {
    const double v = x[i + j];
    acc[j] += v * v;
  }
  return finishLanes(acc, n);
}

STARLING_SIMD_CLONES
LaneSum laneSumAbsPortable(const float* x, size_t n) {
  double acc[kSumLanes] = {};
  size_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (size_t j = 0; j < kSumLanes; ++j) acc[j] += std::fabs(static_cast<double>(x[i + j]));
  }
  for (size_t j = 0; i + j < n; ++j) acc[j] += std::fabs(static_cast<double>(x[i + j]));
  return finishLanes(acc, n);
}

LaneSum laneSumSquares(const float* x, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (avx512().f && avx512().vl) return laneSumAvx512<true>(x, n);
#endif
  return laneSumSquaresPortable(x, n);
}

LaneSum laneSumAbs(const float* x, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (avx512().f && avx512().vl) return laneSumAvx512<false>(x, n);
#endif
  return laneSumAbsPortable(x, n);
}

STARLING_SIMD_CLONES
uint32_t maxAbsBits(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  return m;
}

template <>
float bucketScale<float>(std::span<const float> x, bool linf) {
  if (!linf) {
    // Squares of float32 values are exact in float64 and cannot overflow its sum, and a nonzero
    // one is never 0: a positive finite sum means no NaN, no infinity and not all zeros.
    const LaneSum s = laneSumSquares(x.data(), x.size());
    if (std::isfinite(s.sum) && s.sum > 0.0) {
      // roundUpToFloat of sqrt is monotone: the lane sum decides unless the bounds round apart.
      const float lo = roundUpToFloat(std::sqrt(s.lo));
      if (lo == roundUpToFloat(std::sqrt(s.hi))) return lo;
      return roundUpToFloat(std::sqrt(serialSumSquares(x)));
    }
  }
  const uint32_t maxBits = maxAbsBits(x.data(), x.size());
  if (maxBits > 0x7f800000u) return std::numeric_limits<float>::quiet_NaN();
  // The l-inf norm, zero or infinity: the max itself, a float32 already.
  return std::bit_cast<float>(maxBits);
}

template <>
float bucketScale<double>(std::span<const double> x, bool linf) {
  double maxAbs = 0.0;
  for (double v : x) {
    const double a = std::abs(v);
    if (std::isnan(a)) return std::numeric_limits<float>::quiet_NaN();
    maxAbs = std::max(maxAbs, a);
  }
  if (linf || maxAbs == 0.0 || std::isinf(maxAbs)) return roundUpToFloat(maxAbs);
  // Scaled by the max so that squares of float64 values cannot overflow.
  double sum = 0.0;
  for (double v : x) {
    const double r = v / maxAbs;
    sum += r * r;
  }
  return roundUpToFloat(maxAbs * std::sqrt(sum));
}

UniformBits::UniformBits(uint64_t seed) {
  // SplitMix64: core::mix64 of seed + i * golden gamma is its i-th output (mix64 adds one more).
  for (size_t w = 0; w < 4; ++w) {
    for (size_t l = 0; l < kLanes; ++l) {
      state_[w][l] = core::mix64(seed);
      seed += 0x9e3779b97f4a7c15ULL;
    }
  }
}

namespace {
// xoshiro256++ (Blackman and Vigna, "Scrambled linear pseudorandom number generators", 2021),
// eight generators in lockstep, one per lane of a GCC vector (lowered to whatever width the
// clone has).
using Lanes = uint64_t __attribute__((vector_size(8 * UniformBits::kLanes)));

STARLING_SIMD_CLONES
void xoshiroFill(uint64_t (&state)[4][UniformBits::kLanes], uint64_t* words, size_t count) {
  Lanes s0, s1, s2, s3;
  std::memcpy(&s0, state[0], sizeof(Lanes));
  std::memcpy(&s1, state[1], sizeof(Lanes));
  std::memcpy(&s2, state[2], sizeof(Lanes));
  std::memcpy(&s3, state[3], sizeof(Lanes));
  for (size_t t = 0; t < count; t += UniformBits::kLanes) {
    const Lanes sum = s0 + s3;
    const Lanes result = ((sum << 23) | (sum >> 41)) + s0;  // rotl(s0 + s3, 23) + s0
    std::memcpy(words + t, &result, sizeof(Lanes));
    const Lanes shifted = s1 << 17;
    s2 ^= s0;
    s3 ^= s1;
    s1 ^= s2;
    s0 ^= s3;
    s2 ^= shifted;
    s3 = (s3 << 45) | (s3 >> 19);  // rotl(s3, 45)
  }
  std::memcpy(state[0], &s0, sizeof(Lanes));
  std::memcpy(state[1], &s1, sizeof(Lanes));
  std::memcpy(state[2], &s2, sizeof(Lanes));
  std::memcpy(state[3], &s3, sizeof(Lanes));
}
}  // namespace

void UniformBits::fill(uint64_t* words, size_t count) {
  assert(count % kLanes == 0);
  xoshiroFill(state_, words, count);
}

void packCodes(const uint8_t* c, size_t n, int width, BitWriter& w) {
  size_t i = 0;
  if (w.aligned()) {
    const size_t whole = n / 8 * 8;
    packAlignedFast(c, whole, width, w.next());
    w.skip(whole / 8 * static_cast<size_t>(width));
    i = whole;
  }
  for (; i < n; ++i) w.put(c[i], width);
}

// Unpacks codes [first, first + n) of a stream of `width`-bit codes. Reads only the bytes that
// hold those codes.
void unpackCodes(const std::byte* stream, uint64_t first, size_t n, int width, uint8_t* c) {
  size_t i = 0;
  if ((first * static_cast<uint64_t>(width)) % 8 == 0) {
    const size_t whole = n / 8 * 8;
    unpackAlignedFast(stream + first * static_cast<uint64_t>(width) / 8, whole, width, c);
    i = whole;
  }
  const uint32_t mask = (1u << width) - 1;
  for (; i < n; ++i) {
    const uint64_t bit = (first + i) * static_cast<uint64_t>(width);
    const size_t at = bit / 8;
    const int shift = static_cast<int>(bit % 8);
    uint32_t v = std::to_integer<uint32_t>(stream[at]) >> shift;
    if (shift + width > 8) v |= std::to_integer<uint32_t>(stream[at + 1]) << (8 - shift);
    c[i] = static_cast<uint8_t>(v & mask);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
const Avx512& avx512() {
  static const Avx512 has = [] {
    __builtin_cpu_init();
    Avx512 a;
    a.f = __builtin_cpu_supports("avx512f");
    a.bw = __builtin_cpu_supports("avx512bw");
    a.vl = __builtin_cpu_supports("avx512vl");
    a.vbmi = __builtin_cpu_supports("avx512vbmi");
    return a;
  }();
  return has;
}
#endif

}  // namespace starling::compression::codecs

// Dense codecs: identity (the values in the state's precision), fp16 and bf16.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "compression/codecs/codecs.h"
#include "compression/codecs/elementwise.h"
#include "compression/codecs/float16.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

// A binary format with kExpBits exponent bits and kMantBits fraction bits in a u16.
template <int kExpBits, int kMantBits>
struct Binary16 {
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr int kMinExp = 1 - kBias;  // exponent of the smallest normal
  static constexpr uint32_t kExpMask = ((1u << kExpBits) - 1) << kMantBits;
  static constexpr uint32_t kMaxFinite = kExpMask - 1;  // largest exponent, all fraction bits set

  static uint16_t fromDouble(double v) {
    const uint64_t b = std::bit_cast<uint64_t>(v);
    const uint32_t sign = (b >> 63) != 0 ? 0x8000u : 0u;
    const int e = static_cast<int>((b >> 52) & 0x7ff);
    const uint64_t m = b & ((uint64_t{1} << 52) - 1);
    if (e == 0x7ff) {  // infinity, or NaN made quiet
      return static_cast<uint16_t>(sign | kExpMask | (m != 0 ? 1u << (kMantBits - 1) : 0u));
    }
    // Zeros and double subnormals (< 2^-1022) lie far below half the smallest subnormal of
    // either format.
    if (e == 0) return static_cast<uint16_t>(sign);
    const int exp = e - 1023;
    if (exp > kBias) return static_cast<uint16_t>(sign | kMaxFinite);
    const uint64_t sig = m | (uint64_t{1} << 52);
    // Right shift that leaves the significand in units of the target's last place; below the
    // normal range that unit is fixed at the subnormal spacing 2^(kMinExp - kMantBits).
    const int shift = 52 - kMantBits + (exp < kMinExp ? kMinExp - exp : 0);
    if (shift >= 64) return static_cast<uint16_t>(sign);
    uint64_t q = sig >> shift;
    const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1) != 0)) ++q;
    // Normal: the implicit bit in q adds one to the exponent field, so start one below it; a
    // rounding carry out of the fraction moves into the exponent the same way. Subnormal: q is
    // the fraction itself (and q = 2^kMantBits is exactly the smallest normal).
    const uint64_t bits =
        exp < kMinExp ? q : (static_cast<uint64_t>(exp + kBias - 1) << kMantBits) + q;
    if (bits >= kExpMask) return static_cast<uint16_t>(sign | kMaxFinite);
    return static_cast<uint16_t>(sign | bits);
  }

  // Exact: every value of either format is a float32, built here from its bits.
  static float toFloat(uint16_t h) {
    if constexpr (kExpBits == 8) {
      return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);  // bf16 is float32's top half
    } else {
      const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
      const uint32_t exp = (h & kExpMask) >> kMantBits;
      const uint32_t frac = h & ((1u << kMantBits) - 1);
      const uint32_t fracBits = frac << (23 - kMantBits);
      if (exp == (kExpMask >> kMantBits)) {  // infinity or NaN
        return std::bit_cast<float>(sign | 0x7f800000u | fracBits);
      }
      if (exp == 0) {  // subnormal: frac units of 2^(kMinExp - kMantBits), exact in float32
        const float mag = static_cast<float>(frac) * kSubnormalUnit;
        return sign != 0 ? -mag : mag;
      }
      return std::bit_cast<float>(sign | ((exp - kBias + 127) << 23) | fracBits);
    }
  }

 private:
  static constexpr float pow2(int e) {
    float v = 1.0f;
    for (; e < 0; ++e) v *= 0.5f;
    return v;
  }
  static constexpr float kSubnormalUnit = pow2(kMinExp - kMantBits);
};

using Fp16 = Binary16<5, 10>;
using Bf16 = Binary16<8, 7>;

// Branch-free float32 paths: elementwise.h (halfFromFloatBits, bf16FromFloatBits,
// floatBitsFromHalf), shared with the CUDA kernels.
using elementwise::bf16FromFloatBits;
using elementwise::floatBitsFromHalf;
using elementwise::halfFromFloatBits;

// The little-endian u16 payload of n float32 values, and back (little-endian hosts; the payload
// is 8-byte aligned in the frame).
STARLING_SIMD_CLONES
void encodeHalves(const float* x, size_t n, bool bf16, std::byte* out) {
  auto* h = reinterpret_cast<AliasU16*>(out);
  if (bf16) {
    for (size_t i = 0; i < n; ++i) h[i] = bf16FromFloatBits(std::bit_cast<uint32_t>(x[i]));
  } else {
    for (size_t i = 0; i < n; ++i) h[i] = halfFromFloatBits(std::bit_cast<uint32_t>(x[i]));
  }
}

STARLING_SIMD_CLONES
void decodeHalves(const std::byte* in, size_t n, bool bf16, float* out) {
  const auto* h = reinterpret_cast<const AliasU16*>(in);
  if (bf16) {
    for (size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t{h[i]} << 16);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(floatBitsFromHalf(h[i]));
  }
}

// ---------------------------------------------------------------------------------------------
// Hardware conversions (x86 F16C / AVX-512), picked at run time, with the loops above as the
// reference and the fallback. The hardware rounds to nearest even like the formulas above, but
// it differs from them on a few inputs: fp16 and bf16 round finite overflow to infinity (the
// format saturates), NaNs keep part of their payload (the format writes one quiet NaN),
// VCVTNE2PS2BF16 flushes float32 subnormals, and VCVTPH2PS quiets signalling NaNs; subnormal
// halves are kept off the hardware too, so that nothing depends on MXCSR (DAZ). So each block of
// kHwBlock values is converted by the hardware while the largest magnitude (or, for decode, any
// subnormal or NaN half) is tracked, and a block that holds such a value is converted again by
// the reference loop. Gradients almost never take that
// path, and the bytes are the reference's in every case (tests/compression/codecs_test.cc checks
// blocks with every kind of edge value against halfFromDouble / bf16FromDouble).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(STARLING_NO_HW_CONVERSIONS)
#define STARLING_HW_CONVERSIONS 1
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports once they are inlined here; nothing reads those bits.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
constexpr size_t kHwBlock = 256;
// |x| bits from which fp16's round-to-nearest-even gives infinity (65520), and bf16's (the top
// half of the largest finite float32 plus half an ulp of bf16). Every smaller magnitude,
// float32 subnormals included, converts exactly as the reference does (bf16: the integer
// formula is the reference's; fp16: VCVTPS2PH ignores FTZ, and DAZ only flushes float32
// subnormals, which round to a signed zero either way).
constexpr uint32_t kHalfOverflow = 0x477ff000u;
constexpr uint32_t kBf16Overflow = 0x7f7f8000u;

__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void encodeHalfAvx512(const float* x,
                                                                                  size_t n,
                                                                                  std::byte* out) {
  auto* h = reinterpret_cast<AliasU16*>(out);
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  size_t i = 0;
  for (; i + kHwBlock <= n; i += kHwBlock) {
    __m512i big = _mm512_setzero_si512();
    for (size_t j = i; j < i + kHwBlock; j += 16) {
      const __m512 v = _mm512_loadu_ps(x + j);
      big = _mm512_max_epu32(big, _mm512_and_si512(_mm512_castps_si512(v), absMask));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * j),
                          _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    if (_mm512_cmpge_epu32_mask(big, _mm512_set1_epi32(kHalfOverflow)) != 0) {
      for (size_t j = i; j < i + kHwBlock; ++j) h[j] = halfFromFloatBits(std::bit_cast<uint32_t>(x[j]));
    }
  }
  for (; i < n; ++i) h[i] = halfFromFloatBits(std::bit_cast<uint32_t>(x[i]));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void encodeBf16Avx512(const float* x,
                                                                            size_t n,
                                                                            std::byte* out) {
  auto* h = reinterpret_cast<AliasU16*>(out);
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  const __m512i half = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  size_t i = 0;
  for (; i + kHwBlock <= n; i += kHwBlock) {
    __m512i big = _mm512_setzero_si512();
    for (size_t j = i; j < i + kHwBlock; j += 16) {
      const __m512i u = _mm512_loadu_si512(x + j);
      big = _mm512_max_epu32(big, _mm512_and_si512(u, absMask));
      // (u + 0x7fff + ((u >> 16) & 1)) >> 16: the reference's rounding of finite values.
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
      const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, half), lsb), 16);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * j), _mm512_cvtepi32_epi16(r));
    }
    if (_mm512_cmpge_epu32_mask(big, _mm512_set1_epi32(kBf16Overflow)) != 0) {
      for (size_t j = i; j < i + kHwBlock; ++j) h[j] = bf16FromFloatBits(std::bit_cast<uint32_t>(x[j]));
    }
  }
  for (; i < n; ++i) h[i] = bf16FromFloatBits(std::bit_cast<uint32_t>(x[i]));
}

// With AVX512_BF16: VCVTNE2PS2BF16 rounds 32 values to nearest even in one instruction. It also
// flushes float32 subnormals to zero, so those blocks go the reference way too.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void encodeBf16Avx512Bf16(
    const float* x, size_t n, std::byte* out) {
  auto* h = reinterpret_cast<AliasU16*>(out);
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  const __m512i one = _mm512_set1_epi32(1);
  size_t i = 0;
  for (; i + kHwBlock <= n; i += kHwBlock) {
    __m512i big = _mm512_setzero_si512();
    __m512i small = _mm512_set1_epi32(-1);  // min over lanes of |x| - 1 (unsigned)
    for (size_t j = i; j < i + kHwBlock; j += 32) {
      const __m512 v0 = _mm512_loadu_ps(x + j);
      const __m512 v1 = _mm512_loadu_ps(x + j + 16);
      const __m512i a0 = _mm512_and_si512(_mm512_castps_si512(v0), absMask);
      const __m512i a1 = _mm512_and_si512(_mm512_castps_si512(v1), absMask);
      big = _mm512_max_epu32(big, _mm512_max_epu32(a0, a1));
      small = _mm512_min_epu32(small, _mm512_min_epu32(_mm512_sub_epi32(a0, one),
                                                       _mm512_sub_epi32(a1, one)));
      _mm512_storeu_si512(out + 2 * j, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v1, v0)));
    }
    // A subnormal has |x| - 1 below 0x7fffff; zero wraps to 0xffffffff.
    if (_mm512_cmpge_epu32_mask(big, _mm512_set1_epi32(kBf16Overflow)) != 0 ||
        _mm512_cmplt_epu32_mask(small, _mm512_set1_epi32(0x7fffff)) != 0) {
      for (size_t j = i; j < i + kHwBlock; ++j) h[j] = bf16FromFloatBits(std::bit_cast<uint32_t>(x[j]));
    }
  }
  for (; i < n; ++i) h[i] = bf16FromFloatBits(std::bit_cast<uint32_t>(x[i]));
}

__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void decodeHalfAvx512(
    const std::byte* in, size_t n, float* out) {
  const auto* h = reinterpret_cast<const AliasU16*>(in);
  const __m512i absMask = _mm512_set1_epi16(0x7fff);
  const __m512i one = _mm512_set1_epi16(1);
  const __m512i subLimit = _mm512_set1_epi16(0x3ff);
  const __m512i infBits = _mm512_set1_epi16(0x7c00);
  size_t i = 0;
  for (; i + kHwBlock <= n; i += kHwBlock) {
    __mmask32 odd = 0;  // a subnormal (magnitude 1..0x3ff) or NaN (above 0x7c00) half
    for (size_t j = i; j < i + kHwBlock; j += 32) {
      const __m512i v = _mm512_loadu_si512(in + 2 * j);
      const __m512i m = _mm512_and_si512(v, absMask);
      odd |= _mm512_cmplt_epu16_mask(_mm512_sub_epi16(m, one), subLimit) |
             _mm512_cmpgt_epu16_mask(m, infBits);
      _mm512_storeu_ps(out + j, _mm512_cvtph_ps(_mm512_castsi512_si256(v)));
      _mm512_storeu_ps(out + j + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)));
    }
    if (odd != 0) {
      for (size_t j = i; j < i + kHwBlock; ++j) out[j] = std::bit_cast<float>(floatBitsFromHalf(h[j]));
    }
  }
  for (; i < n; ++i) out[i] = std::bit_cast<float>(floatBitsFromHalf(h[i]));
}

// AVX2 + F16C, for x86-64-v3 hosts without AVX-512.
__attribute__((target("avx2,f16c"))) void encodeHalfAvx2(const float* x, size_t n,
                                                          std::byte* out) {
  auto* h = reinterpret_cast<AliasU16*>(out);
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  size_t i = 0;
  for (; i + kHwBlock <= n; i += kHwBlock) {
    __m256i big = _mm256_setzero_si256();
    for (size_t j = i; j < i + kHwBlock; j += 8) {
      const __m256 v = _mm256_loadu_ps(x + j);
      big = _mm256_max_epu32(big, _mm256_and_si256(_mm256_castps_si256(v), absMask));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * j),
                       _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // Lanes at or above the limit: max(big, limit) == big there.
    const __m256i limit = _mm256_set1_epi32(kHalfOverflow);
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(_mm256_max_epu32(big, limit), big)) != 0) {
      for (size_t j = i; j < i + kHwBlock; ++j) h[j] = halfFromFloatBits(std::bit_cast<uint32_t>(x[j]));
    }
  }
  for (; i < n; ++i) h[i] = halfFromFloatBits(std::bit_cast<uint32_t>(x[i]));
}

__attribute__((target("avx2,f16c"))) void decodeHalfAvx2(const std::byte* in, size_t n,
                                                          float* out) {
  const auto* h = reinterpret_cast<const AliasU16*>(in);
  const __m256i absMask = _mm256_set1_epi16(0x7fff);
  const __m256i one = _mm256_set1_epi16(1);
  const __m256i subMax = _mm256_set1_epi16(0x3fe);  // m - 1 <= 0x3fe: a subnormal
  const __m256i nanMin = _mm256_set1_epi16(0x7c01);
  size_t i = 0;
  for (; i + kHwBlock <= n; i += kHwBlock) {
    __m256i odd = _mm256_setzero_si256();
    for (size_t j = i; j < i + kHwBlock; j += 16) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * j));
      const __m256i m = _mm256_and_si256(v, absMask);
      const __m256i s = _mm256_sub_epi16(m, one);
      // Unsigned s <= 0x3fe and m >= 0x7c01, through min / max.
      odd = _mm256_or_si256(odd, _mm256_cmpeq_epi16(_mm256_min_epu16(s, subMax), s));
      odd = _mm256_or_si256(odd, _mm256_cmpeq_epi16(_mm256_max_epu16(m, nanMin), m));
      _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm256_castsi256_si128(v)));
      _mm256_storeu_ps(out + j + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1)));
    }
    if (!_mm256_testz_si256(odd, odd)) {
      for (size_t j = i; j < i + kHwBlock; ++j) out[j] = std::bit_cast<float>(floatBitsFromHalf(h[j]));
    }
  }
  for (; i < n; ++i) out[i] = std::bit_cast<float>(floatBitsFromHalf(h[i]));
}

enum class HwLevel { kNone, kAvx2, kAvx512 };
bool hasAvx512Bf16() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return yes;
}
HwLevel hwLevel() {
  static const HwLevel level = [] {
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know it.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
    if (!f16c) return HwLevel::kNone;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
      return HwLevel::kAvx512;
    }
    if (__builtin_cpu_supports("avx2")) return HwLevel::kAvx2;
    return HwLevel::kNone;
  }();
  return level;
}
#pragma GCC diagnostic pop
#endif

void encodeHalvesFast(const float* x, size_t n, bool bf16, std::byte* out) {
#ifdef STARLING_HW_CONVERSIONS
  const HwLevel level = hwLevel();
  if (level == HwLevel::kAvx512) {
    if (bf16) {
      if (hasAvx512Bf16()) {
        encodeBf16Avx512Bf16(x, n, out);
      } else {
        encodeBf16Avx512(x, n, out);
      }
    } else {
      encodeHalfAvx512(x, n, out);
    }
    return;
  }
  if (level == HwLevel::kAvx2 && !bf16) {
    encodeHalfAvx2(x, n, out);
    return;
  }
#endif
  encodeHalves(x, n, bf16, out);
}

void decodeHalvesFast(const std::byte* in, size_t n, bool bf16, float* out) {
#ifdef STARLING_HW_CONVERSIONS
  if (!bf16) {
    const HwLevel level = hwLevel();
    if (level == HwLevel::kAvx512) {
      decodeHalfAvx512(in, n, out);
      return;
    }
    if (level == HwLevel::kAvx2) {
      decodeHalfAvx2(in, n, out);
      return;
    }
  }
#endif
  decodeHalves(in, n, bf16, out);
}

template <typename T>
class IdentityCompressor final : public Compressor<T>, public InPlaceEncoding<T> {
 public:
  CodecId id() const override { return CodecId::kIdentity; }
  bool unbiased() const override { return true; }
  size_t maxEncodedBytes(size_t d) const override { return denseFrameBytes<T>(d); }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    encodeDense<T>(x, out);
  }

  // The values go straight into `out`, which need not be aligned; receivers see them as they are.
  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng&, const StreamContext&,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    static_assert(std::endian::native == std::endian::little,
                  "the payload is copied as is; add a byte-swapping path for big-endian hosts");
    FrameOut frame(out);
    std::byte* payload =
        frame.begin(CodecId::kIdentity, elementTypeOf<T>(), x.size(), {}, x.size() * sizeof(T));
    if (payload == nullptr) return frame.status();
    if (!x.empty()) {
      std::memcpy(payload, x.data(), x.size() * sizeof(T));
      if (seen.data() != x.data()) std::memcpy(seen.data(), x.data(), x.size() * sizeof(T));
    }
    frame.seal();
    return frame.frame().size();
  }

  CodecCapabilities<T> capabilities() const override { return {.inPlace = this}; }
  std::span<T> beginInPlace(size_t d, std::span<std::byte> out) const override {
    return beginDense<T>(d, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kIdentity, out.size(), 0);
    if (!v) return v.status();
    if (v->payload.size() != out.size() * sizeof(T)) {
      return core::corruption("identity payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(out.size()) + " elements");
    }
    static_assert(std::endian::native == std::endian::little,
                  "the payload is copied as is; add a byte-swapping path for big-endian hosts");
    if (!out.empty()) std::memcpy(out.data(), v->payload.data(), v->payload.size());
    return core::Status::ok();
  }

  // In place when the frame is aligned (frame.h, decodeDense): no copy on the way in either.
  core::Result<std::span<const T>> decodeView(std::span<const std::byte> frame, size_t count,
                                              std::vector<T>& scratch,
                                              Checksum checksum) const override {
    return decodeDense<T>(frame, count, scratch, checksum);
  }
};

template <typename T, typename Format, CodecId kCodec>
class HalfCompressor final : public Compressor<T> {
 public:
  CodecId id() const override { return kCodec; }
  bool unbiased() const override { return false; }  // deterministic rounding
  size_t maxEncodedBytes(size_t d) const override { return frameBytesFor(0, 2 * d); }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    write(x, frame, {}, nullptr);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng&, const StreamContext& ctx,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    FrameOut frame(out);
    write(x, frame, seen, ctx.error);
    if (!frame.ok()) return frame.status();
    return frame.frame().size();
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, kCodec, out.size(), 0);
    if (!v) return v.status();
    if (v->payload.size() != 2 * out.size()) {
      return core::corruption("16-bit payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(out.size()) + " elements");
    }
    decodeBlock(v->payload.data(), out.size(), out.data());
    return core::Status::ok();
  }

 private:
  // Writes the frame of x; with a non-empty `seen`, also what decode reads back, a block at a
  // time while the block's codes are still in L1 (every 16-bit code decodes exactly, so this is
  // decode's result; no frame-level check can fail on a frame just written), and with `error`
  // the compression error of each block while x and seen are still there.
  void write(std::span<const T> x, FrameOut& out, std::span<T> seen, SeenError* error) const {
    std::byte* payload = out.begin(kCodec, elementTypeOf<T>(), x.size(), {}, 2 * x.size());
    if (payload == nullptr) return;
    constexpr size_t kBlock = 4096;  // a multiple of the hardware paths' blocks, and of 8
    SquaredErrorSum sum;
    for (size_t lo = 0; lo < x.size(); lo += kBlock) {
      const size_t n = std::min(kBlock, x.size() - lo);
      encodeBlock(x.data() + lo, n, payload + 2 * lo);
      if (!seen.empty()) {
        decodeBlock(payload + 2 * lo, n, seen.data() + lo);
        if (error != nullptr) sum.add(x.data() + lo, seen.data() + lo, n);
      }
    }
    if (error != nullptr && !seen.empty()) *error = sum.result();
    out.seal();
  }

  static void encodeBlock(const T* x, size_t n, std::byte* payload) {
    if constexpr (std::is_same_v<T, float> && std::endian::native == std::endian::little) {
      encodeHalvesFast(x, n, kCodec == CodecId::kBf16, payload);
    } else {
      for (size_t i = 0; i < n; ++i) {
        storeLe<uint16_t>(payload + 2 * i, Format::fromDouble(static_cast<double>(x[i])));
      }
    }
  }

  static void decodeBlock(const std::byte* p, size_t n, T* out) {
    if constexpr (std::is_same_v<T, float> && std::endian::native == std::endian::little) {
      decodeHalvesFast(p, n, kCodec == CodecId::kBf16, out);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(Format::toFloat(loadLe<uint16_t>(p + 2 * i)));
    }
  }
};

}  // namespace

uint16_t halfFromDouble(double v) { return Fp16::fromDouble(v); }
double doubleFromHalf(uint16_t h) { return Fp16::toFloat(h); }
uint16_t bf16FromDouble(double v) { return Bf16::fromDouble(v); }
double doubleFromBf16(uint16_t h) { return Bf16::toFloat(h); }

template <typename T>
std::unique_ptr<Compressor<T>> makeIdentity() {
  return std::make_unique<IdentityCompressor<T>>();
}
template <typename T>
std::unique_ptr<Compressor<T>> makeFp16() {
  return std::make_unique<HalfCompressor<T, Fp16, CodecId::kFp16>>();
}
template <typename T>
std::unique_ptr<Compressor<T>> makeBf16() {
  return std::make_unique<HalfCompressor<T, Bf16, CodecId::kBf16>>();
}

template std::unique_ptr<Compressor<float>> makeIdentity<float>();
template std::unique_ptr<Compressor<double>> makeIdentity<double>();
template std::unique_ptr<Compressor<float>> makeFp16<float>();
template std::unique_ptr<Compressor<double>> makeFp16<double>();
template std::unique_ptr<Compressor<float>> makeBf16<float>();
template std::unique_ptr<Compressor<double>> makeBf16<double>();

}  // namespace starling::compression::codecs

// Natural compression (docs/algorithms.md §12.8): every element rounded without bias onto the
// powers of two, so its relative variance is at most 1/8 (between two powers a and 2a the
// variance of r is (r - a)(2a - r) <= r^2 / 8), and sent as a 9-bit code; float32 inputs are
// coded from their bits, and the codes packed and unpacked 8, or with AVX-512 VBMI 32, at a time.
// The other codecs with exponentially spaced levels (NUQSGD, natural dithering, top-k + natural
// dithering) are in exponential_levels.cc.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

// Natural compression: per element a 9-bit code, the exponent code E in the low 8 bits and the
// sign in bit 8. E = 0 is zero; E in 1..254 is 2^(E - 127), so the powers 2^-126 .. 2^127
// (float32's normal range); E = 255 marks a value that has no code (NaN, infinity, or a magnitude
// above 2^127) and no decoder accepts it.

constexpr int kNaturalCodeBits = 9;
constexpr uint32_t kNaturalSign = 1u << 8;
constexpr uint32_t kNaturalInvalid = 255;
constexpr int kNaturalBias = 127;
constexpr int kNaturalMinExp = 1 - kNaturalBias;    // -126
constexpr int kNaturalMaxExp = 254 - kNaturalBias;  // 127

uint32_t naturalCode(double t, core::Rng& rng) {
  const double a = std::abs(t);
  const uint32_t sign = std::signbit(t) ? kNaturalSign : 0;
  const double u = rng.uniform();
  if (!(a <= std::ldexp(1.0, kNaturalMaxExp))) return kNaturalInvalid | sign;  // NaN too
  if (a < std::ldexp(1.0, kNaturalMinExp)) {
    // Below the smallest power: 0 or 2^-126, unbiased.
    return u < std::ldexp(a, -kNaturalMinExp) ? 1u | sign : 0u;
  }
  int e;
  const double f = std::frexp(a, &e);  // a = f * 2^e, f in [1/2, 1): a is in [2^(e-1), 2^e)
  // Up with probability (a - 2^(e-1)) / 2^(e-1) = 2f - 1, exact; 0 when a is a power of two.
  const int exponent = u < 2.0 * f - 1.0 ? e : e - 1;
  return static_cast<uint32_t>(exponent + kNaturalBias) | sign;
}

// The float32 path, from the bits: |x| = (1 + m 2^-23) 2^(e - 127) for the exponent field e in
// 1..254, so the code is e, or e + 1 with probability m / 2^23 (naturalCode's 2f - 1); for e = 0
// (|x| < 2^-126, m 2^-149) it is 0 or 1 with the same m / 2^23 = |x| 2^126. u holds one uniform
// 23-bit integer per element (the top bits of u[i]), so these probabilities are exact. Above
// 2^127 (NaN and infinity included) the code is 255.
STARLING_SIMD_CLONES
void naturalCodesFloat(const float* x, size_t n, const uint32_t* u, uint16_t* codes) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(x[i]);
    const uint32_t a = b & 0x7fffffffu;
    const uint32_t sign = (b >> 31) << 8;
    const uint32_t exponent = (a >> 23) + ((u[i] >> 9) < (a & 0x7fffffu) ? 1u : 0u);
    uint32_t code = exponent == 0 ? 0u : exponent | sign;  // zero carries no sign
    if (a > 0x7f000000u) code = kNaturalInvalid | sign;
    codes[i] = static_cast<uint16_t>(code);
  }
}

// 9-bit codes, LSB first, starting at a byte boundary: 8 codes fill 9 bytes; n a multiple of 8.
// Four codes (36 bits) move between a u64 of four 16-bit lanes and 36 packed bits in two steps
// that halve the pieces (18 bits to 32-bit halves, 9 bits to 16-bit quarters).
[[gnu::always_inline]] inline uint64_t spreadNine(uint64_t v) {
  v = (v & 0x3ffffu) | ((v >> 18) & 0x3ffffu) << 32;
  return (v & 0x000001ff000001ffu) | ((v >> 9) & 0x000001ff000001ffu) << 16;
}
[[gnu::always_inline]] inline uint64_t gatherNine(uint64_t c) {
  c = (c & 0x000001ff000001ffu) | ((c >> 16) & 0x000001ff000001ffu) << 9;
  return (c & 0x3ffffu) | ((c >> 32) & 0x3ffffu) << 18;
}

STARLING_SIMD_CLONES
void packNatural(const uint16_t* c, size_t n, std::byte* out) {
  auto* o = reinterpret_cast<uint8_t*>(out);
  const auto* c64 = reinterpret_cast<const AliasU64*>(c);  // little-endian host
  for (size_t g = 0; g < n / 8; ++g) {
    const uint64_t low = gatherNine(c64[2 * g]);       // codes 0-3: bits 0-35
    const uint64_t high = gatherNine(c64[2 * g + 1]);  // codes 4-7: bits 36-71
    *reinterpret_cast<AliasU64*>(o + 9 * g) = low | high << 36;
    o[9 * g + 8] = static_cast<uint8_t>(high >> 28);
  }
}

STARLING_SIMD_CLONES
void unpackNatural(const std::byte* in, size_t n, uint16_t* c) {
  const auto* b = reinterpret_cast<const uint8_t*>(in);
  auto* c64 = reinterpret_cast<AliasU64*>(c);
  for (size_t g = 0; g < n / 8; ++g) {
    const uint64_t v = *reinterpret_cast<const AliasU64*>(b + 9 * g);
    c64[2 * g] = spreadNine(v & ((uint64_t{1} << 36) - 1));
    c64[2 * g + 1] = spreadNine((v >> 36) | static_cast<uint64_t>(b[9 * g + 8]) << 28);
  }
}

// With AVX-512 VBMI: 32 codes (36 bytes) at a time. Lane k's 16 bits are bytes (9k) / 8 and
// (9k) / 8 + 1, picked by one byte permutation, shifted right by (9k) % 8 and masked to 9 bits.
// The load is masked to the 36 bytes of the group, so it never reads past the payload.
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_undefined_* in intrinsics
#endif
struct NaturalGroups {
  __m512i perm, shift, nine;

  __attribute__((target("avx512f,avx512bw,avx512vbmi"))) NaturalGroups() {
    alignas(64) uint8_t idx[64];
    alignas(64) uint16_t sh[32];
    for (int k = 0; k < 32; ++k) {
      idx[2 * k] = static_cast<uint8_t>(9 * k / 8);
      idx[2 * k + 1] = static_cast<uint8_t>(9 * k / 8 + 1);
      sh[k] = static_cast<uint16_t>(9 * k % 8);
    }
    perm = _mm512_load_si512(idx);
    shift = _mm512_load_si512(sh);
    nine = _mm512_set1_epi16(0x1ff);
  }
  // Codes 32g .. 32g + 31 of the payload, in u16 lanes.
  __attribute__((target("avx512f,avx512bw,avx512vbmi"))) __m512i codes(const std::byte* in,
                                                                         size_t g) const {
    const __m512i bytes = _mm512_maskz_loadu_epi8(__mmask64{0xfffffffff}, in + 36 * g);
    return _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi8(perm, bytes), shift), nine);
  }
};

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void unpackNaturalVbmi(const std::byte* in,
                                                                              size_t n,
                                                                              uint16_t* c) {
  const NaturalGroups groups;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) _mm512_storeu_si512(c + i, groups.codes(in, i / 32));
  if (i < n) unpackNatural(in + i / 8 * 9, n - i, c + i);
}
// The reverse, 32 codes (9 bits each in u16 lanes) into 36 bytes: pairs of codes into 18-bit
// u32 lanes (one multiply-add), pairs of those into 36-bit u64 lanes; the odd u64 lanes move up
// 4 bits, so that lanes 2m and 2m + 1 hold bytes 9m .. 9m + 4 and 9m + 4 .. 9m + 8 (sharing the
// middle byte), and two byte permutations place them. The store is masked to the 36 bytes.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void packNaturalVbmi(const uint16_t* c,
                                                                            size_t n,
                                                                            std::byte* out) {
  alignas(64) uint8_t low[64] = {};
  alignas(64) uint8_t high[64] = {};
  uint64_t lowMask = 0, highMask = 0;
  for (int o = 0; o < 36; ++o) {
    const int m = o / 9, r = o % 9;
    if (r <= 4) {
      low[o] = static_cast<uint8_t>(16 * m + r);
      lowMask |= uint64_t{1} << o;
    }
    if (r >= 4) {
      high[o] = static_cast<uint8_t>(16 * m + 8 + (r - 4));
      highMask |= uint64_t{1} << o;
    }
  }
  const __m512i permLow = _mm512_load_si512(low);
  const __m512i permHigh = _mm512_load_si512(high);
  const __m512i pairs = _mm512_set1_epi32(0x02000001);  // c_even * 1 + c_odd * 512
  const __m512i low32 = _mm512_set1_epi64(0xffffffff);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_madd_epi16(_mm512_loadu_si512(c + i), pairs);
    __m512i q = _mm512_or_si512(_mm512_and_si512(v, low32),
                                _mm512_slli_epi64(_mm512_srli_epi64(v, 32), 18));
    q = _mm512_mask_slli_epi64(q, __mmask8{0xaa}, q, 4);
    const __m512i bytes = _mm512_or_si512(_mm512_maskz_permutexvar_epi8(lowMask, permLow, q),
                                          _mm512_maskz_permutexvar_epi8(highMask, permHigh, q));
    _mm512_mask_storeu_epi8(out + i / 8 * 9, __mmask64{0xfffffffff}, bytes);
  }
  if (i < n) packNatural(c + i, n - i, out + i / 8 * 9);
}
// The natural decode's two passes without the codes ever stored: 32 codes at a time unpacked into
// a register (NaturalGroups), then either checked (`bad` given: the running minimum of
// anyBadNatural, its answer in *bad) or turned into float32 bits in `out` (naturalValues). Both
// handle the first n / 32 * 32 codes and return how many.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) size_t naturalGroupsVbmi(
    const std::byte* in, size_t n, float* out, bool* bad) {
  const NaturalGroups groups;
  const __m512i sign = _mm512_set1_epi16(static_cast<int16_t>(kNaturalSign));
  const __m512i exponent = _mm512_set1_epi16(static_cast<int16_t>(kNaturalInvalid));
  __m512i low = _mm512_set1_epi16(-1);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i c = groups.codes(in, i / 32);
    if (bad != nullptr) {
      low = _mm512_min_epu16(low, _mm512_min_epu16(_mm512_xor_si512(c, sign),
                                                   _mm512_andnot_si512(c, exponent)));
    } else {
      // ((c & 0xff) | (c & 0x100)) << 23 = c << 23 for a 9-bit code, in 32-bit lanes.
      const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(c));
      const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(c, 1));
      _mm512_storeu_si512(out + i, _mm512_slli_epi32(lo, 23));
      _mm512_storeu_si512(out + i + 16, _mm512_slli_epi32(hi, 23));
    }
  }
  if (bad != nullptr) *bad = _mm512_cmpeq_epi16_mask(low, _mm512_setzero_si512()) != 0;
  return i;
}
#pragma GCC diagnostic pop

#endif

// n a multiple of 8.
void packNaturalFast(const uint16_t* c, size_t n, std::byte* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (hasVbmi()) return packNaturalVbmi(c, n, out);
#endif
  packNatural(c, n, out);
}

// n a multiple of 8.
void unpackNaturalFast(const std::byte* in, size_t n, uint16_t* c) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (hasVbmi()) return unpackNaturalVbmi(in, n, c);
#endif
  unpackNatural(in, n, c);
}

// Whether a code is negative zero or has the exponent field 255: whether c ^ sign or the
// complement of the exponent field is 0 for any code, as a running minimum of both in 16-bit
// lanes (one vpminuw per 32 codes; the compares it replaces widened every code to 32 bits).
STARLING_SIMD_CLONES
bool anyBadNatural(const uint16_t* c, size_t n) {
  uint16_t low = 0xffff;
  for (size_t i = 0; i < n; ++i) {
    const auto negativeZero = static_cast<uint16_t>(c[i] ^ kNaturalSign);
    const auto invalid = static_cast<uint16_t>(~c[i] & kNaturalInvalid);
    low = std::min(low, std::min(negativeZero, invalid));
  }
  return low == 0;
}

// sign * 2^(e - 127), or 0 for e = 0, built as float32 bits: every such power is a normal
// float32, exactly the value naturalCode's decoder computes with ldexp.
STARLING_SIMD_CLONES
void naturalValues(const uint16_t* c, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::bit_cast<float>(((c[i] & 0xffu) << 23) | ((c[i] & kNaturalSign) << 23));
  }
}

constexpr size_t kNaturalChunk = 512;  // a multiple of 8

// Unpacks natural codes [first, first + n), first a multiple of 8.
void unpackNaturalCodes(const std::byte* payload, uint64_t first, size_t n, uint16_t* c) {
  const size_t whole = n / 8 * 8;
  unpackNaturalFast(payload + first / 8 * 9, whole, c);
  for (size_t i = whole; i < n; ++i) {
    const uint64_t bit = (first + i) * kNaturalCodeBits;
    const uint32_t two = std::to_integer<uint32_t>(payload[bit / 8]) |
                         std::to_integer<uint32_t>(payload[bit / 8 + 1]) << 8;
    c[i] = static_cast<uint16_t>((two >> (bit % 8)) & 0x1ff);
  }
}

template <typename T>
class NaturalCompressor final : public Compressor<T> {
 public:
  CodecId id() const override { return CodecId::kNatural; }
  bool unbiased() const override { return true; }

  size_t maxEncodedBytes(size_t d) const override {
    return frameBytesFor(0, (d * kNaturalCodeBits + 7) / 8);
  }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    write(x, rng, frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng& rng, const StreamContext&,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    return writeAndSee(
        out, [&](FrameOut& f) { write(x, rng, f); },
        [&](const FrameOut& f) { return decode(f.frame(), seen); });
  }

 private:
  static void write(std::span<const T> x, core::Rng& rng, FrameOut& out) {
    const uint64_t d = x.size();
    std::byte* payload =
        out.begin(CodecId::kNatural, elementTypeOf<T>(), d, {}, (d * kNaturalCodeBits + 7) / 8);
    if (payload == nullptr) return;
    BitWriter codes(payload);
    if constexpr (std::is_same_v<T, float>) {
      // One draw from rng per frame seeds the fast generator (bits.h).
      UniformBits gen(rng.nextU64());
      uint64_t words[kNaturalChunk / 2];
      uint32_t u[kNaturalChunk];
      uint16_t c[kNaturalChunk];
      for (uint64_t lo = 0; lo < d; lo += kNaturalChunk) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kNaturalChunk, d - lo));
        gen.fill(words, (n + 15) / 16 * UniformBits::kLanes);
        std::memcpy(u, words, 4 * n);  // element i: half i % 2 of word i / 2, low half first
        naturalCodesFloat(x.data() + lo, n, u, c);
        const size_t whole = n / 8 * 8;  // chunks start at multiples of 8 codes: 9-byte groups
        packNaturalFast(c, whole, codes.next());
        codes.skip(whole / 8 * 9);
        for (size_t i = whole; i < n; ++i) codes.put(c[i], kNaturalCodeBits);
      }
    } else {
      for (T v : x) codes.put(naturalCode(static_cast<double>(v), rng), kNaturalCodeBits);
    }
    codes.flush();
    out.seal();
  }

 public:
  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kNatural, out.size(), 0);
    if (!v) return v.status();
    const uint64_t d = out.size();
    if (v->payload.size() != (d * kNaturalCodeBits + 7) / 8) {
      return core::corruption("natural payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(d) + " elements");
    }
    uint16_t c[kNaturalChunk];
    uint64_t checked = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    // Every whole group of 32 codes checked in registers; any bad code sends the stream through
    // the loop below, which names the first.
    if (hasVbmi()) {
      bool bad = false;
      const size_t done = naturalGroupsVbmi(v->payload.data(), d, nullptr, &bad);
      if (!bad) checked = done;
    }
#endif
    for (uint64_t lo = checked; lo < d; lo += kNaturalChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kNaturalChunk, d - lo));
      unpackNaturalCodes(v->payload.data(), lo, n, c);
      if (!anyBadNatural(c, n)) continue;
      for (size_t i = 0; i < n; ++i) {  // the first bad code, for the message
        if (c[i] == kNaturalSign) return core::corruption("natural code for negative zero");
        if ((c[i] & 0xff) == kNaturalInvalid) {
          return core::corruption("natural code for NaN, infinity or a value above 2^127");
        }
      }
    }
    const uint64_t usedBits = d * kNaturalCodeBits;
    if (usedBits % 8 != 0 &&
        (std::to_integer<uint32_t>(v->payload[usedBits / 8]) >> (usedBits % 8)) != 0) {
      return core::corruption("natural padding bits are not zero");
    }
    // Validated: now write. Every power is a normal float32, so the values are exact.
    float values[kNaturalChunk];
    uint64_t start = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if constexpr (std::is_same_v<T, float>) {
      if (hasVbmi()) start = naturalGroupsVbmi(v->payload.data(), d, out.data(), nullptr);
    }
#endif
    for (uint64_t lo = start; lo < d; lo += kNaturalChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kNaturalChunk, d - lo));
      unpackNaturalCodes(v->payload.data(), lo, n, c);
      if constexpr (std::is_same_v<T, float>) {
        naturalValues(c, n, out.data() + lo);
      } else {
        naturalValues(c, n, values);
        for (size_t i = 0; i < n; ++i) out[lo + i] = static_cast<T>(values[i]);
      }
    }
    return core::Status::ok();
  }
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeNatural() {
  return std::make_unique<NaturalCompressor<T>>();
}

template std::unique_ptr<Compressor<float>> makeNatural<float>();
template std::unique_ptr<Compressor<double>> makeNatural<double>();

}  // namespace starling::compression::codecs

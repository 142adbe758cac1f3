// Quantizing codecs: scaled sign and QSGD (stochastic rounding onto s uniform levels per bucket;
// the scaled codes live in bits.h, shared with the exponential-level codecs and dqsgd).
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
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

// ---------------------------------------------------------------------------------------------
// Scaled sign: (||x||_1 / d) * sign(x).

template <typename T>
double meanAbsSerial(std::span<const T> x) {
  if (x.empty()) return 0.0;
  const double d = static_cast<double>(x.size());
  double sum = 0.0;
  for (T v : x) sum += std::abs(static_cast<double>(v));
  if (!std::isinf(sum)) return sum / d;
  // Only float64 states can overflow the sum with finite values: average term by term instead.
  double mean = 0.0;
  for (T v : x) mean += std::abs(static_cast<double>(v)) / d;
  return mean;
}

// The scale of a sign frame, static_cast<T>(the serial mean of |x_i|).
template <typename T>
T signScale(std::span<const T> x) {
  if constexpr (std::is_same_v<T, float>) {
    if (!x.empty()) {
      // float32(sum / d) is monotone in the sum: the lane sum decides unless the serial sum
      // could round to another float32 (bits.h). A NaN or infinity goes the serial way, which
      // fixes which NaN comes out.
      const double d = static_cast<double>(x.size());
      const LaneSum s = laneSumAbs(x.data(), x.size());
      if (std::isfinite(s.sum)) {
        const float lo = static_cast<float>(s.lo / d);
        if (lo == static_cast<float>(s.hi / d)) return lo;
      }
    }
  }
  return static_cast<T>(meanAbsSerial(x));
}

// Sign bits, bit i%8 of byte i/8 set for x_i < 0 (not for -0 or NaN); n a multiple of 8.
template <typename T>
[[gnu::always_inline]] inline void signBitsImpl(const T* x, size_t n, std::byte* out) {
  auto* o = reinterpret_cast<uint8_t*>(out);
  for (size_t j = 0; j < n / 8; ++j) {
    uint32_t b = 0;
    for (int t = 0; t < 8; ++t) b |= static_cast<uint32_t>(x[8 * j + t] < T(0)) << t;
    o[j] = static_cast<uint8_t>(b);
  }
}
STARLING_SIMD_CLONES
void signBits(const float* x, size_t n, std::byte* out) { signBitsImpl(x, n, out); }
STARLING_SIMD_CLONES
void signBits(const double* x, size_t n, std::byte* out) { signBitsImpl(x, n, out); }

// out[i] = bit i ? -scale : scale, for n a multiple of 8: the sign bit flipped, which is what
// negation does to the finite, non-negative scale.
template <typename T>
[[gnu::always_inline]] inline void expandSignsImpl(const std::byte* bits, size_t n, T scale,
                                                   T* out) {
  using U = BitsOf<T>;
  const auto* b = reinterpret_cast<const uint8_t*>(bits);
  const U scaleBits = std::bit_cast<U>(scale);
  for (size_t j = 0; j < n / 8; ++j) {
    for (int t = 0; t < 8; ++t) {
      const U flip = static_cast<U>((b[j] >> t) & 1) << (8 * sizeof(T) - 1);
      out[8 * j + t] = std::bit_cast<T>(scaleBits ^ flip);
    }
  }
}
STARLING_SIMD_CLONES
void expandSigns(const std::byte* bits, size_t n, float scale, float* out) {
  expandSignsImpl(bits, n, scale, out);
}
STARLING_SIMD_CLONES
void expandSigns(const std::byte* bits, size_t n, double scale, double* out) {
  expandSignsImpl(bits, n, scale, out);
}

// AVX-512 versions of the two loops above for float32, picked at run time: a comparison gives 16
// sign bits at once (ordered less-than, false for -0 and NaN, as x < 0 is), and a masked move
// writes +scale or the scale with its sign bit set, which is what expandSigns writes.
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_undefined_* in intrinsics
#endif
__attribute__((target("avx512f,avx512bw"))) void signBitsAvx512(const float* x, size_t n,
                                                                std::byte* out) {
  const __m512 zero = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), zero, _CMP_LT_OQ);
    const uint16_t bits = static_cast<uint16_t>(m);
    std::memcpy(out + i / 8, &bits, 2);  // little-endian: element i + t is bit t
  }
  if (i < n) signBitsImpl(x + i, n - i, out + i / 8);  // n - i is 8 here (n is a multiple of 8)
}

__attribute__((target("avx512f,avx512bw"))) void expandSignsAvx512(const std::byte* bits, size_t n,
                                                                   float scale, float* out) {
  const __m512 pos = _mm512_set1_ps(scale);
  const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(
      _mm512_castps_si512(pos), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint16_t m;
    std::memcpy(&m, bits + i / 8, 2);
    _mm512_storeu_ps(out + i, _mm512_mask_mov_ps(pos, static_cast<__mmask16>(m), neg));
  }
  if (i < n) expandSignsImpl(bits + i / 8, n - i, scale, out + i);
}
#pragma GCC diagnostic pop

bool hasAvx512() { return avx512().f && avx512().bw; }
#endif

void signBitsFast(const float* x, size_t n, std::byte* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (hasAvx512()) return signBitsAvx512(x, n, out);
#endif
  signBits(x, n, out);
}
void signBitsFast(const double* x, size_t n, std::byte* out) { signBits(x, n, out); }

void expandSignsFast(const std::byte* bits, size_t n, float scale, float* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (hasAvx512()) return expandSignsAvx512(bits, n, scale, out);
#endif
  expandSigns(bits, n, scale, out);
}
void expandSignsFast(const std::byte* bits, size_t n, double scale, double* out) {
  expandSigns(bits, n, scale, out);
}

template <typename T>
class SignCompressor final : public Compressor<T> {
 public:
  CodecId id() const override { return CodecId::kSign; }
  bool unbiased() const override { return false; }
  size_t maxEncodedBytes(size_t d) const override {
    return frameBytesFor(0, sizeof(T) + (d + 7) / 8);
  }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    write(x, frame);
  }

  // The receivers' values are +-scale by the sign bits just written: decode's checks (the scale;
  // the padding bits, zero by construction) and its expansion, without parsing the frame again.
  // The compression error is summed block by block as the values are written.
  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng&, const StreamContext& ctx,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    FrameOut frame(out);
    write(x, frame);
    if (!frame.ok()) return frame.status();
    const std::byte* payload = frame.payload().data();
    const T scale = loadValue<T>(payload);
    if (!validScale(scale)) return core::corruption("sign scale is negative, NaN or infinite");
    expandAll(payload + sizeof(T), scale, seen, x, ctx.error);
    return frame.frame().size();
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kSign, out.size(), 0);
    if (!v) return v.status();
    const size_t d = out.size();
    if (v->payload.size() != sizeof(T) + (d + 7) / 8) {
      return core::corruption("sign payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(d) + " elements");
    }
    const T scale = loadValue<T>(v->payload.data());
    if (!validScale(scale)) return core::corruption("sign scale is negative, NaN or infinite");
    const std::byte* bits = v->payload.data() + sizeof(T);
    if (d % 8 != 0 && (std::to_integer<uint8_t>(bits[d / 8]) >> (d % 8)) != 0) {
      return core::corruption("sign padding bits are not zero");
    }
    expandAll(bits, scale, out);
    return core::Status::ok();
  }

 private:
  static void write(std::span<const T> x, FrameOut& out) {
    const size_t d = x.size();
    std::byte* payload =
        out.begin(CodecId::kSign, elementTypeOf<T>(), d, {}, sizeof(T) + (d + 7) / 8);
    if (payload == nullptr) return;
    // A NaN or infinite element gives a non-finite scale: the frame then fails to decode, the
    // sender's own decode included, which is how a diverging run shows up with this codec.
    storeValue<T>(payload, signScale(x));
    std::byte* bits = payload + sizeof(T);
    const size_t whole = d / 8 * 8;
    signBitsFast(x.data(), whole, bits);
    if (whole < d) {
      uint32_t last = 0;
      for (size_t i = whole; i < d; ++i) last |= static_cast<uint32_t>(x[i] < T(0)) << (i - whole);
      bits[d / 8] = static_cast<std::byte>(last);
    }
    out.seal();
  }

  // +-scale by the bits into `out`, in blocks; with `error`, the compression error against x of
  // each block while it is in cache.
  static void expandAll(const std::byte* bits, T scale, std::span<T> out,
                        std::span<const T> x = {}, SeenError* error = nullptr) {
    const size_t d = out.size();
    constexpr size_t kBlock = 4096;  // a multiple of 8: only the last block has a partial byte
    SquaredErrorSum sum;
    for (size_t lo = 0; lo < d; lo += kBlock) {
      const size_t n = std::min(kBlock, d - lo);
      const size_t whole = n / 8 * 8;
      expandSignsFast(bits + lo / 8, whole, scale, out.data() + lo);
      for (size_t i = lo + whole; i < lo + n; ++i) {
        const bool negative = ((std::to_integer<uint8_t>(bits[i / 8]) >> (i % 8)) & 1) != 0;
        out[i] = negative ? -scale : scale;
      }
      if (error != nullptr) sum.add(x.data() + lo, out.data() + lo, n);
    }
    if (error != nullptr) *error = sum.result();
  }
};

// ---------------------------------------------------------------------------------------------
// QSGD.

constexpr size_t kQsgdParamsBytes = 6;

// The qsgd codes of `bits` bits (sign included): s = 2^(bits-1) - 1 uniform levels.
ScaledCodes qsgdCodes(int bits, uint32_t bucket, bool linf) {
  ScaledCodes q;
  q.levels = LevelSet::kUniform;
  q.levelBits = bits - 1;
  q.s = (1u << (bits - 1)) - 1;
  q.bucket = bucket;
  q.linf = linf;
  return q;
}

template <typename T>
class QsgdCompressor final : public Compressor<T> {
 public:
  QsgdCompressor(int bits, uint32_t bucket, bool linf)
      : bits_(bits), bucket_(bucket), linf_(linf) {}

  CodecId id() const override { return CodecId::kQsgd; }
  bool unbiased() const override { return true; }

  size_t maxEncodedBytes(size_t d) const override {
    return frameBytesFor(kQsgdParamsBytes, qsgdCodes(bits_, bucket_, linf_).payloadBytes(d));
  }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    write(x, rng, frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng& rng, const StreamContext&,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    return writeAndSee(
        out, [&](FrameOut& f) { write(x, rng, f); },
        [&](const FrameOut& f) {
          return seenFromScaledCodes<T>(f.payload(), qsgdCodes(bits_, bucket_, linf_), seen, "qsgd");
        });
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kQsgd, out.size(), kQsgdParamsBytes);
    if (!v) return v.status();
    const int bits = std::to_integer<int>(v->params[0]);
    const int linf = std::to_integer<int>(v->params[1]);
    const uint32_t bucket = loadLe<uint32_t>(v->params.data() + 2);
    if (bits < 2 || bits > 8) return core::corruption("qsgd bits " + std::to_string(bits));
    if (linf > 1) return core::corruption("qsgd norm flag " + std::to_string(linf));
    if (bucket == 0) return core::corruption("qsgd bucket size 0");
    const ScaledCodes q = qsgdCodes(bits, bucket, linf == 1);
    STARLING_RETURN_IF_ERROR(checkScaledCodes(v->payload, q, out.size(), "qsgd"));
    // Validated: now write.
    decodeScaledCodes<T>(v->payload, q, out.size(), 1.0, out.data());
    return core::Status::ok();
  }

 private:
  void write(std::span<const T> x, core::Rng& rng, FrameOut& out) const {
    const ScaledCodes q = qsgdCodes(bits_, bucket_, linf_);
    std::byte params[kQsgdParamsBytes];
    params[0] = static_cast<std::byte>(bits_);
    params[1] = static_cast<std::byte>(linf_ ? 1 : 0);
    storeLe<uint32_t>(params + 2, bucket_);
    std::byte* payload =
        out.begin(CodecId::kQsgd, elementTypeOf<T>(), x.size(), params, q.payloadBytes(x.size()));
    if (payload == nullptr) return;
    encodeScaledCodes<T>(x, q, rng, payload);
    out.seal();
  }

  int bits_;
  uint32_t bucket_;
  bool linf_;
};
}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeSign() {
  return std::make_unique<SignCompressor<T>>();
}
template <typename T>
std::unique_ptr<Compressor<T>> makeQsgd(int bits, uint32_t bucket, bool linf) {
  assert(bits >= 2 && bits <= 8 && bucket >= 1);
  return std::make_unique<QsgdCompressor<T>>(bits, bucket, linf);
}

template std::unique_ptr<Compressor<float>> makeSign<float>();
template std::unique_ptr<Compressor<double>> makeSign<double>();
template std::unique_ptr<Compressor<float>> makeQsgd<float>(int, uint32_t, bool);
template std::unique_ptr<Compressor<double>> makeQsgd<double>(int, uint32_t, bool);

}  // namespace starling::compression::codecs

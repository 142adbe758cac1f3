// Dense codecs: identity (the values in the state's precision), fp16 and bf16.
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compression/codecs/codecs.h"
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

template <typename T>
class IdentityCompressor final : public Compressor<T> {
 public:
  CodecId id() const override { return CodecId::kIdentity; }
  bool unbiased() const override { return true; }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    encodeDense<T>(x, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kIdentity, out.size(), 0);
    if (!v) return v.status();
    if (v->payload.size() != out.size() * sizeof(T)) {
      return core::corruption("identity payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(out.size()) + " elements");
    }
    const std::byte* p = v->payload.data();
    for (size_t i = 0; i < out.size(); ++i) out[i] = loadValue<T>(p + i * sizeof(T));
    return core::Status::ok();
  }
};

template <typename T, typename Format, CodecId kCodec>
class HalfCompressor final : public Compressor<T> {
 public:
  CodecId id() const override { return kCodec; }
  bool unbiased() const override { return false; }  // deterministic rounding

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    std::vector<std::byte> payload(2 * x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      storeLe<uint16_t>(payload.data() + 2 * i, Format::fromDouble(static_cast<double>(x[i])));
    }
    writeFrame(kCodec, elementTypeOf<T>(), x.size(), {}, payload, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, kCodec, out.size(), 0);
    if (!v) return v.status();
    if (v->payload.size() != 2 * out.size()) {
      return core::corruption("16-bit payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(out.size()) + " elements");
    }
    const std::byte* p = v->payload.data();
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<T>(Format::toFloat(loadLe<uint16_t>(p + 2 * i)));
    }
    return core::Status::ok();
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

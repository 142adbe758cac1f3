// Codecs with exponentially spaced levels (ALGORITHMS.md §8, §9.2): NUQSGD, natural compression,
// natural dithering and top-k + natural dithering. Each rounds |x_i| (or |x_i| / norm) without
// bias onto powers of two, so its relative variance per element is at most 1/8 (between two
// levels a and 2a the variance of r is (r - a)(2a - r) <= r^2 / 8).
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

// Exponential codes with s nonzero levels {2^(1-s), ..., 1/2, 1} and zero: the level field holds
// 0..s, so it takes bit_width(s) bits.
ScaledCodes exponentialCodes(uint32_t s, uint64_t bucket, bool linf) {
  ScaledCodes q;
  q.levels = LevelSet::kExponential;
  q.s = s;
  q.levelBits = std::bit_width(s);
  q.bucket = bucket;
  q.linf = linf;
  return q;
}

// ---------------------------------------------------------------------------------------------
// NUQSGD: QSGD's buckets, norm and code layout with the levels {0, 2^-(s-1), ..., 1/2, 1}.

constexpr size_t kNuqsgdParamsBytes = 5;

ScaledCodes nuqsgdCodes(int bits, uint32_t bucket) {
  // The level field takes bit_width(s) = bits - 1 bits; the sign makes `bits`.
  return exponentialCodes((1u << (bits - 1)) - 1, bucket, false);
}

template <typename T>
class NuqsgdCompressor final : public Compressor<T> {
 public:
  NuqsgdCompressor(int bits, uint32_t bucket) : bits_(bits), bucket_(bucket) {}

  CodecId id() const override { return CodecId::kNuqsgd; }
  bool unbiased() const override { return true; }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    const ScaledCodes q = nuqsgdCodes(bits_, bucket_);
    std::vector<std::byte> payload(q.payloadBytes(x.size()));
    encodeScaledCodes<T>(x, q, rng, payload.data());
    std::byte params[kNuqsgdParamsBytes];
    params[0] = static_cast<std::byte>(bits_);
    storeLe<uint32_t>(params + 1, bucket_);
    writeFrame(CodecId::kNuqsgd, elementTypeOf<T>(), x.size(), params, payload, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kNuqsgd, out.size(), kNuqsgdParamsBytes);
    if (!v) return v.status();
    const int bits = std::to_integer<int>(v->params[0]);
    const uint32_t bucket = loadLe<uint32_t>(v->params.data() + 1);
    if (bits < 2 || bits > 8) return core::corruption("nuqsgd bits " + std::to_string(bits));
    if (bucket == 0) return core::corruption("nuqsgd bucket size 0");
    const ScaledCodes q = nuqsgdCodes(bits, bucket);
    STARLING_RETURN_IF_ERROR(checkScaledCodes(v->payload, q, out.size(), "nuqsgd"));
    readScaledCodes(v->payload, q, out.size(), 1.0,
                    [&out](uint64_t i, double value) { out[i] = static_cast<T>(value); });
    return core::Status::ok();
  }

 private:
  int bits_;
  uint32_t bucket_;
};

// ---------------------------------------------------------------------------------------------
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

template <typename T>
class NaturalCompressor final : public Compressor<T> {
 public:
  CodecId id() const override { return CodecId::kNatural; }
  bool unbiased() const override { return true; }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    const uint64_t d = x.size();
    std::vector<std::byte> payload((d * kNaturalCodeBits + 7) / 8);
    BitWriter codes(payload.data());
    for (T v : x) codes.put(naturalCode(static_cast<double>(v), rng), kNaturalCodeBits);
    codes.flush();
    writeFrame(CodecId::kNatural, elementTypeOf<T>(), d, {}, payload, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kNatural, out.size(), 0);
    if (!v) return v.status();
    const uint64_t d = out.size();
    if (v->payload.size() != (d * kNaturalCodeBits + 7) / 8) {
      return core::corruption("natural payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(d) + " elements");
    }
    BitReader check(v->payload.data());
    for (uint64_t i = 0; i < d; ++i) {
      const uint32_t code = check.get(kNaturalCodeBits);
      if (code == kNaturalSign) return core::corruption("natural code for negative zero");
      if ((code & 0xff) == kNaturalInvalid) {
        return core::corruption("natural code for NaN, infinity or a value above 2^127");
      }
    }
    if (check.leftover() != 0) return core::corruption("natural padding bits are not zero");
    // Validated: now write. Every power is a normal float32, so the values are exact.
    BitReader codes(v->payload.data());
    for (uint64_t i = 0; i < d; ++i) {
      const uint32_t code = codes.get(kNaturalCodeBits);
      const uint32_t e = code & 0xff;
      const double magnitude = e == 0 ? 0.0 : std::ldexp(1.0, static_cast<int>(e) - kNaturalBias);
      out[i] = static_cast<T>((code & kNaturalSign) != 0 ? -magnitude : magnitude);
    }
    return core::Status::ok();
  }
};

// ---------------------------------------------------------------------------------------------
// Natural dithering: one norm for the whole vector, s exponential levels.

constexpr size_t kDitheringParamsBytes = 2;
constexpr int kMaxDitheringLevels = 30;

template <typename T>
class NaturalDitheringCompressor final : public Compressor<T> {
 public:
  NaturalDitheringCompressor(int levels, bool linf) : levels_(levels), linf_(linf) {}

  CodecId id() const override { return CodecId::kNaturalDithering; }
  bool unbiased() const override { return true; }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    const uint64_t d = x.size();
    const ScaledCodes q =
        exponentialCodes(static_cast<uint32_t>(levels_), std::max<uint64_t>(d, 1), linf_);
    std::vector<std::byte> payload(q.payloadBytes(d));
    if (d == 0) payload.resize(4);  // the norm of the empty vector, 0
    encodeScaledCodes<T>(x, q, rng, payload.data());
    const std::byte params[kDitheringParamsBytes] = {static_cast<std::byte>(levels_),
                                                     static_cast<std::byte>(linf_ ? 1 : 0)};
    writeFrame(CodecId::kNaturalDithering, elementTypeOf<T>(), d, params, payload, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kNaturalDithering, out.size(), kDitheringParamsBytes);
    if (!v) return v.status();
    const int levels = std::to_integer<int>(v->params[0]);
    const int linf = std::to_integer<int>(v->params[1]);
    if (levels < 1 || levels > kMaxDitheringLevels) {
      return core::corruption("natural dithering levels " + std::to_string(levels));
    }
    if (linf > 1) return core::corruption("natural dithering norm flag " + std::to_string(linf));
    const uint64_t d = out.size();
    const ScaledCodes q =
        exponentialCodes(static_cast<uint32_t>(levels), std::max<uint64_t>(d, 1), linf == 1);
    if (d == 0) {
      if (v->payload.size() != 4) return core::corruption("natural dithering payload length");
      if (!validScale(std::bit_cast<float>(loadLe<uint32_t>(v->payload.data())))) {
        return core::corruption("natural dithering norm is negative, NaN or infinite");
      }
      return core::Status::ok();
    }
    STARLING_RETURN_IF_ERROR(checkScaledCodes(v->payload, q, d, "natural dithering"));
    readScaledCodes(v->payload, q, d, 1.0,
                    [&out](uint64_t i, double value) { out[i] = static_cast<T>(value); });
    return core::Status::ok();
  }

 private:
  int levels_;
  bool linf_;
};

// ---------------------------------------------------------------------------------------------
// Top-k + natural dithering (ALGORITHMS.md §8): the k largest |x_i|, dithered with the l2 norm
// of the kept vector, scaled by 1/zeta_k.

// The dithering variance constant on k elements, l2 norm: 9/8 + sqrt(k) 2^(1-s) min(1, same).
double ditheringZeta(uint64_t k, int s) {
  const double a = std::sqrt(static_cast<double>(k)) * std::ldexp(1.0, 1 - s);
  return 1.125 + a * std::min(1.0, a);
}

// The k indices of the largest |x_i| in increasing order (NaN counts as the largest; equal
// magnitudes go to the lower index), as topk selects them.
template <typename T>
std::vector<uint32_t> largest(std::span<const T> x, uint64_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), uint32_t{0});
  auto before = [&x](uint32_t a, uint32_t b) {
    const T ma = std::abs(x[a]);
    const T mb = std::abs(x[b]);
    const bool na = std::isnan(ma);
    const bool nb = std::isnan(mb);
    if (na != nb) return na;
    if (!na && ma != mb) return ma > mb;
    return a < b;
  };
  if (k > 0 && k < order.size()) {
    std::nth_element(order.begin(), order.begin() + static_cast<ptrdiff_t>(k - 1), order.end(),
                     before);
  }
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

constexpr size_t kTopKDitheringParamsBytes = 1;

template <typename T>
class TopKDitheringCompressor final : public Compressor<T> {
 public:
  TopKDitheringCompressor(uint64_t k, double ratio, int levels)
      : k_(k), ratio_(ratio), levels_(levels) {}

  CodecId id() const override { return CodecId::kTopKDithering; }
  bool unbiased() const override { return false; }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    assert(x.size() <= kMaxFrameElements);
    const uint64_t k = std::min<uint64_t>(keptCount(k_, ratio_, x.size()), UINT32_MAX);
    const std::vector<uint32_t> indices = largest<T>(x, k);
    std::vector<T> kept(k);
    for (uint64_t j = 0; j < k; ++j) kept[j] = x[indices[j]];
    std::vector<std::byte> payload;
    payload.reserve(4 + 2 * k + 4 + k);
    appendLe<uint32_t>(payload, static_cast<uint32_t>(k));
    appendIndexGaps(payload, indices);
    const ScaledCodes q =
        exponentialCodes(static_cast<uint32_t>(levels_), std::max<uint64_t>(k, 1), false);
    const size_t codesAt = payload.size();
    payload.resize(codesAt + std::max<uint64_t>(q.payloadBytes(k), 4));
    encodeScaledCodes<T>(kept, q, rng, payload.data() + codesAt);
    const std::byte params[kTopKDitheringParamsBytes] = {static_cast<std::byte>(levels_)};
    writeFrame(CodecId::kTopKDithering, elementTypeOf<T>(), x.size(), params, payload, out);
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kTopKDithering, out.size(), kTopKDitheringParamsBytes);
    if (!v) return v.status();
    const int levels = std::to_integer<int>(v->params[0]);
    if (levels < 1 || levels > kMaxDitheringLevels) {
      return core::corruption("topk dithering levels " + std::to_string(levels));
    }
    const uint64_t d = out.size();
    Reader r(v->payload);
    uint32_t k;
    if (!r.readLe(k)) return core::corruption("topk dithering payload shorter than its count");
    if (k > d) {
      return core::corruption("topk dithering frame keeps " + std::to_string(k) + " of " +
                              std::to_string(d) + " elements");
    }
    if (k == 0 && d > 0) return core::corruption("topk dithering frame keeps no element");
    std::vector<uint32_t> indices;
    STARLING_RETURN_IF_ERROR(readIndexGaps(r, k, d, indices));
    const auto codes = v->payload.subspan(r.position());
    const ScaledCodes q =
        exponentialCodes(static_cast<uint32_t>(levels), std::max<uint64_t>(k, 1), false);
    if (k == 0) {
      if (codes.size() != 4) return core::corruption("topk dithering payload length");
      if (!validScale(std::bit_cast<float>(loadLe<uint32_t>(codes.data())))) {
        return core::corruption("topk dithering norm is negative, NaN or infinite");
      }
      return core::Status::ok();
    }
    STARLING_RETURN_IF_ERROR(checkScaledCodes(codes, q, k, "topk dithering"));
    // Validated: now write.
    std::fill(out.begin(), out.end(), T{0});
    readScaledCodes(codes, q, k, ditheringZeta(k, levels),
                    [&](uint64_t j, double value) { out[indices[j]] = static_cast<T>(value); });
    return core::Status::ok();
  }

 private:
  uint64_t k_;
  double ratio_;
  int levels_;
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeNuqsgd(int bits, uint32_t bucket) {
  assert(bits >= 2 && bits <= 8 && bucket >= 1);
  return std::make_unique<NuqsgdCompressor<T>>(bits, bucket);
}
template <typename T>
std::unique_ptr<Compressor<T>> makeNatural() {
  return std::make_unique<NaturalCompressor<T>>();
}
template <typename T>
std::unique_ptr<Compressor<T>> makeNaturalDithering(int levels, bool linf) {
  assert(levels >= 1 && levels <= kMaxDitheringLevels);
  return std::make_unique<NaturalDitheringCompressor<T>>(levels, linf);
}
template <typename T>
std::unique_ptr<Compressor<T>> makeTopKDithering(uint64_t k, double ratio, int levels) {
  assert(levels >= 1 && levels <= kMaxDitheringLevels);
  return std::make_unique<TopKDitheringCompressor<T>>(k, ratio, levels);
}

template std::unique_ptr<Compressor<float>> makeNuqsgd<float>(int, uint32_t);
template std::unique_ptr<Compressor<double>> makeNuqsgd<double>(int, uint32_t);
template std::unique_ptr<Compressor<float>> makeNatural<float>();
template std::unique_ptr<Compressor<double>> makeNatural<double>();
template std::unique_ptr<Compressor<float>> makeNaturalDithering<float>(int, bool);
template std::unique_ptr<Compressor<double>> makeNaturalDithering<double>(int, bool);
template std::unique_ptr<Compressor<float>> makeTopKDithering<float>(uint64_t, double, int);
template std::unique_ptr<Compressor<double>> makeTopKDithering<double>(uint64_t, double, int);

}  // namespace starling::compression::codecs

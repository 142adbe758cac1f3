// Codecs with exponentially spaced levels on scaled codes (bits.h, scaled_codes.cc;
// docs/algorithms.md §12.7, §12.9, §12.10): NUQSGD, natural dithering and top-k + natural
// dithering. Each rounds |x_i| / norm without bias onto powers of two, so its relative variance
// per element is at most 1/8 (between two levels a and 2a the variance of r is
// (r - a)(2a - r) <= r^2 / 8). Natural compression, with its own 9-bit codes, is in
// exponential.cc.
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
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

  size_t maxEncodedBytes(size_t d) const override {
    return frameBytesFor(kNuqsgdParamsBytes, nuqsgdCodes(bits_, bucket_).payloadBytes(d));
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
          return seenFromScaledCodes<T>(f.payload(), nuqsgdCodes(bits_, bucket_), seen, "nuqsgd");
        });
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
    decodeScaledCodes<T>(v->payload, q, out.size(), 1.0, out.data());
    return core::Status::ok();
  }

 private:
  void write(std::span<const T> x, core::Rng& rng, FrameOut& out) const {
    const ScaledCodes q = nuqsgdCodes(bits_, bucket_);
    std::byte params[kNuqsgdParamsBytes];
    params[0] = static_cast<std::byte>(bits_);
    storeLe<uint32_t>(params + 1, bucket_);
    std::byte* payload = out.begin(CodecId::kNuqsgd, elementTypeOf<T>(), x.size(), params,
                                   q.payloadBytes(x.size()));
    if (payload == nullptr) return;
    encodeScaledCodes<T>(x, q, rng, payload);
    out.seal();
  }

  int bits_;
  uint32_t bucket_;
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

  size_t maxEncodedBytes(size_t d) const override {
    return frameBytesFor(kDitheringParamsBytes, d == 0 ? 4 : codes(d).payloadBytes(d));
  }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    write(x, rng, frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng& rng, const StreamContext&,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    FrameOut frame(out);
    write(x, rng, frame);
    if (!frame.ok()) return frame.status();
    if (x.empty()) {
      STARLING_RETURN_IF_ERROR(decode(frame.frame(), seen));
    } else {
      STARLING_RETURN_IF_ERROR(
          seenFromScaledCodes<T>(frame.payload(), codes(x.size()), seen, "natural dithering"));
    }
    return frame.frame().size();
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
    decodeScaledCodes<T>(v->payload, q, d, 1.0, out.data());
    return core::Status::ok();
  }

 private:
  ScaledCodes codes(uint64_t d) const {
    return exponentialCodes(static_cast<uint32_t>(levels_), std::max<uint64_t>(d, 1), linf_);
  }

  void write(std::span<const T> x, core::Rng& rng, FrameOut& out) const {
    const uint64_t d = x.size();
    const ScaledCodes q = codes(d);
    const std::byte params[kDitheringParamsBytes] = {static_cast<std::byte>(levels_),
                                                     static_cast<std::byte>(linf_ ? 1 : 0)};
    std::byte* payload = out.begin(CodecId::kNaturalDithering, elementTypeOf<T>(), d, params,
                                   d == 0 ? 4 : q.payloadBytes(d));
    if (payload == nullptr) return;
    if (d == 0) storeLe<uint32_t>(payload, 0);  // the norm of the empty vector, 0
    encodeScaledCodes<T>(x, q, rng, payload);
    out.seal();
  }

  int levels_;
  bool linf_;
};

// ---------------------------------------------------------------------------------------------
// Top-k + natural dithering (docs/algorithms.md §12.10): the k largest |x_i|, dithered with the
// l2 norm of the kept vector, scaled by 1/zeta_k.

// The dithering variance constant on k elements, l2 norm: 9/8 + sqrt(k) 2^(1-s) min(1, same).
double ditheringZeta(uint64_t k, int s) {
  const double a = std::sqrt(static_cast<double>(k)) * std::ldexp(1.0, 1 - s);
  return 1.125 + a * std::min(1.0, a);
}

constexpr size_t kTopKDitheringParamsBytes = 1;

template <typename T>
class TopKDitheringCompressor final : public Compressor<T> {
 public:
  TopKDitheringCompressor(uint64_t k, double ratio, int levels)
      : k_(k), ratio_(ratio), levels_(levels) {}

  CodecId id() const override { return CodecId::kTopKDithering; }
  bool unbiased() const override { return false; }

  // k index gaps of at most varintLength(d - 1) bytes each.
  size_t maxEncodedBytes(size_t d) const override {
    const uint64_t k = std::min<uint64_t>(keptCount(k_, ratio_, d), UINT32_MAX);
    const ScaledCodes q =
        exponentialCodes(static_cast<uint32_t>(levels_), std::max<uint64_t>(k, 1), false);
    return frameBytesFor(kTopKDitheringParamsBytes,
                         4 + k * varintLength(d == 0 ? 0 : d - 1) +
                             std::max<uint64_t>(q.payloadBytes(k), 4));
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
  void write(std::span<const T> x, core::Rng& rng, FrameOut& out) const {
    assert(x.size() <= kMaxFrameElements);
    const uint64_t k = std::min<uint64_t>(keptCount(k_, ratio_, x.size()), UINT32_MAX);
    const std::vector<uint32_t> indices = largestIndices<T>(x, k);
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
    out.write(CodecId::kTopKDithering, elementTypeOf<T>(), x.size(), params, payload);
  }

 public:

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
    std::vector<T> values(k);
    decodeScaledCodes<T>(codes, q, k, ditheringZeta(k, levels), values.data());
    std::fill(out.begin(), out.end(), T{0});
    for (uint64_t j = 0; j < k; ++j) out[indices[j]] = values[j];
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
template std::unique_ptr<Compressor<float>> makeNaturalDithering<float>(int, bool);
template std::unique_ptr<Compressor<double>> makeNaturalDithering<double>(int, bool);
template std::unique_ptr<Compressor<float>> makeTopKDithering<float>(uint64_t, double, int);
template std::unique_ptr<Compressor<double>> makeTopKDithering<double>(uint64_t, double, int);

}  // namespace starling::compression::codecs

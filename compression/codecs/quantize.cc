// Quantizing codecs: scaled sign and QSGD (stochastic rounding onto s uniform levels per bucket;
// the packing lives in bits.h, shared with the exponential-level codecs and dqsgd).
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compression/codecs/bits.h"
#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

// ---------------------------------------------------------------------------------------------
// Scaled sign: (||x||_1 / d) * sign(x).

template <typename T>
double meanAbs(std::span<const T> x) {
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

template <typename T>
class SignCompressor final : public Compressor<T> {
 public:
  CodecId id() const override { return CodecId::kSign; }
  bool unbiased() const override { return false; }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    const size_t d = x.size();
    std::vector<std::byte> payload(sizeof(T) + (d + 7) / 8);
    // A NaN or infinite element gives a non-finite scale: the frame then fails to decode, the
    // sender's own decode included, which is how a diverging run shows up with this codec.
    storeValue<T>(payload.data(), static_cast<T>(meanAbs(x)));
    std::byte* bits = payload.data() + sizeof(T);
    for (size_t i = 0; i < d; ++i) {
      if (x[i] < 0) bits[i / 8] |= std::byte{static_cast<uint8_t>(1u << (i % 8))};
    }
    writeFrame(CodecId::kSign, elementTypeOf<T>(), d, {}, payload, out);
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
    for (size_t i = 0; i < d; ++i) {
      const bool negative = ((std::to_integer<uint8_t>(bits[i / 8]) >> (i % 8)) & 1) != 0;
      out[i] = negative ? -scale : scale;
    }
    return core::Status::ok();
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

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    const ScaledCodes q = qsgdCodes(bits_, bucket_, linf_);
    std::vector<std::byte> payload(q.payloadBytes(x.size()));
    encodeScaledCodes<T>(x, q, rng, payload.data());
    std::byte params[kQsgdParamsBytes];
    params[0] = static_cast<std::byte>(bits_);
    params[1] = static_cast<std::byte>(linf_ ? 1 : 0);
    storeLe<uint32_t>(params + 2, bucket_);
    writeFrame(CodecId::kQsgd, elementTypeOf<T>(), x.size(), params, payload, out);
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
    readScaledCodes(v->payload, q, out.size(), 1.0,
                    [&out](uint64_t i, double value) { out[i] = static_cast<T>(value); });
    return core::Status::ok();
  }

 private:
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

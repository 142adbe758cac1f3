// Quantizing codecs: scaled sign and QSGD (stochastic rounding onto s uniform levels per bucket).
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

// Packs codes of `width` bits, least significant bit first, into a zeroed byte buffer.
class BitWriter {
 public:
  explicit BitWriter(std::byte* out) : out_(out) {}
  void put(uint32_t code, int width) {
    acc_ |= static_cast<uint64_t>(code) << used_;
    used_ += width;
    while (used_ >= 8) {
      *out_++ = static_cast<std::byte>(acc_ & 0xff);
      acc_ >>= 8;
      used_ -= 8;
    }
  }
  void flush() {
    if (used_ > 0) *out_ = static_cast<std::byte>(acc_ & 0xff);
  }

 private:
  std::byte* out_;
  uint64_t acc_ = 0;
  int used_ = 0;
};

// Reads codes written by BitWriter; the caller has checked that the bytes are there.
class BitReader {
 public:
  explicit BitReader(const std::byte* in) : in_(in) {}
  uint32_t get(int width) {
    while (have_ < width) {
      acc_ |= static_cast<uint64_t>(std::to_integer<uint8_t>(*in_++)) << have_;
      have_ += 8;
    }
    const auto code = static_cast<uint32_t>(acc_ & ((uint64_t{1} << width) - 1));
    acc_ >>= width;
    have_ -= width;
    return code;
  }
  // The bits of the current byte not consumed yet (the last byte's padding).
  uint64_t leftover() const { return acc_; }

 private:
  const std::byte* in_;
  uint64_t acc_ = 0;
  int have_ = 0;
};

bool validScale(double s) { return std::isfinite(s) && !std::signbit(s); }

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

// The smallest float32 >= v, so that s * |x| / scale never exceeds s. NaN stays NaN; a norm
// beyond float32's range becomes infinity (and the frame is then rejected by every decoder).
float roundUpToFloat(double v) {
  if (std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
  if (v > static_cast<double>(std::numeric_limits<float>::max())) {
    return std::numeric_limits<float>::infinity();
  }
  float f = static_cast<float>(v);
  if (static_cast<double>(f) < v) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

template <typename T>
double bucketNorm(std::span<const T> x, bool linf) {
  double maxAbs = 0.0;
  for (T v : x) {
    const double a = std::abs(static_cast<double>(v));
    if (std::isnan(a)) return a;
    maxAbs = std::max(maxAbs, a);
  }
  if (linf || maxAbs == 0.0 || std::isinf(maxAbs)) return maxAbs;
  double sum = 0.0;
  if constexpr (sizeof(T) == 4) {
    // Squares of float32 values cannot overflow a double sum.
    for (T v : x) sum += static_cast<double>(v) * static_cast<double>(v);
    return std::sqrt(sum);
  } else {
    for (T v : x) {
      const double r = static_cast<double>(v) / maxAbs;
      sum += r * r;
    }
    return maxAbs * std::sqrt(sum);
  }
}

template <typename T>
class QsgdCompressor final : public Compressor<T> {
 public:
  QsgdCompressor(int bits, uint32_t bucket, bool linf)
      : bits_(bits), bucket_(bucket), linf_(linf) {}

  CodecId id() const override { return CodecId::kQsgd; }
  bool unbiased() const override { return true; }

  void encode(std::span<const T> x, core::Rng& rng, std::vector<std::byte>& out) const override {
    const uint64_t d = x.size();
    const uint64_t buckets = (d + bucket_ - 1) / bucket_;
    const uint32_t s = (1u << (bits_ - 1)) - 1;
    const uint32_t signBit = 1u << (bits_ - 1);
    std::vector<std::byte> payload(4 * buckets + (d * bits_ + 7) / 8);
    BitWriter codes(payload.data() + 4 * buckets);
    for (uint64_t b = 0; b < buckets; ++b) {
      const uint64_t lo = b * bucket_;
      const std::span<const T> part = x.subspan(lo, std::min<uint64_t>(bucket_, d - lo));
      const float scale = roundUpToFloat(bucketNorm(part, linf_));
      storeLe<uint32_t>(payload.data() + 4 * b, std::bit_cast<uint32_t>(scale));
      const bool quantize = std::isfinite(scale) && scale > 0.0f;
      for (T v : part) {
        uint32_t code = 0;
        if (quantize) {
          const double r =
              std::min(static_cast<double>(s) * std::abs(static_cast<double>(v)) / scale,
                       static_cast<double>(s));
          auto level = static_cast<uint32_t>(r);
          if (rng.uniform() < r - level) ++level;
          // A zero level carries no sign, so every vector has one encoding.
          code = level != 0 && v < 0 ? level | signBit : level;
        }
        codes.put(code, bits_);
      }
    }
    codes.flush();
    std::byte params[kQsgdParamsBytes];
    params[0] = static_cast<std::byte>(bits_);
    params[1] = static_cast<std::byte>(linf_ ? 1 : 0);
    storeLe<uint32_t>(params + 2, bucket_);
    writeFrame(CodecId::kQsgd, elementTypeOf<T>(), d, params, payload, out);
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
    const uint64_t d = out.size();
    const uint64_t buckets = (d + bucket - 1) / bucket;
    const uint64_t codeBytes = (d * bits + 7) / 8;
    if (v->payload.size() != 4 * buckets + codeBytes) {
      return core::corruption("qsgd payload of " + std::to_string(v->payload.size()) +
                              " bytes, its params imply " +
                              std::to_string(4 * buckets + codeBytes));
    }
    const std::byte* p = v->payload.data();
    for (uint64_t b = 0; b < buckets; ++b) {
      if (!validScale(std::bit_cast<float>(loadLe<uint32_t>(p + 4 * b)))) {
        return core::corruption("qsgd scale is negative, NaN or infinite");
      }
    }
    const uint32_t levelMask = (1u << (bits - 1)) - 1;  // = s: every level field is in range
    const uint32_t signBit = 1u << (bits - 1);
    BitReader check(p + 4 * buckets);
    for (uint64_t i = 0; i < d; ++i) {
      if (check.get(bits) == signBit) return core::corruption("qsgd code for negative zero");
    }
    if (check.leftover() != 0) return core::corruption("qsgd padding bits are not zero");
    // Validated: now write.
    const double s = static_cast<double>(levelMask);
    BitReader codes(p + 4 * buckets);
    for (uint64_t b = 0; b < buckets; ++b) {
      const double scale = std::bit_cast<float>(loadLe<uint32_t>(p + 4 * b));
      const uint64_t hi = std::min<uint64_t>(d, (b + 1) * bucket);
      for (uint64_t i = b * bucket; i < hi; ++i) {
        const uint32_t code = codes.get(bits);
        const double magnitude = scale * static_cast<double>(code & levelMask) / s;
        out[i] = static_cast<T>((code & signBit) != 0 ? -magnitude : magnitude);
      }
    }
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

// int8: a float32 scale per chunk of `chunk` elements and one signed byte per element
// (docs/wire_format.md, codec 16; docs/compression.md "int8"). The scale is the chunk's largest
// magnitude over 127, rounded to float32; each code is the element over the scale, rounded to
// the nearest integer (ties to even) and clamped to [-127, 127]; a receiver's value is the code
// times the scale, computed in float32. Deterministic, biased by at most half a step per element
// (so it is meant for error feedback, as for the pseudo-gradients it was added for), and a
// quarter of float32's bytes plus 4 bytes per chunk.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "compression/codecs/codecs.h"
#include "compression/codecs/wire.h"

namespace starling::compression::codecs {
namespace {

constexpr size_t kInt8ParamsBytes = 4;  // chunk, uint32 LE

size_t int8Chunks(size_t d, uint32_t chunk) { return d / chunk + (d % chunk != 0); }

// The chunk's scale: max |x_i| / 127 in float64, rounded to float32. NaN or infinity in the
// chunk gives a non-finite scale, which decode refuses (the sender's own decode included: that
// is how a diverging run shows up with this codec).
template <typename T>
float int8Scale(const T* x, size_t n) {
  double m = 0;
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(x[i]));
    finite &= std::isfinite(a);
    m = std::max(m, a);
  }
  if (!finite) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(m / 127.0);
}

template <typename T>
int8_t int8Code(T x, float scale) {
  // A zero scale: an all-zero chunk (or one too small for float32); a non-finite one: the frame
  // is refused anyway, and its codes are written as 0.
  if (scale == 0.0f || !std::isfinite(scale)) return 0;
  const double q = std::nearbyint(static_cast<double>(x) / static_cast<double>(scale));
  return static_cast<int8_t>(std::clamp(q, -127.0, 127.0));
}

template <typename T>
T int8Value(int8_t q, float scale) {
  return static_cast<T>(static_cast<float>(q) * scale);
}

template <typename T>
class Int8Compressor final : public Compressor<T> {
 public:
  explicit Int8Compressor(uint32_t chunk) : chunk_(chunk) {}

  CodecId id() const override { return CodecId::kInt8; }
  bool unbiased() const override { return false; }
  size_t maxEncodedBytes(size_t d) const override {
    return frameBytesFor(kInt8ParamsBytes, payloadBytes(d));
  }

  void encode(std::span<const T> x, core::Rng&, std::vector<std::byte>& out) const override {
    FrameOut frame(out);
    write(x, frame);
  }

  core::Result<size_t> encodeInto(std::span<const T> x, core::Rng&, const StreamContext&,
                                  std::span<std::byte> out, std::span<T> seen) const override {
    return writeAndSee(
        out, [&](FrameOut& frame) { write(x, frame); },
        [&](FrameOut& frame) { return expand(frame.payload(), seen); });
  }

  core::Status decode(std::span<const std::byte> frame, std::span<T> out) const override {
    auto v = openFrame<T>(frame, CodecId::kInt8, out.size(), kInt8ParamsBytes);
    if (!v) return v.status();
    const uint32_t chunk = loadLe<uint32_t>(v->params.data());
    if (chunk != chunk_) {
      return core::corruption("int8 chunk " + std::to_string(chunk) + ", expected " +
                              std::to_string(chunk_));
    }
    if (v->payload.size() != payloadBytes(out.size())) {
      return core::corruption("int8 payload of " + std::to_string(v->payload.size()) +
                              " bytes for " + std::to_string(out.size()) + " elements");
    }
    return expand(v->payload, out);
  }

 private:
  size_t payloadBytes(size_t d) const { return 4 * int8Chunks(d, chunk_) + d; }

  void write(std::span<const T> x, FrameOut& out) const {
    const size_t d = x.size();
    std::byte params[kInt8ParamsBytes];
    storeLe<uint32_t>(params, chunk_);
    std::byte* payload = out.begin(CodecId::kInt8, elementTypeOf<T>(), d, params, payloadBytes(d));
    if (payload == nullptr) return;
    std::byte* codes = payload + 4 * int8Chunks(d, chunk_);
    for (size_t c = 0, lo = 0; lo < d; ++c, lo += chunk_) {
      const size_t n = std::min<size_t>(chunk_, d - lo);
      const float scale = int8Scale(x.data() + lo, n);
      storeValue<float>(payload + 4 * c, scale);
      for (size_t i = 0; i < n; ++i) {
        codes[lo + i] = static_cast<std::byte>(static_cast<uint8_t>(int8Code(x[lo + i], scale)));
      }
    }
    out.seal();
  }

  // Checks every scale (finite, >= 0) and code (not -128) before writing `out`.
  core::Status expand(std::span<const std::byte> payload, std::span<T> out) const {
    const size_t d = out.size();
    const size_t chunks = int8Chunks(d, chunk_);
    const std::byte* codes = payload.data() + 4 * chunks;
    for (size_t c = 0; c < chunks; ++c) {
      const float scale = loadValue<float>(payload.data() + 4 * c);
      if (!(scale >= 0.0f) || !std::isfinite(scale)) {
        return core::corruption("int8 scale of chunk " + std::to_string(c) +
                                " is negative, NaN or infinite");
      }
    }
    for (size_t i = 0; i < d; ++i) {
      if (codes[i] == std::byte{0x80}) {
        return core::corruption("int8 code -128 at element " + std::to_string(i) +
                                " (codes are -127 ... 127)");
      }
    }
    for (size_t c = 0, lo = 0; lo < d; ++c, lo += chunk_) {
      const float scale = loadValue<float>(payload.data() + 4 * c);
      const size_t n = std::min<size_t>(chunk_, d - lo);
      for (size_t i = lo; i < lo + n; ++i) {
        out[i] = int8Value<T>(static_cast<int8_t>(std::to_integer<uint8_t>(codes[i])), scale);
      }
    }
    return core::Status::ok();
  }

  uint32_t chunk_;
};

}  // namespace

template <typename T>
std::unique_ptr<Compressor<T>> makeInt8(uint32_t chunk) {
  return std::make_unique<Int8Compressor<T>>(chunk);
}

template std::unique_ptr<Compressor<float>> makeInt8<float>(uint32_t);
template std::unique_ptr<Compressor<double>> makeInt8<double>(uint32_t);

}  // namespace starling::compression::codecs

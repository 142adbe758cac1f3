// Shared by the codec tests (codecs_*_test.cc): specs, encode/decode helpers that assert, frames
// crafted with a valid CRC, random vectors and moments.
#pragma once

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "compression/codecs/float16.h"
#include "compression/compressor.h"
#include "compression/frame.h"
#include "hex.h"
#include "core/rng.h"

namespace starling::compression::codec_testing {


using codecs::bf16FromDouble;
using codecs::doubleFromBf16;
using codecs::doubleFromHalf;
using codecs::halfFromDouble;
using core::StatusCode;
using Kind = CompressorSpec::Kind;
using Frame = std::vector<std::byte>;
using Bytes = std::vector<std::byte>;

using testing::fromHex;
using testing::toHex;

// The hand-written frame body followed by its CRC32C, little-endian.
inline Frame sealed(std::string_view bodyHex) {
  Frame f = fromHex(bodyHex);
  const uint32_t crc = crc32c(f);
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::byte>((crc >> (8 * i)) & 0xff));
  return f;
}

// One to three random edits of a frame's params or payload: a flipped bit, a replaced byte, a
// truncation or appended garbage (params are picked a quarter of the time when there are any).
inline void mutate(Bytes& params, Bytes& payload, core::Rng& rng) {
  const int edits = 1 + static_cast<int>(rng.below(3));
  for (int e = 0; e < edits; ++e) {
    Bytes& target = (!params.empty() && rng.below(4) == 0) ? params : payload;
    switch (rng.below(4)) {
      case 0:
        if (!target.empty())
          target[rng.below(target.size())] ^= std::byte{static_cast<uint8_t>(1u << rng.below(8))};
        break;
      case 1:
        if (!target.empty())
          target[rng.below(target.size())] = std::byte{static_cast<uint8_t>(rng.below(256))};
        break;
      case 2:
        target.resize(rng.below(target.size() + 1));
        break;
      default:
        target.resize(target.size() + 1 + rng.below(8),
                      std::byte{static_cast<uint8_t>(rng.below(256))});
    }
  }
}

inline Bytes bytesOf(std::initializer_list<unsigned> v) {
  Bytes b;
  for (unsigned x : v) b.push_back(static_cast<std::byte>(x));
  return b;
}

inline void appendU32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

template <typename T>
void appendValue(Bytes& b, T v) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const U u = std::bit_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i) b.push_back(static_cast<std::byte>((u >> (8 * i)) & 0xff));
}

// A scaled-codes payload of two buckets: two float32 scales, then one code byte for each
// bucket (d = 3 with bucket 2 and 4-bit codes: the qsgd-family corpora's smallest frame).
inline Bytes twoBucketPayload(float scale0, float scale1, uint8_t code0, uint8_t code1) {
  Bytes p;
  appendValue<float>(p, scale0);
  appendValue<float>(p, scale1);
  p.push_back(std::byte{code0});
  p.push_back(std::byte{code1});
  return p;
}

// A sparse payload: a u32 count, the index bytes, one value of type V (a norm or a scale), then
// the codes or signs (topk_dithering's and adacomp's layout).
template <typename V>
Bytes countedPayload(uint32_t count, const Bytes& indexBytes, V value, const Bytes& tail) {
  Bytes p;
  appendU32(p, count);
  p.insert(p.end(), indexBytes.begin(), indexBytes.end());
  appendValue<V>(p, value);
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

inline CompressorSpec makeSpec(Kind kind) {
  CompressorSpec s;
  s.kind = kind;
  return s;
}
inline CompressorSpec topkSpec(uint64_t k, double ratio = 0.0) {
  CompressorSpec s = makeSpec(Kind::kTopK);
  s.k = k;
  s.ratio = ratio;
  return s;
}
inline CompressorSpec randkSpec(uint64_t k, bool scaled, double ratio = 0.0) {
  CompressorSpec s = makeSpec(Kind::kRandK);
  s.k = k;
  s.ratio = ratio;
  s.scaled = scaled;
  return s;
}
inline CompressorSpec qsgdSpec(int bits, uint64_t bucket, bool linf) {
  CompressorSpec s = makeSpec(Kind::kQsgd);
  s.bits = bits;
  s.bucket = bucket;
  s.linf = linf;
  return s;
}

template <typename T>
std::unique_ptr<Compressor<T>> make(const CompressorSpec& spec) {
  auto c = createCompressor<T>(spec);
  INFO(c.status().toString());
  REQUIRE(c.isOk());
  return std::move(c).value();
}

template <typename T>
Frame encodeWith(const Compressor<T>& c, const std::vector<T>& x, uint64_t seed = 1) {
  core::Rng rng(seed);
  Frame f;
  c.encode(x, rng, f);
  return f;
}

// Decodes from an exactly sized heap copy, so that a read past the end shows under ASan.
template <typename T>
std::vector<T> decodeOk(const Compressor<T>& c, const Frame& frame, size_t d) {
  const Frame copy(frame);
  std::vector<T> out(d, T(7));
  const core::Status st = c.decode(copy, out);
  INFO(st.toString());
  REQUIRE(st.isOk());
  return out;
}

// kCorruption, and the caller's buffer is left as it was.
template <typename T>
void requireCorrupt(const Compressor<T>& c, const Frame& frame, size_t d) {
  const Frame copy(frame);
  std::vector<T> out(d, T(7));
  const core::Status st = c.decode(copy, out);
  INFO(st.toString());
  REQUIRE(st.code() == StatusCode::kCorruption);
  REQUIRE(std::all_of(out.begin(), out.end(), [](T v) { return v == T(7); }));
}

template <typename T>
Frame craft(CodecId codec, uint64_t count, const Bytes& params, const Bytes& payload) {
  Frame f;
  writeFrame(codec, elementTypeOf<T>(), count, params, payload, f);
  return f;
}

template <typename T>
std::vector<T> normalVector(size_t d, uint64_t seed, double scale = 1.0) {
  core::Rng rng(seed);
  std::vector<T> x(d);
  for (T& v : x) v = static_cast<T>(scale * rng.normal());
  return x;
}

template <typename T>
double squaredNorm(std::span<const T> x) {
  double s = 0;
  for (T v : x) s += static_cast<double>(v) * static_cast<double>(v);
  return s;
}

template <typename T>
double squaredDistance(std::span<const T> a, std::span<const T> b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    s += e * e;
  }
  return s;
}

// Running mean and standard deviation (Welford).
struct Moments {
  uint64_t n = 0;
  double mean = 0, m2 = 0;
  void add(double v) {
    ++n;
    const double delta = v - mean;
    mean += delta / static_cast<double>(n);
    m2 += delta * (v - mean);
  }
  double sd() const { return n > 1 ? std::sqrt(m2 / static_cast<double>(n - 1)) : 0.0; }
  double standardError() const { return sd() / std::sqrt(static_cast<double>(n)); }
};

inline float loadF32(std::span<const std::byte> p, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= std::to_integer<uint32_t>(p[at + i]) << (8 * i);
  return std::bit_cast<float>(v);
}


// Every way a valid frame of `spec` for d elements can be malformed must be kCorruption: every
// truncation, the wrong element count or type, any other codec id (unassigned ones included),
// params and payload one byte longer or shorter (each with a valid CRC).
template <typename TestType>
void requireMalformedRejected(const CompressorSpec& spec, size_t d) {
  using Other = std::conditional_t<std::is_same_v<TestType, float>, double, float>;
  auto c = make<TestType>(spec);
  const auto x = normalVector<TestType>(d, 400 + d);
  const Frame f = encodeWith(*c, x);
  decodeOk(*c, f, d);
  const auto view = parseFrame(f);
  REQUIRE(view.isOk());
  const Bytes params(view->params.begin(), view->params.end());
  const Bytes payload(view->payload.begin(), view->payload.end());

  // Every truncation.
  for (size_t n = 0; n < f.size(); ++n) requireCorrupt(*c, Frame(f.begin(), f.begin() + n), d);
  // The count the receiver expects differs from the frame's.
  requireCorrupt(*c, f, d + 1);
  if (d > 0) requireCorrupt(*c, f, d - 1);
  // Another element type.
  Frame otherType;
  writeFrame(c->id(), elementTypeOf<Other>(), d, params, payload, otherType);
  requireCorrupt(*c, otherType, d);
  requireCorrupt(*make<Other>(spec), f, d);
  // Any other codec id, including ones not assigned yet.
  for (int id : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 200, 255}) {
    if (CodecId(id) == c->id()) continue;
    requireCorrupt(*c, craft<TestType>(CodecId(id), d, params, payload), d);
  }
  // Params one byte longer or shorter than the codec's.
  Bytes longer = params;
  longer.push_back(std::byte{0});
  requireCorrupt(*c, craft<TestType>(c->id(), d, longer, payload), d);
  if (!params.empty()) {
    requireCorrupt(
        *c, craft<TestType>(c->id(), d, Bytes(params.begin(), params.end() - 1), payload), d);
  }
  // Payload one byte longer or shorter than its contents imply (a valid CRC each time).
  Bytes more = payload;
  more.push_back(std::byte{0});
  requireCorrupt(*c, craft<TestType>(c->id(), d, params, more), d);
  if (!payload.empty()) {
    requireCorrupt(
        *c, craft<TestType>(c->id(), d, params, Bytes(payload.begin(), payload.end() - 1)), d);
  }
}

}  // namespace starling::compression::codec_testing

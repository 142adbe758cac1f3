// The vector paths of the 16-bit casts, sign and the bit packing (compression/codecs/dense.cc,
// bits.cc, exponential.cc) against the scalar conversions and bit-by-bit packing.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "compression/codecs/bits.h"
#include "tests/compression/codec_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;

// ---------------------------------------------------------------------------------------------
// The fp16 / bf16 codecs convert float32 in blocks with the CPU's conversion instructions where
// it has them (compression/codecs/dense.cc), and convert a block again with the reference loop
// when it holds a value the hardware treats differently. Their bytes must equal the scalar
// conversions above for every kind of value, wherever in a block it sits.

// float32 values the hardware and the format treat differently, or that sit on a boundary.
std::vector<float> halfEdgeValues() {
  std::vector<float> v;
  for (uint32_t u : {0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fbfffffu, 0x7fffffffu, 0x00000001u,
                     0x007fffffu, 0x00800000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u,
                     0x47800000u, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0x38800000u, 0x387fffffu,
                     0x387fe000u, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x00008000u, 0x00018000u}) {
    v.push_back(std::bit_cast<float>(u));
    v.push_back(std::bit_cast<float>(u | 0x80000000u));
  }
  return v;
}

TEST_CASE("fp16 and bf16 frames equal the scalar conversion in every block", "[compression][unit]") {
  const std::vector<float> edges = halfEdgeValues();
  core::Rng rng(7);
  // Blocks of 256 (the conversion block) and a tail: plain Gaussian blocks, blocks with one edge
  // value at a random place, and blocks of random bit patterns (NaNs, subnormals, huge values).
  const size_t n = 256 * 48 + 77;
  std::vector<float> x(n);
  for (size_t b = 0; b * 256 < n; ++b) {
    const size_t lo = b * 256;
    const size_t hi = std::min(n, lo + 256);
    for (size_t i = lo; i < hi; ++i) x[i] = static_cast<float>(rng.normal());
    if (b % 3 == 1) x[lo + rng.below(hi - lo)] = edges[rng.below(edges.size())];
    if (b % 3 == 2 && b % 2 == 0) {
      for (size_t i = lo; i < hi; ++i) x[i] = std::bit_cast<float>(static_cast<uint32_t>(rng.nextU64()));
    }
  }
  for (size_t i = 0; i < edges.size(); ++i) x[n - 1 - i] = edges[i];  // the tail
  for (size_t i = 0; i < edges.size(); ++i) x[256 * 5 + 3 * i] = edges[i];
  for (const bool bf16 : {false, true}) {
    CAPTURE(bf16);
    auto c = make<float>(makeSpec(bf16 ? Kind::kBf16 : Kind::kFp16));
    Frame frame;
    core::Rng r(1);
    for (const size_t len : {n, size_t{256}, size_t{255}, size_t{1000}}) {
      CAPTURE(len);
      c->encode(std::span<const float>(x.data(), len), r, frame);
      REQUIRE(frame.size() == kFrameHeaderBytes + 2 * len + kFrameTrailerBytes);
      size_t failures = 0;
      for (size_t i = 0; i < len; ++i) {
        const uint16_t got = static_cast<uint16_t>(std::to_integer<unsigned>(frame[32 + 2 * i]) |
                                                   (std::to_integer<unsigned>(frame[33 + 2 * i]) << 8));
        const double v = static_cast<double>(x[i]);
        if (got != (bf16 ? bf16FromDouble(v) : halfFromDouble(v))) ++failures;
      }
      CHECK(failures == 0);
    }
  }
}

TEST_CASE("fp16 and bf16 decode every 16-bit pattern as the scalar conversion does",
          "[compression][unit]") {
  // All 2^16 patterns, in order (blocks of 256 share their top byte: some blocks hold only
  // normal values, others subnormals or NaNs) and shuffled, plus a tail.
  std::vector<uint16_t> patterns(65536);
  std::iota(patterns.begin(), patterns.end(), uint16_t{0});
  std::vector<uint16_t> shuffled = patterns;
  core::Rng rng(9);
  for (size_t i = shuffled.size() - 1; i > 0; --i) std::swap(shuffled[i], shuffled[rng.below(i + 1)]);
  patterns.insert(patterns.end(), shuffled.begin(), shuffled.end());
  patterns.insert(patterns.end(), {0x7c01, 0x7e00, 0x0001, 0x8001, 0x03ff, 0x3c00, 0x7f81});
  for (const bool bf16 : {false, true}) {
    CAPTURE(bf16);
    auto c = make<float>(makeSpec(bf16 ? Kind::kBf16 : Kind::kFp16));
    const std::vector<float> zeros(patterns.size(), 0.0f);
    Frame frame;
    core::Rng r(1);
    c->encode(zeros, r, frame);
    for (size_t i = 0; i < patterns.size(); ++i) {
      frame[32 + 2 * i] = static_cast<std::byte>(patterns[i] & 0xff);
      frame[33 + 2 * i] = static_cast<std::byte>(patterns[i] >> 8);
    }
    sealFrame(frame);
    std::vector<float> out(patterns.size());
    REQUIRE(c->decode(frame, out).isOk());
    size_t failures = 0;
    for (size_t i = 0; i < patterns.size(); ++i) {
      const uint32_t h = patterns[i];
      uint32_t want;
      if (bf16) {
        want = h << 16;
      } else if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) {  // NaN: payload kept as is
        want = ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13);
      } else {
        want = std::bit_cast<uint32_t>(static_cast<float>(doubleFromHalf(static_cast<uint16_t>(h))));
      }
      if (std::bit_cast<uint32_t>(out[i]) != want) ++failures;
    }
    CHECK(failures == 0);
  }
}

// The lane sums behind every l2 bucket scale and sign's scale (compression/codecs/bits.cc): an
// AVX-512 path where the CPU has one, the vectorized loops elsewhere. Both must give the bits of
// this reference (element i into lane i mod 32, then lane j + w into lane j for w = 16 ... 1),
// and the interval they return must hold the serial sum, which decides the frame's scale.
double referenceLaneSum(const std::vector<float>& x, bool squares) {
  double acc[32] = {};
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    acc[i % 32] += squares ? v * v : std::fabs(v);
  }
  for (size_t w = 16; w >= 1; w /= 2) {
    for (size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
}

TEST_CASE("lane sums equal the 32-lane reference in every path and bound the serial sum",
          "[compression][unit]") {
  using codecs::LaneSum;
  core::Rng rng(23);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 70; ++n) lengths.push_back(n);
  for (size_t n : {511, 512, 513, 1000, 4096 + 17}) lengths.push_back(n);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(), -0.0f};
  size_t failures = 0;
  for (size_t n : lengths) {
    for (int kind = 0; kind < 3; ++kind) {
      CAPTURE(n, kind);
      std::vector<float> x(n);
      // Gaussian values at one scale, at scales spread over 2^-60 .. 2^60, or with a special one.
      for (float& v : x) {
        v = static_cast<float>(rng.normal() * (kind == 1 ? std::ldexp(1.0, static_cast<int>(
                                                                              rng.uniform() * 120) -
                                                                              60)
                                                         : 1.0));
      }
      if (kind == 2 && n > 0) x[static_cast<size_t>(rng.uniform() * n)] = specials[n % 5];
      for (bool squares : {true, false}) {
        const double want = referenceLaneSum(x, squares);
        double serial = 0.0;
        for (float v : x) serial += squares ? double{v} * double{v} : std::fabs(double{v});
        const LaneSum fast = squares ? codecs::laneSumSquares(x.data(), n)
                                     : codecs::laneSumAbs(x.data(), n);
        const LaneSum portable = squares ? codecs::laneSumSquaresPortable(x.data(), n)
                                         : codecs::laneSumAbsPortable(x.data(), n);
        for (const LaneSum& s : {fast, portable}) {
          const bool same = std::isnan(want) ? std::isnan(s.sum)
                                             : std::bit_cast<uint64_t>(s.sum) ==
                                                   std::bit_cast<uint64_t>(want);
          if (!same) ++failures;
          if (std::isfinite(serial) && !(s.lo <= serial && serial <= s.hi)) ++failures;
        }
        if (std::bit_cast<uint64_t>(fast.lo) != std::bit_cast<uint64_t>(portable.lo) &&
            !std::isnan(fast.lo)) {
          ++failures;
        }
      }
    }
  }
  CHECK(failures == 0);
}

// qsgd's 4-bit payloads of many buckets and sizes (the golden frames hold only a few elements),
// byte for byte against a reference that follows the format alone: serial l2 scale rounded up,
// R = round(|x| k) in float32, the 16-bit uniforms of UniformBits in fill's order with a chunk
// of 512 taking whole steps of 32, codes packed low bits first. It pins what any faster encode
// must keep.
std::vector<std::byte> referenceQsgd4(const std::vector<float>& x, uint64_t bucket, uint64_t seed) {
  constexpr uint32_t s = 7, signBit = 8;
  const uint64_t buckets = (x.size() + bucket - 1) / bucket;
  std::vector<std::byte> out(4 * buckets + (x.size() * 4 + 7) / 8, std::byte{0});
  codecs::UniformBits gen(seed);
  for (uint64_t b = 0; b < buckets; ++b) {
    const size_t first = b * bucket, size = std::min<size_t>(bucket, x.size() - first);
    double sum = 0.0;
    for (size_t i = 0; i < size; ++i) sum += double{x[first + i]} * double{x[first + i]};
    const float scale = codecs::roundUpToFloat(std::sqrt(sum));
    std::memcpy(out.data() + 4 * b, &scale, 4);  // little-endian host
    const bool quantize = std::isfinite(scale) && scale > 0.0f;
    const auto k = static_cast<float>(double{s} * 0x1p16 / double{scale});
    for (size_t lo = 0; lo < size; lo += 512) {
      const size_t n = std::min<size_t>(512, size - lo);
      std::vector<uint64_t> words((n + 31) / 32 * 8);
      if (quantize) gen.fill(words.data(), words.size());
      for (size_t i = 0; i < n; ++i) {
        const float v = x[first + lo + i];
        uint32_t code = 0;
        if (quantize) {
          const auto u = static_cast<uint32_t>((words[i / 4] >> (16 * (i % 4))) & 0xffff);
          // Rounded on its own, as the format says (no fused multiply-add).
          const volatile float product = std::fabs(v) * k;
          const auto r = static_cast<uint32_t>(static_cast<int32_t>(product + 0.5f));
          const uint32_t level = (std::min(r, s << 16) + u) >> 16;
          code = level | (v < 0.0f && level != 0 ? signBit : 0u);
        }
        const size_t at = first + lo + i;
        out[4 * buckets + at / 2] |= std::byte(code << (4 * (at % 2)));
      }
    }
  }
  return out;
}

TEST_CASE("qsgd's 4-bit payloads equal a reference written from the format",
          "[compression][unit]") {
  codecs::ScaledCodes q;
  q.levels = codecs::LevelSet::kUniform;
  q.s = 7;
  q.levelBits = 3;
  core::Rng data(31);
  // Buckets of whole steps, with a remainder, shorter than a step, of odd size (so that a bucket
  // starts mid-byte), and one of zeros; values over many magnitudes, exact levels included.
  for (const uint64_t bucket : {512u, 100u, 33u, 31u, 32u, 1000u}) {
    for (const size_t d : {size_t{0}, size_t{31}, size_t{64}, size_t{1000}, size_t{5000}}) {
      CAPTURE(bucket, d);
      std::vector<float> x(d);
      for (size_t i = 0; i < d; ++i) {
        x[i] = static_cast<float>(data.normal() * std::ldexp(1.0, static_cast<int>(i % 7) * 3 - 9));
      }
      for (size_t i = 0; i < std::min<size_t>(d, bucket); ++i) x[i] = 0.0f;  // a bucket of zeros
      for (size_t i = bucket; i < d; i += 13) x[i] = (i % 2 ? -1.0f : 1.0f);  // exact levels
      q.bucket = bucket;
      const uint64_t seed = data.nextU64();
      core::Rng rng(seed);
      const uint64_t generatorSeed = core::Rng(seed).nextU64();
      std::vector<std::byte> got(q.payloadBytes(d), std::byte{0x5a});
      codecs::encodeScaledCodes<float>(x, q, rng, got.data());
      CHECK(got == referenceQsgd4(x, bucket, generatorSeed));
    }
  }
}

TEST_CASE("sign frames hold x < 0 for every element, in vector and scalar paths",
          "[compression][unit]") {
  // The sign bits are built and expanded 16 at a time where the CPU has AVX-512
  // (compression/codecs/quantize.cc): -0, NaNs and tails of every length must come out as the
  // element-by-element rule says.
  core::Rng rng(11);
  auto c = make<float>(makeSpec(Kind::kSign));
  for (const size_t d : {size_t{1}, size_t{8}, size_t{15}, size_t{16}, size_t{17}, size_t{24},
                         size_t{1000}, size_t{4104}}) {
    CAPTURE(d);
    std::vector<float> x(d);
    for (float& v : x) v = static_cast<float>(rng.normal());
    for (size_t i = 0; i < d; i += 7) x[i] = -0.0f;
    for (size_t i = 3; i < d; i += 11) x[i] = -std::numeric_limits<float>::quiet_NaN();
    Frame frame;
    c->encode(x, rng, frame);
    const size_t bitsAt = kFrameHeaderBytes + 4;
    size_t failures = 0;
    for (size_t i = 0; i < d; ++i) {
      const bool bit = ((std::to_integer<unsigned>(frame[bitsAt + i / 8]) >> (i % 8)) & 1) != 0;
      if (bit != (x[i] < 0.0f)) ++failures;
    }
    CHECK(failures == 0);
    // Decode a frame with these bits and a finite scale: each value is +-scale by its bit.
    for (size_t i = 0; i < 4; ++i) frame[kFrameHeaderBytes + i] = std::byte{0};
    frame[kFrameHeaderBytes + 3] = std::byte{0x3f};  // scale 0.5
    sealFrame(frame);
    std::vector<float> out(d);
    REQUIRE(c->decode(frame, out).isOk());
    failures = 0;
    for (size_t i = 0; i < d; ++i) {
      if (std::bit_cast<uint32_t>(out[i]) != (x[i] < 0.0f ? 0xbf000000u : 0x3f000000u)) ++failures;
    }
    CHECK(failures == 0);
  }
}

TEST_CASE("natural packs powers of two into 9-bit codes at every place of a group",
          "[compression][unit]") {
  // Codes are packed and unpacked 32 at a time where the CPU has AVX-512 VBMI
  // (compression/codecs/exponential.cc). Powers of two and zero have deterministic codes, so the
  // payload can be checked bit by bit and the round trip is exact.
  core::Rng rng(13);
  auto c = make<float>(makeSpec(Kind::kNatural));
  for (const size_t d : {size_t{8}, size_t{31}, size_t{32}, size_t{33}, size_t{520}, size_t{1037}}) {
    CAPTURE(d);
    std::vector<float> x(d);
    std::vector<uint32_t> code(d);
    for (size_t i = 0; i < d; ++i) {
      const int e = static_cast<int>(rng.below(254)) - 126;  // 2^-126 .. 2^127
      const bool negative = rng.below(2) == 1;
      const bool zero = rng.below(9) == 0;
      x[i] = zero ? 0.0f : (negative ? -1.0f : 1.0f) * std::ldexp(1.0f, e);
      code[i] = zero ? 0u : static_cast<uint32_t>(e + 127) | (negative ? 0x100u : 0u);
    }
    Frame frame;
    c->encode(x, rng, frame);
    REQUIRE(frame.size() == kFrameHeaderBytes + (9 * d + 7) / 8 + kFrameTrailerBytes);
    size_t failures = 0;
    for (size_t i = 0; i < d; ++i) {
      uint32_t got = 0;
      for (size_t b = 0; b < 9; ++b) {
        const size_t bit = 9 * i + b;
        got |= ((std::to_integer<uint32_t>(frame[kFrameHeaderBytes + bit / 8]) >> (bit % 8)) & 1u) << b;
      }
      if (got != code[i]) ++failures;
    }
    CHECK(failures == 0);
    std::vector<float> out(d);
    REQUIRE(c->decode(frame, out).isOk());
    failures = 0;
    for (size_t i = 0; i < d; ++i) {
      if (std::bit_cast<uint32_t>(out[i]) != std::bit_cast<uint32_t>(x[i])) ++failures;
    }
    CHECK(failures == 0);
  }
}

TEST_CASE("packCodes and unpackCodes equal bit-by-bit packing for every width and offset",
          "[compression][unit]") {
  // Whole groups of 64 codes go through AVX-512 VBMI permutations where the CPU has them
  // (compression/codecs/bits.cc); the rest, and unaligned starts, through the scalar loops.
  core::Rng rng(17);
  for (int width = 1; width <= 8; ++width) {
    CAPTURE(width);
    const size_t n = 64 * 9 + 8 * 3 + 5;
    std::vector<uint8_t> codes(n);
    for (uint8_t& c : codes) c = static_cast<uint8_t>(rng.below(uint64_t{1} << width));
    // A BitWriter that starts aligned, and one that starts 3 codes in (not aligned for odd widths).
    for (const size_t lead : {size_t{0}, size_t{3}}) {
      CAPTURE(lead);
      std::vector<std::byte> packed((n * width + 7) / 8 + 8, std::byte{0xa5});
      codecs::BitWriter w(packed.data());
      codecs::packCodes(codes.data(), lead, width, w);
      codecs::packCodes(codes.data() + lead, n - lead, width, w);
      w.flush();
      size_t failures = 0;
      for (size_t i = 0; i < n * width; ++i) {
        const unsigned got = (std::to_integer<unsigned>(packed[i / 8]) >> (i % 8)) & 1u;
        if (got != ((codes[i / width] >> (i % width)) & 1u)) ++failures;
      }
      CHECK(failures == 0);
      for (size_t i = (n * width + 7) / 8; i < packed.size(); ++i) {
        if (packed[i] != std::byte{0xa5}) ++failures;  // nothing written past the codes
      }
      CHECK(failures == 0);
      for (const uint64_t first : {uint64_t{0}, uint64_t{8}, uint64_t{64}, uint64_t{1}, uint64_t{5}}) {
        CAPTURE(first);
        std::vector<uint8_t> back(n - first, 0xff);
        codecs::unpackCodes(packed.data(), first, n - first, width, back.data());
        failures = 0;
        for (size_t i = 0; i < back.size(); ++i) failures += back[i] != codes[first + i];
        CHECK(failures == 0);
      }
    }
  }
}

}  // namespace
}  // namespace starling::compression

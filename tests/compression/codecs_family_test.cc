// The exponential-level and adaptive codecs (nuqsgd, natural, natural_dithering, topk_dithering,
// adacomp, dqsgd): round trips, golden frames, statistics against the papers' bounds, stream
// rules and corruption corpora (docs/wire_format.md, docs/compression_rules.md).
#include <bit>
#include <iomanip>
#include <iostream>

#include "tests/compression/codec_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;

CompressorSpec nuqsgdSpec(int bits, uint64_t bucket) {
  CompressorSpec s = makeSpec(Kind::kNuqsgd);
  s.bits = bits;
  s.bucket = bucket;
  return s;
}
CompressorSpec ditheringSpec(int levels, bool linf) {
  CompressorSpec s = makeSpec(Kind::kNaturalDithering);
  s.levels = levels;
  s.linf = linf;
  return s;
}
CompressorSpec topkDitheringSpec(uint64_t k, int levels, double ratio = 0.0) {
  CompressorSpec s = makeSpec(Kind::kTopKDithering);
  s.k = k;
  s.ratio = ratio;
  s.levels = levels;
  return s;
}
CompressorSpec adacompSpec(uint64_t bin) {
  CompressorSpec s = makeSpec(Kind::kAdaComp);
  s.bin = bin;
  return s;
}
CompressorSpec dqsgdSpec(int minBits, int maxBits, double target, uint64_t bucket) {
  CompressorSpec s = makeSpec(Kind::kDqsgd);
  s.minBits = minBits;
  s.maxBits = maxBits;
  s.target = target;
  s.bucket = bucket;
  return s;
}

const CompressorSpec kFamily[] = {
    nuqsgdSpec(2, 4),        nuqsgdSpec(4, 512),           makeSpec(Kind::kNatural),
    ditheringSpec(1, false), ditheringSpec(5, true),       ditheringSpec(30, false),
    topkDitheringSpec(3, 4), topkDitheringSpec(0, 2, 0.3), adacompSpec(4),
    adacompSpec(500),        dqsgdSpec(2, 8, 0.1, 5),      dqsgdSpec(3, 3, 1.0, 512),
};

// The magnitude levels, relative to the scale, of an exponential level set with s nonzero levels.
std::vector<double> exponentialLevels(int s) {
  std::vector<double> levels = {0.0};
  for (int j = 1; j <= s; ++j) levels.push_back(std::ldexp(1.0, j - s));
  return levels;
}

// The variance of rounding r in [0, 1] without bias onto `levels` (sorted, 0 and 1 included).
double roundingVariance(const std::vector<double>& levels, double r) {
  for (size_t j = 1; j < levels.size(); ++j) {
    if (r <= levels[j]) return (levels[j] - r) * (r - levels[j - 1]);
  }
  return 0.0;
}

// The gap between the two levels around r.
double roundingStep(const std::vector<double>& levels, double r) {
  for (size_t j = 1; j < levels.size(); ++j) {
    if (r <= levels[j]) return levels[j] - levels[j - 1];
  }
  return 0.0;
}

// The smallest float32 >= v: how the codecs store a norm.
double roundUpToFloat(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) < v) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

// zeta of natural dithering on n elements with s levels (ALGORITHMS.md §8, r = 2).
double zeta(size_t n, int s) {
  const double a = std::sqrt(double(n)) * std::ldexp(1.0, 1 - s);
  return 9.0 / 8 + a * std::min(1.0, a);
}

uint64_t varintBytes(uint64_t v) {
  uint64_t n = 1;
  for (; v >= 128; v >>= 7) ++n;
  return n;
}

// Bytes of LEB128 gaps for the nonzero positions of y.
template <typename T>
uint64_t gapBytes(const std::vector<T>& y, size_t* count = nullptr) {
  uint64_t bytes = 0, previous = 0, kept = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) continue;
    bytes += varintBytes(kept++ == 0 ? i : i - previous);
    previous = i;
  }
  if (count != nullptr) *count = kept;
  return bytes;
}

// ---------------------------------------------------------------------------------------------
// Construction

TEST_CASE("createCompressor builds the exponential and adaptive codecs", "[compression][unit]") {
  struct Case {
    CompressorSpec spec;
    CodecId id;
    bool unbiased;
    const char* name;
  };
  const Case cases[] = {
      {nuqsgdSpec(4, 512), CodecId::kNuqsgd, true, "nuqsgd"},
      {makeSpec(Kind::kNatural), CodecId::kNatural, true, "natural"},
      {ditheringSpec(4, false), CodecId::kNaturalDithering, true, "natural_dithering"},
      {topkDitheringSpec(3, 4), CodecId::kTopKDithering, false, "topk_dithering"},
      {adacompSpec(50), CodecId::kAdaComp, false, "adacomp"},
      {dqsgdSpec(2, 8, 0.1, 512), CodecId::kDqsgd, true, "dqsgd"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CHECK(std::string(compressorKindName(c.spec.kind)) == c.name);
    auto f = make<float>(c.spec);
    auto d = make<double>(c.spec);
    CHECK(f->id() == c.id);
    CHECK(d->id() == c.id);
    CHECK(f->unbiased() == c.unbiased);
    CHECK(d->unbiased() == c.unbiased);
    const bool stateful = c.id == CodecId::kAdaComp || c.id == CodecId::kDqsgd;
    CHECK((f->newState(10) != nullptr) == stateful);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CompressorSpec withFeedback = adacompSpec(50);
  withFeedback.errorFeedback = true;
  const CompressorSpec bad[] = {
      nuqsgdSpec(1, 512),
      nuqsgdSpec(9, 512),
      nuqsgdSpec(4, 0),
      ditheringSpec(0, false),
      ditheringSpec(31, true),
      topkDitheringSpec(3, 0),
      topkDitheringSpec(0, 4, 0.0),
      adacompSpec(0),
      adacompSpec(uint64_t{1} << 32),
      dqsgdSpec(1, 8, 0.1, 512),
      dqsgdSpec(4, 3, 0.1, 512),
      dqsgdSpec(2, 9, 0.1, 512),
      dqsgdSpec(2, 8, 0.0, 512),
      dqsgdSpec(2, 8, -1.0, 512),
      dqsgdSpec(2, 8, nan, 512),
      dqsgdSpec(2, 8, 0.1, 0),
      withFeedback,
  };
  for (const CompressorSpec& s : bad) {
    CAPTURE(compressorKindName(s.kind), s.bits, s.levels, s.bin, s.minBits, s.maxBits, s.target);
    CHECK(createCompressor<float>(s).status().code() == StatusCode::kInvalidArgument);
    CHECK(createCompressor<double>(s).status().code() == StatusCode::kInvalidArgument);
  }
}

// ---------------------------------------------------------------------------------------------
// Round trips

const size_t kSizes[] = {0, 1, 2, 7, 8, 9, 33, 1001};

TEMPLATE_TEST_CASE("every family codec round trips at every size, deterministically",
                   "[compression][unit]", float, double) {
  for (const CompressorSpec& spec : kFamily) {
    for (size_t d : kSizes) {
      CAPTURE(compressorKindName(spec.kind), spec.bits, spec.levels, spec.k, d);
      auto c = make<TestType>(spec);
      const auto x = normalVector<TestType>(d, 40 + d);
      const Frame f = encodeWith(*c, x, 5);
      CHECK(f == encodeWith(*c, x, 5));
      const auto y = decodeOk(*c, f, d);
      CHECK(std::all_of(y.begin(), y.end(), [](TestType v) { return std::isfinite(v); }));
      // encode() is the first frame of a fresh stream, and a null state is a fresh stream.
      auto state = c->newState(d);
      core::Rng rng(5);
      Frame g;
      c->encodeStream(x, rng, StreamContext{0, 0, state.get()}, g);
      CHECK(g == f);
      core::Rng rng2(5);
      c->encodeStream(x, rng2, StreamContext{}, g);
      CHECK(g == f);
      // Reusing the output buffer replaces its contents.
      Frame reused(1000, std::byte{0xee});
      core::Rng rng3(5);
      c->encode(x, rng3, reused);
      CHECK(reused == f);
    }
  }
}

// Checks that y[lo, hi) lies on the exponential grid of `scale` with s levels (divided by
// `divisor`), on one of the two levels around |x_i| / scale, with x_i's sign.
template <typename T>
void requireExponentialGrid(const std::vector<T>& x, const std::vector<T>& y, size_t lo, size_t hi,
                            double scale, int s, double divisor = 1.0) {
  const auto levels = exponentialLevels(s);
  for (size_t i = lo; i < hi; ++i) {
    const double r = std::abs(static_cast<double>(x[i])) / scale;
    const double ratio = std::abs(static_cast<double>(y[i])) * divisor / scale;
    const int l = ratio == 0 ? 0 : static_cast<int>(std::lround(std::log2(ratio))) + s;
    CAPTURE(i, x[i], y[i], scale, r, ratio, l);
    REQUIRE((l >= 0 && l <= s));
    REQUIRE(std::abs(ratio - levels[l]) <= 1e-6 * levels[l]);  // float32 output rounding
    REQUIRE(r <= 1.0);
    const size_t above = std::lower_bound(levels.begin(), levels.end(), r) - levels.begin();
    const size_t below = levels[above] == r ? above : above - 1;
    REQUIRE((size_t(l) == above || size_t(l) == below));
    if (y[i] != 0) REQUIRE((y[i] < 0) == (x[i] < 0));
  }
}

TEMPLATE_TEST_CASE("nuqsgd decodes onto its exponential levels, one level from x",
                   "[compression][unit]", float, double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  const int bits = GENERATE(2, 3, 4, 8);
  const uint64_t bucket = GENERATE(uint64_t{1}, uint64_t{5}, uint64_t{512});
  CAPTURE(d, bits, bucket);
  auto c = make<TestType>(nuqsgdSpec(bits, bucket));
  const auto x = normalVector<TestType>(d, 61 + d);
  const Frame f = encodeWith(*c, x);
  const auto y = decodeOk(*c, f, d);
  const auto view = parseFrame(f);
  REQUIRE(view.isOk());
  REQUIRE(view->payload.size() == 4 * ((d + bucket - 1) / bucket) + (d * bits + 7) / 8);
  for (size_t lo = 0; lo < d; lo += bucket) {
    const size_t hi = std::min<size_t>(d, lo + bucket);
    const double scale = loadF32(view->payload, 4 * (lo / bucket));
    const double norm = std::sqrt(squaredNorm<TestType>(std::span(x).subspan(lo, hi - lo)));
    REQUIRE(scale >= norm * (1 - 1e-15));
    REQUIRE(scale <= norm * (1 + 0x1p-23));
    requireExponentialGrid(x, y, lo, hi, scale, (1 << (bits - 1)) - 1);
  }
}

TEMPLATE_TEST_CASE("natural decodes to the powers of two around each element",
                   "[compression][unit]", float, double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  auto c = make<TestType>(makeSpec(Kind::kNatural));
  auto x = normalVector<TestType>(d, 71 + d, 1e3);
  for (size_t i = 0; i < d; i += 3) x[i] = static_cast<TestType>(x[i] * 1e-9);
  const Frame f = encodeWith(*c, x);
  REQUIRE(f.size() == 36 + (9 * d + 7) / 8);
  const auto y = decodeOk(*c, f, d);
  for (size_t i = 0; i < d; ++i) {
    const double a = std::abs(static_cast<double>(x[i]));
    const double b = std::abs(static_cast<double>(y[i]));
    CAPTURE(i, x[i], y[i]);
    int e;
    REQUIRE(std::frexp(b, &e) == 0.5);  // a power of two
    REQUIRE(b >= std::exp2(std::floor(std::log2(a))));
    REQUIRE(b <= std::exp2(std::ceil(std::log2(a))));
    REQUIRE((y[i] < 0) == (x[i] < 0));
  }
}

TEST_CASE("natural covers 2^-126 .. 2^127 and rounds below it between 0 and 2^-126",
          "[compression][unit]") {
  auto c = make<double>(makeSpec(Kind::kNatural));
  const double tiny = std::ldexp(1.0, -126);
  // Exact powers decode exactly, with no rounding draw mattering.
  for (uint64_t seed = 1; seed < 5; ++seed) {
    const std::vector<double> x = {tiny, -std::ldexp(1.0, 127), 1.0, 0.0, -0.0, -tiny};
    CHECK(decodeOk(*c, encodeWith(*c, x, seed), x.size()) ==
          std::vector<double>{tiny, -std::ldexp(1.0, 127), 1.0, 0.0, 0.0, -tiny});
  }
  // Below the smallest power: 0 or +-2^-126, in proportion.
  const std::vector<double> x = {tiny / 4, -tiny / 2, 1e-300, std::ldexp(1.0, -1000)};
  std::vector<Moments> m(x.size());
  core::Rng rng(3);
  Frame f;
  std::vector<double> y(x.size());
  for (int t = 0; t < 20000; ++t) {
    c->encode(x, rng, f);
    REQUIRE(c->decode(f, y).isOk());
    for (size_t i = 0; i < x.size(); ++i) {
      REQUIRE((y[i] == 0 || std::abs(y[i]) == tiny));
      m[i].add(y[i] / tiny);
    }
  }
  for (size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i, m[i].mean);
    const double p = std::abs(x[i]) / tiny;
    CHECK(std::abs(m[i].mean - x[i] / tiny) <= 5 * std::sqrt(p * (1 - p) / 20000) + 1e-12);
  }
  // Above 2^127 there is no code: the frame is rejected, as for NaN and infinity.
  requireCorrupt(*c, encodeWith(*c, std::vector<double>{1.0, std::ldexp(1.5, 127)}), 2);
  requireCorrupt(*c, encodeWith(*c, std::vector<double>{1e300}), 1);
}

TEMPLATE_TEST_CASE("natural dithering decodes onto its levels of the norm", "[compression][unit]",
                   float, double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  const int s = GENERATE(1, 2, 3, 4, 8, 30);
  const bool linf = GENERATE(false, true);
  CAPTURE(d, s, linf);
  auto c = make<TestType>(ditheringSpec(s, linf));
  const auto x = normalVector<TestType>(d, 81 + d);
  const Frame f = encodeWith(*c, x);
  const auto view = parseFrame(f);
  REQUIRE(view.isOk());
  const size_t codeBits = std::bit_width(unsigned(s)) + 1;
  REQUIRE(view->payload.size() == 4 + (d * codeBits + 7) / 8);
  const auto y = decodeOk(*c, f, d);
  double norm = 0;
  for (TestType v : x) {
    norm = linf ? std::max(norm, std::abs(double(v))) : norm + double(v) * double(v);
  }
  if (!linf) norm = std::sqrt(norm);
  const double scale = loadF32(view->payload, 0);
  REQUIRE(scale >= norm * (1 - 1e-15));
  REQUIRE(scale <= norm * (1 + 0x1p-23));
  if (d > 0) requireExponentialGrid(x, y, 0, d, scale, s);
}

TEMPLATE_TEST_CASE("topk dithering keeps the k largest and dithers them, scaled by 1/zeta_k",
                   "[compression][unit]", float, double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  const uint64_t k = GENERATE(uint64_t{1}, uint64_t{3}, uint64_t{10}, uint64_t{5000});
  const int s = GENERATE(1, 4, 8);
  CAPTURE(d, k, s);
  auto c = make<TestType>(topkDitheringSpec(k, s));
  const auto x = normalVector<TestType>(d, 91 + d);
  const Frame f = encodeWith(*c, x);
  const auto y = decodeOk(*c, f, d);
  const size_t kept = std::min<size_t>(k, d);
  // The support is within top-k's (a dithered value may be 0).
  auto topk = make<TestType>(topkSpec(k));
  const auto t = decodeOk(*topk, encodeWith(*topk, x), d);
  for (size_t i = 0; i < d; ++i) {
    if (t[i] == 0) REQUIRE(y[i] == 0);
  }
  const auto view = parseFrame(f);
  REQUIRE(view.isOk());
  // u32 k | gaps | norm | codes: the gaps of top-k's support.
  size_t count = 0;
  const uint64_t gaps = gapBytes(t, &count);
  REQUIRE(count == kept);
  const size_t codeBits = std::bit_width(unsigned(s)) + 1;
  REQUIRE(view->payload.size() == 4 + gaps + 4 + (kept * codeBits + 7) / 8);
  if (d == 0) return;
  const double scale = loadF32(view->payload, 4 + gaps);
  const double norm = std::sqrt(squaredNorm<TestType>(t));
  REQUIRE(scale >= norm * (1 - 1e-15));
  REQUIRE(scale <= norm * (1 + 0x1p-23));
  requireExponentialGrid(t, y, 0, d, scale, s, zeta(kept, s));
}

// ---------------------------------------------------------------------------------------------
// Golden frames: written by hand from docs/wire_format.md; the CRC32C computed. Every element is
// an exact level, so no rounding draw matters.

TEST_CASE("golden frames of the exponential and adaptive codecs", "[compression][unit]") {
  SECTION("nuqsgd 3 bits bucket 4 float32 {2, -2, 2, 2, -1, 0}: levels 1/2 | 1 of s = 3") {
    auto c = make<float>(nuqsgdSpec(3, 4));
    // params: bits 3, bucket 4 (P = 5) | scales 4.0f, 1.0f | codes 2, 4|2, 2, 2, 4|3, 0 (3 bits)
    const Frame expected = sealed(
        "53 54 52 4c 01 07 01 00  06 00 00 00 00 00 00 00  05 00 00 00 00 00 00 00"
        "0b 00 00 00 00 00 00 00  03 04 00 00 00 00 00 00"
        "00 00 80 40 00 00 80 3f  b2 74 00");
    const std::vector<float> x = {2, -2, 2, 2, -1, 0};
    for (uint64_t seed = 1; seed < 4; ++seed) {
      CHECK(toHex(encodeWith(*c, x, seed)) == toHex(expected));
    }
    CHECK(decodeOk(*c, expected, 6) == x);
    // Level 1 is 2^(1-s) = 1/4 of the scale 8: codes 1, 4|1, 0 -> 0x0029 (9 bits, 2 bytes).
    const Frame lowest = sealed(
        "53 54 52 4c 01 07 02 00  03 00 00 00 00 00 00 00  05 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  03 04 00 00 00 00 00 00  00 00 00 41 29 00");
    CHECK(decodeOk(*make<double>(nuqsgdSpec(3, 4)), lowest, 3) == std::vector<double>{2, -2, 0});
  }
  SECTION("natural float32 {1, -2, 1/4, 0, 2^-126, 2^127}") {
    auto c = make<float>(makeSpec(Kind::kNatural));
    // 9-bit codes E | sign << 8: 127, 256|128, 125, 0, 1, 254
    const Frame expected = sealed(
        "53 54 52 4c 01 08 01 00  06 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "07 00 00 00 00 00 00 00  7f 00 f7 01 10 c0 1f");
    const std::vector<float> x = {1, -2, 0.25f, 0, std::ldexp(1.0f, -126), std::ldexp(1.0f, 127)};
    for (uint64_t seed = 1; seed < 4; ++seed) {
      CHECK(toHex(encodeWith(*c, x, seed)) == toHex(expected));
    }
    CHECK(decodeOk(*c, expected, 6) == x);
  }
  SECTION("natural dithering s = 2 l2 float32 {2, -2, 2, 2, 0}: level 1 = 1/2 of the norm 4") {
    auto c = make<float>(ditheringSpec(2, false));
    // params: levels 2, l2 | norm 4.0f | 3-bit codes 1, 4|1, 1, 1, 0
    const Frame expected = sealed(
        "53 54 52 4c 01 09 01 00  05 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00  00 00 80 40 69 02");
    CHECK(toHex(encodeWith(*c, std::vector<float>{2, -2, 2, 2, 0})) == toHex(expected));
  }
  SECTION("natural dithering s = 3 linf float64 {4, -1, 2, 0}: levels 3, 1, 2, 0 of s = 3") {
    auto c = make<double>(ditheringSpec(3, true));
    // params: levels 3, linf | norm 4.0f | 3-bit codes 3, 4|1, 2, 0
    const Frame expected = sealed(
        "53 54 52 4c 01 09 02 00  04 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  03 01 00 00 00 00 00 00  00 00 80 40 ab 00");
    CHECK(toHex(encodeWith(*c, std::vector<double>{4, -1, 2, 0})) == toHex(expected));
    CHECK(decodeOk(*c, expected, 4) == std::vector<double>{4, -1, 2, 0});
  }
  SECTION("topk dithering k = 4 s = 2 float64 {1/2, -2, 2, 0, 2, 2, 1}") {
    auto c = make<double>(topkDitheringSpec(4, 2));
    // params: levels 2 | count 4 | index 1, gaps 1 2 1 | norm 4.0f | 3-bit codes 4|1, 1, 1, 1
    const Frame expected = sealed(
        "53 54 52 4c 01 0a 02 00  07 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00"
        "0e 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00"
        "04 00 00 00 01 01 02 01  00 00 80 40 4d 02");
    const std::vector<double> x = {0.5, -2, 2, 0, 2, 2, 1};
    CHECK(toHex(encodeWith(*c, x)) == toHex(expected));
    // zeta_4 = 9/8 + sqrt(4) 2^-1 min(1, 1) = 17/8: each kept value is +-4 * 1/2 * 8/17.
    const double v = 2.0 / (17.0 / 8);
    CHECK(decodeOk(*c, expected, 7) == std::vector<double>{0, -v, v, 0, v, v, 0});
  }
  SECTION("adacomp bin 2 float32 {1, -3, 1/2, 1/4, 0, 2}, fresh residue") {
    auto c = make<float>(adacompSpec(2));
    // G = x, H = 2x. Bin maxima 3, 1/2, 2: sent 1 (|H| 6), 2 (1), 3 (1/2), 5 (4); not 0 (2 < 3),
    // nor 4 (G = 0). Scale (3 + 1/2 + 1/4 + 2) / 4 = 1.4375.
    // count 4 | index 1, gaps 1 1 2 | scale 1.4375f | signs: the first one negative
    const Frame expected = sealed(
        "53 54 52 4c 01 0c 01 00  06 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "0d 00 00 00 00 00 00 00  04 00 00 00 01 01 01 02  00 00 b8 3f 01");
    CHECK(toHex(encodeWith(*c, std::vector<float>{1, -3, 0.5f, 0.25f, 0, 2})) == toHex(expected));
    CHECK(decodeOk(*c, expected, 6) ==
          std::vector<float>{0, -1.4375f, 1.4375f, 1.4375f, 0, 1.4375f});
  }
  SECTION("dqsgd target 0.05 float32 {3, -4, 0}: 5 bits, the qsgd payload") {
    auto c = make<float>(dqsgdSpec(2, 8, 0.05, 512));
    // B = 3: eps(s) = min(3/s^2, sqrt(3)/s) is 1.73, 0.333, 0.0612 (> 0.05) and 0.0133 for
    // s = 1, 3, 7, 15: 5 bits. params: bits 5, l2, bucket 512 | scale 5.0f | 9, 16|12, 0
    const Frame expected = sealed(
        "53 54 52 4c 01 0d 01 00  03 00 00 00 00 00 00 00  06 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  05 00 00 02 00 00 00 00  00 00 a0 40 89 03");
    CHECK(toHex(encodeWith(*c, std::vector<float>{3, -4, 0})) == toHex(expected));
    CHECK(decodeOk(*c, expected, 3) == std::vector<float>{3, -4, 0});
  }
}

// ---------------------------------------------------------------------------------------------
// Statistics (fixed seeds; tolerances of 5 standard errors estimated from the draws)

constexpr int kDraws = 20000;

// Draws kDraws frames of x; per element moments of the decoded values and the moments of the
// squared error ||y - x||^2 over [lo, hi) ranges given by `bucket`.
template <typename T>
struct Sampled {
  std::vector<Moments> value;
  std::vector<Moments> err;  // per bucket
  Frame last;
};

template <typename T>
Sampled<T> sample(const Compressor<T>& c, const std::vector<T>& x, size_t bucket, uint64_t seed,
                  int draws = kDraws) {
  const size_t d = x.size();
  const size_t buckets = (d + bucket - 1) / bucket;
  Sampled<T> out{std::vector<Moments>(d), std::vector<Moments>(buckets), {}};
  core::Rng rng(seed);
  std::vector<T> y(d);
  for (int t = 0; t < draws; ++t) {
    c.encode(x, rng, out.last);
    REQUIRE(c.decode(out.last, y).isOk());
    for (size_t i = 0; i < d; ++i) out.value[i].add(y[i]);
    for (size_t b = 0; b < buckets; ++b) {
      const size_t lo = b * bucket, n = std::min(bucket, d - lo);
      out.err[b].add(squaredDistance<T>(std::span(y).subspan(lo, n), std::span(x).subspan(lo, n)));
    }
  }
  return out;
}

// The mean of an element's decoded values is within 5 standard errors of x. `step` is the gap
// between the two levels around x: a rare rounding that never happened leaves a sample deviation
// of 0, and one rounding event's deviation, step / sqrt(N), is the floor.
void requireUnbiasedAt(const Moments& m, double x, double step) {
  const double n = double(m.n);
  const double sigma = std::max(m.sd(), step / std::sqrt(n));
  CAPTURE(x, m.mean, sigma, step);
  CHECK(std::abs(m.mean - x) <= 5 * sigma / std::sqrt(n));
}

// Measured ratios, reported by the hidden test case "[report]".
struct Measured {
  std::string what;
  double measured, bound;
};
std::vector<Measured>& report() {
  static std::vector<Measured> r;
  return r;
}

TEMPLATE_TEST_CASE("nuqsgd is unbiased with per-element variance within its level bound",
                   "[compression][unit]", float, double) {
  const int bits = GENERATE(2, 3, 4, 8);
  CAPTURE(bits);
  const size_t d = 300, bucket = 128;  // two full buckets and one of 44
  const int s = (1 << (bits - 1)) - 1;
  auto c = make<TestType>(nuqsgdSpec(bits, bucket));
  const auto x = normalVector<TestType>(d, 210 + bits);
  const auto m = sample(*c, x, bucket, 310 + bits);
  const auto view = parseFrame(m.last);
  REQUIRE(view.isOk());
  const auto levels = exponentialLevels(s);
  const double lowest = std::ldexp(1.0, 1 - s);
  for (size_t lo = 0; lo < d; lo += bucket) {
    const size_t n = std::min(bucket, d - lo);
    const double scale = loadF32(view->payload, 4 * (lo / bucket));
    double exact = 0;
    for (size_t i = lo; i < lo + n; ++i) {
      const double r = std::abs(static_cast<double>(x[i])) / scale;
      const double var = scale * scale * roundingVariance(levels, r);
      // Per element: at most x_i^2 / 8 between two nonzero levels (a, 2a); below the lowest level
      // 2^(1-s) it is r (2^(1-s) - r) scale^2 <= (2^(1-s) scale)^2 / 4.
      const double bound =
          r >= lowest ? double(x[i]) * double(x[i]) / 8 : scale * scale * lowest * lowest / 4;
      CAPTURE(i, x[i], r, var, bound);
      CHECK(var <= bound * (1 + 1e-12) + 1e-300);
      exact += var;
      requireUnbiasedAt(m.value[i], x[i], scale * roundingStep(levels, r));
    }
    const double norm2 = squaredNorm<TestType>(std::span(x).subspan(lo, n));
    // Summed: E||Q(v) - v||^2 <= (1/8 + min(n 4^-s, sqrt(n) 2^(1-s))) ||v||^2 (scale ~ ||v||).
    const double bound =
        norm2 / 8 + std::min(n * std::ldexp(1.0, -2 * s) * scale * scale,
                             std::sqrt(double(n)) * lowest * scale * std::sqrt(norm2));
    const size_t b = lo / bucket;
    const double tolerance = 5 * m.err[b].standardError() + 1e-5 * norm2;
    CAPTURE(lo, n, m.err[b].mean, exact, bound, tolerance);
    CHECK(exact <= bound);
    CHECK(m.err[b].mean <= bound + tolerance);
    CHECK(std::abs(m.err[b].mean - exact) <= tolerance);
    if (std::is_same_v<TestType, float> && lo == 0) {
      report().push_back(
          {"nuqsgd " + std::to_string(bits) + " bits, bucket 128: E||Q-v||^2/||v||^2",
           m.err[b].mean / norm2, bound / norm2});
    }
  }
}

TEMPLATE_TEST_CASE("natural compression is unbiased with relative variance at most 1/8",
                   "[compression][unit]", float, double) {
  const size_t d = 200;
  auto c = make<TestType>(makeSpec(Kind::kNatural));
  auto x = normalVector<TestType>(d, 220);
  for (size_t i = 0; i < d; ++i) x[i] = static_cast<TestType>(x[i] * std::exp2(int(i % 40) - 20));
  x[0] = TestType(1.3333333333);  // the worst case m = 4/3: variance t^2 / 8
  const auto m = sample(*c, x, d, 320);
  double exact = 0, worst = 0;
  for (size_t i = 0; i < d; ++i) {
    const double a = std::abs(static_cast<double>(x[i]));
    const double lo = std::exp2(std::floor(std::log2(a)));
    const double p = a / lo - 1;
    const double var = lo * lo * p * (1 - p);
    CAPTURE(i, x[i], var);
    CHECK(var <= a * a / 8 * (1 + 1e-12));
    worst = std::max(worst, var / (a * a));
    exact += var;
    requireUnbiasedAt(m.value[i], x[i], lo);
  }
  CHECK(worst > 0.1249);  // the bound is attained
  const double norm2 = squaredNorm<TestType>(x);
  const double tolerance = 5 * m.err[0].standardError();
  CAPTURE(m.err[0].mean, exact, norm2 / 8);
  CHECK(exact <= norm2 / 8);
  CHECK(m.err[0].mean <= norm2 / 8 + tolerance);
  CHECK(std::abs(m.err[0].mean - exact) <= tolerance + 1e-6 * norm2);
  // Per element, the measured relative variance stays under 1/8 as well.
  double worstMeasured = 0;
  for (size_t i = 0; i < d; ++i) {
    const double a2 = double(x[i]) * double(x[i]);
    worstMeasured = std::max(worstMeasured, m.value[i].sd() * m.value[i].sd() / a2);
  }
  CHECK(worstMeasured <= 0.125 * 1.1);  // 20000 draws: sd of a variance estimate < 2%
  if (std::is_same_v<TestType, float>) {
    report().push_back({"natural: E||C-x||^2/||x||^2", m.err[0].mean / norm2, 0.125});
    report().push_back({"natural: worst element Var/t^2", worstMeasured, 0.125});
  }
}

TEMPLATE_TEST_CASE("natural dithering is unbiased with variance within zeta", "[compression][unit]",
                   float, double) {
  const int s = GENERATE(1, 2, 4, 8);
  const bool linf = GENERATE(false, true);
  const size_t d = GENERATE(size_t{16}, size_t{300});
  CAPTURE(s, linf, d);
  auto c = make<TestType>(ditheringSpec(s, linf));
  const auto x = normalVector<TestType>(d, 230 + s + d);
  const auto m = sample(*c, x, d, 330 + s + linf + d, d > 100 ? kDraws / 2 : kDraws);
  const auto view = parseFrame(m.last);
  REQUIRE(view.isOk());
  const double scale = loadF32(view->payload, 0);
  const auto levels = exponentialLevels(s);
  double exact = 0;
  for (size_t i = 0; i < d; ++i) {
    const double r = std::abs(double(x[i])) / scale;
    exact += scale * scale * roundingVariance(levels, r);
    requireUnbiasedAt(m.value[i], x[i], scale * roundingStep(levels, r));
  }
  const double norm2 = squaredNorm<TestType>(x);
  // E||C(x)||^2 <= zeta ||x||^2, i.e. E||C(x) - x||^2 <= (zeta - 1) ||x||^2, with
  // zeta = 9/8 + sqrt(d) 2^(1-s) min(1, sqrt(d) 2^(1-s)) for both norms (r = min(p, 2) = 2).
  const double bound = (zeta(d, s) - 1) * norm2;
  const double tolerance = 5 * m.err[0].standardError() + 1e-5 * norm2;
  CAPTURE(m.err[0].mean, exact, bound);
  CHECK(exact <= bound);
  CHECK(m.err[0].mean <= bound + tolerance);
  CHECK(std::abs(m.err[0].mean - exact) <= tolerance);
  if (std::is_same_v<TestType, float> && d == 300) {
    report().push_back({"natural_dithering s=" + std::to_string(s) + (linf ? " linf" : " l2") +
                            " d=300: E||C-x||^2/||x||^2 (bound zeta-1)",
                        m.err[0].mean / norm2, bound / norm2});
  }
}

TEMPLATE_TEST_CASE("topk dithering contracts: E||C(x) - x||^2 <= (1 - k/(d zeta_k)) ||x||^2",
                   "[compression][unit]", float, double) {
  const int s = GENERATE(1, 2, 4);
  const size_t k = GENERATE(size_t{1}, size_t{10}, size_t{100});
  CAPTURE(s, k);
  const size_t d = 200;
  auto c = make<TestType>(topkDitheringSpec(k, s));
  const auto x = normalVector<TestType>(d, 240 + s + k);
  const auto m = sample(*c, x, d, 340 + s + k, kDraws / 2);
  const double norm2 = squaredNorm<TestType>(x);
  const double delta = double(k) / (d * zeta(k, s));
  const double bound = (1 - delta) * norm2;
  // The exact expectation: ||x||^2 - 2 ||T||^2 / zeta + E||D||^2 / zeta^2, with
  // E||D||^2 = ||T||^2 + sum of the rounding variances (T = top-k of x, D its dithering).
  auto topk = make<TestType>(topkSpec(k));
  const auto t = decodeOk(*topk, encodeWith(*topk, x), d);
  const double t2 = squaredNorm<TestType>(t);
  const auto view = parseFrame(m.last);
  REQUIRE(view.isOk());
  const double scale = loadF32(view->payload, 4 + gapBytes(t));
  CHECK(scale == roundUpToFloat(std::sqrt(t2)));
  const auto levels = exponentialLevels(s);
  double var = 0;
  for (TestType v : t) var += scale * scale * roundingVariance(levels, std::abs(double(v)) / scale);
  const double z = zeta(k, s);
  const double exact = norm2 - 2 * t2 / z + (t2 + var) / (z * z);
  const double tolerance = 5 * m.err[0].standardError() + 1e-5 * norm2;
  CAPTURE(m.err[0].mean, exact, bound, delta);
  CHECK(exact <= bound);
  CHECK(m.err[0].mean <= bound + tolerance);
  CHECK(std::abs(m.err[0].mean - exact) <= tolerance);
  if (std::is_same_v<TestType, float>) {
    report().push_back({"topk_dithering s=" + std::to_string(s) + " k=" + std::to_string(k) +
                            " d=200: E||C-x||^2/||x||^2 (bound 1-k/(d zeta_k))",
                        m.err[0].mean / norm2, bound / norm2});
  }
}

TEMPLATE_TEST_CASE("dqsgd frames are unbiased", "[compression][unit]", float, double) {
  const size_t d = 100;
  auto c = make<TestType>(dqsgdSpec(2, 8, 0.5, 32));
  const auto x = normalVector<TestType>(d, 250);
  const auto m = sample(*c, x, d, 350, kDraws / 2);
  const auto view = parseFrame(m.last);
  REQUIRE(view.isOk());
  const int bits = std::to_integer<int>(view->params[0]);
  const double s = (1 << (bits - 1)) - 1;
  for (size_t i = 0; i < d; ++i) {
    requireUnbiasedAt(m.value[i], x[i], loadF32(view->payload, 4 * (i / 32)) / s);
  }
}

// ---------------------------------------------------------------------------------------------
// AdaComp

// The frame AdaComp's rule gives for residue g (already holding v) and the latest vector v:
// sent indices and the scale.
struct Selection {
  std::vector<size_t> indices;
  double scale = 0;
};
template <typename T>
Selection adacompRule(const std::vector<double>& g, const std::vector<T>& v, size_t bin) {
  Selection sel;
  double sum = 0;
  for (size_t lo = 0; lo < g.size(); lo += bin) {
    const size_t hi = std::min(g.size(), lo + bin);
    double gMax = 0;
    for (size_t i = lo; i < hi; ++i) gMax = std::max(gMax, std::abs(g[i]));
    for (size_t i = lo; i < hi; ++i) {
      if (g[i] != 0 && std::abs(g[i] + double(v[i])) >= gMax) {
        sel.indices.push_back(i);
        sum += std::abs(g[i]);
      }
    }
  }
  if (!sel.indices.empty()) sel.scale = sum / double(sel.indices.size());
  return sel;
}

TEMPLATE_TEST_CASE("adacomp sends every bin's maximum of a fresh residue", "[compression][unit]",
                   float, double) {
  const size_t d = GENERATE(size_t{1}, size_t{7}, size_t{1001});
  const size_t bin = GENERATE(size_t{1}, size_t{3}, size_t{50}, size_t{5000});
  CAPTURE(d, bin);
  auto c = make<TestType>(adacompSpec(bin));
  const auto x = normalVector<TestType>(d, 260 + d);
  const auto y = decodeOk(*c, encodeWith(*c, x), d);
  // G = x, H = 2x: i is sent iff 2|x_i| >= the bin's max |x|; the max itself always is.
  double scale = 0;
  for (size_t lo = 0; lo < d; lo += bin) {
    const size_t hi = std::min(d, lo + bin);
    double xMax = 0;
    for (size_t i = lo; i < hi; ++i) xMax = std::max(xMax, std::abs(double(x[i])));
    for (size_t i = lo; i < hi; ++i) {
      CAPTURE(i, x[i], y[i], xMax);
      REQUIRE((y[i] != 0) == (2 * std::abs(double(x[i])) >= xMax));
      if (std::abs(double(x[i])) == xMax) REQUIRE(y[i] != 0);
      if (y[i] != 0) {
        REQUIRE((y[i] < 0) == (x[i] < 0));
        if (scale == 0) scale = std::abs(y[i]);
        REQUIRE(std::abs(y[i]) == scale);  // one scale
      }
    }
  }
  std::vector<double> g(x.begin(), x.end());
  const Selection sel = adacompRule(g, x, bin);
  CHECK(scale == static_cast<TestType>(sel.scale));
}

TEMPLATE_TEST_CASE("adacomp is error feedback: frames plus residue account for every input",
                   "[compression][unit]", float, double) {
  const size_t d = 1001, bin = 50;  // 20 full bins and one of 1
  auto c = make<TestType>(adacompSpec(bin));
  auto state = c->newState(d);
  REQUIRE(state != nullptr);
  core::Rng rng(270), noise(271);
  std::vector<double> g(d, 0.0), sumIn(d, 0.0), sumOut(d, 0.0);
  std::vector<TestType> x(d), y(d);
  Frame f;
  size_t sentTotal = 0;
  for (uint64_t round = 0; round < 60; ++round) {
    // Gradients with a drifting mean, so that residues build up and change sign.
    for (size_t i = 0; i < d; ++i) {
      x[i] = static_cast<TestType>(noise.normal() + 0.3 * std::sin(0.1 * double(round + i)));
    }
    c->encodeStream(x, rng, StreamContext{round, 0, state.get()}, f);
    REQUIRE(c->decode(f, y).isOk());
    // The codec's residue is the inputs minus what was sent: its choices must be exactly those
    // of AdaComp's rule on that residue.
    for (size_t i = 0; i < d; ++i) g[i] += double(x[i]);
    const Selection sel = adacompRule(g, x, bin);
    size_t j = 0;
    for (size_t i = 0; i < d; ++i) {
      CAPTURE(round, i, g[i], y[i]);
      const bool sent = j < sel.indices.size() && sel.indices[j] == i;
      REQUIRE((y[i] != 0) == sent);
      if (sent) {
        ++j;
        REQUIRE(double(std::abs(y[i])) ==
                Approx(sel.scale).epsilon(4 * std::numeric_limits<TestType>::epsilon()));
        REQUIRE((y[i] < 0) == (g[i] < 0));
      }
      g[i] -= double(y[i]);
      sumIn[i] += double(x[i]);
      sumOut[i] += double(y[i]);
    }
    sentTotal += sel.indices.size();
  }
  // Sent + residue = inputs, to rounding.
  for (size_t i = 0; i < d; ++i) {
    REQUIRE(sumOut[i] + g[i] == Approx(sumIn[i]).margin(1e-9));
  }
  CHECK(sentTotal > 0);
  CHECK(sentTotal < 60 * d / 2);  // it does compress
}

TEMPLATE_TEST_CASE("adacomp holds back, then drains, a residue: a stream by hand",
                   "[compression][unit]", float, double) {
  using T = TestType;
  auto c = make<T>(adacompSpec(2));
  auto state = c->newState(2);
  core::Rng rng(1);
  auto next = [&](std::vector<T> x) {
    Frame f;
    c->encodeStream(x, rng, StreamContext{0, 0, state.get()}, f);
    return decodeOk(*c, f, 2);
  };
  // G = {1, 1/4}, H = {2, 1/2}, max 1: only element 0; G <- {0, 1/4}.
  CHECK(next({1, 0.25}) == std::vector<T>{1, 0});
  // G = {-1/2, 3/8}, H = {-1, 1/2}, max 1/2: both, scale 7/16; G <- {-1/16, -1/16}.
  CHECK(next({-0.5, 0.125}) == std::vector<T>{T(-0.4375), T(0.4375)});
  // No input: H = G, both sent with scale 1/16, and the residue is empty.
  CHECK(next({0, 0}) == std::vector<T>{T(-0.0625), T(-0.0625)});
  CHECK(next({0, 0}) == std::vector<T>{0, 0});
  // Sent: {1 - 7/16 - 1/16, 7/16 - 1/16} = {1/2, 3/8}, the sum of the inputs.
}

// ---------------------------------------------------------------------------------------------
// DQSGD

int dqsgdBits(int minBits, int maxBits, double target, size_t bucket, size_t d, double norm2,
              double mean) {
  const double b = double(std::min(bucket, d));
  for (int bits = minBits; bits <= maxBits; ++bits) {
    const double s = (1 << (bits - 1)) - 1;
    if (std::min(b / (s * s), std::sqrt(b) / s) * norm2 <= target * mean) return bits;
  }
  return maxBits;
}

int frameBits(const Frame& f) {
  const auto view = parseFrame(f);
  REQUIRE(view.isOk());
  return std::to_integer<int>(view->params[0]);
}

TEMPLATE_TEST_CASE("dqsgd picks the fewest bits that keep eps(s) ||x||^2 <= target * mean",
                   "[compression][unit]", float, double) {
  const double target = GENERATE(0.01, 0.1, 1.0);
  const size_t bucket = GENERATE(size_t{16}, size_t{512});
  CAPTURE(target, bucket);
  const size_t d = 300;
  auto c = make<TestType>(dqsgdSpec(2, 8, target, bucket));
  auto state = c->newState(d);
  core::Rng rng(280);
  double sum = 0;
  std::vector<int> seen;
  Frame f;
  const double scales[] = {1, 1, 10, 0.1, 3, 0.5, 30, 1, 0.01, 5};
  for (size_t t = 0; t < std::size(scales); ++t) {
    const auto x = normalVector<TestType>(d, 281 + t, scales[t]);
    const double norm2 = squaredNorm<TestType>(x);
    const double mean = (sum + norm2) / double(t + 1);
    core::Rng before = rng;
    c->encodeStream(x, rng, StreamContext{t, 0, state.get()}, f);
    const int bits = frameBits(f);
    CAPTURE(t, norm2, mean, bits);
    CHECK(bits == dqsgdBits(2, 8, target, bucket, d, norm2, mean));
    sum += norm2;
    seen.push_back(bits);
    // The payload is qsgd's, bit for bit, at the chosen width.
    auto qsgd = make<TestType>(qsgdSpec(bits, bucket, false));
    Frame fq;
    qsgd->encode(x, before, fq);
    const auto pq = parseFrame(fq), pd = parseFrame(f);
    REQUIRE((pq.isOk() && pd.isOk()));
    CHECK(Bytes(pq->payload.begin(), pq->payload.end()) ==
          Bytes(pd->payload.begin(), pd->payload.end()));
    // ...and any decoder reads the width from the params.
    auto other = make<TestType>(dqsgdSpec(7, 8, 1e-6, 3));
    CHECK(decodeOk(*other, f, d) == decodeOk(*c, f, d));
  }
  // The first frame is judged against its own norm: eps(s) <= target, whatever the scale.
  for (double scale : {1e-3, 1.0, 1e3}) {
    const auto x = normalVector<TestType>(d, 299, scale);
    CHECK(frameBits(encodeWith(*c, x)) ==
          dqsgdBits(2, 8, target, bucket, d, squaredNorm<TestType>(x), squaredNorm<TestType>(x)));
  }
  // Frames far above the stream's mean get more bits than frames far below it.
  CHECK(seen[6] >= seen[8]);
}

TEMPLATE_TEST_CASE("dqsgd gives a larger-norm frame at least as many bits", "[compression][unit]",
                   float, double) {
  const size_t d = 200;
  auto c = make<TestType>(dqsgdSpec(2, 8, 0.05, 64));
  for (double factor : {0.1, 0.5, 2.0, 4.0, 16.0}) {
    // Two streams with the same history, then x and factor * x.
    auto a = c->newState(d);
    auto b = c->newState(d);
    core::Rng ra(1), rb(1);
    Frame f;
    for (uint64_t t = 0; t < 5; ++t) {
      const auto h = normalVector<TestType>(d, 300 + t);
      c->encodeStream(h, ra, StreamContext{t, 0, a.get()}, f);
      c->encodeStream(h, rb, StreamContext{t, 0, b.get()}, f);
    }
    const auto x = normalVector<TestType>(d, 310);
    std::vector<TestType> big(x);
    for (auto& v : big) v = static_cast<TestType>(v * factor);
    Frame fa, fb;
    c->encodeStream(x, ra, StreamContext{5, 0, a.get()}, fa);
    c->encodeStream(big, rb, StreamContext{5, 0, b.get()}, fb);
    CAPTURE(factor, frameBits(fa), frameBits(fb));
    if (factor > 1) CHECK(frameBits(fb) >= frameBits(fa));
    if (factor < 1) CHECK(frameBits(fb) <= frameBits(fa));
  }
  // With maxBits too low to meet the budget, maxBits.
  auto capped = make<TestType>(dqsgdSpec(2, 3, 1e-6, 64));
  CHECK(frameBits(encodeWith(*capped, normalVector<TestType>(d, 320))) == 3);
}

// ---------------------------------------------------------------------------------------------
// Frame sizes at d = 10^4 (docs/wire_format.md's table)

TEMPLATE_TEST_CASE("family frame sizes follow the wire format's formulas", "[compression][unit]",
                   float, double) {
  const size_t d = 10000;
  const size_t e = sizeof(TestType);
  const auto x = normalVector<TestType>(d, 600);
  auto size = [&](const CompressorSpec& spec) {
    return encodeWith(*make<TestType>(spec), x).size();
  };
  for (int bits : {2, 4, 8}) {
    CHECK(size(nuqsgdSpec(bits, 512)) == 36 + 8 + 4 * 20 + d * bits / 8);
  }
  CHECK(size(makeSpec(Kind::kNatural)) == 36 + (9 * d + 7) / 8);
  for (int s : {1, 2, 3, 4, 8, 16, 30}) {
    CHECK(size(ditheringSpec(s, false)) ==
          36 + 8 + 4 + (d * (std::bit_width(unsigned(s)) + 1) + 7) / 8);
  }
  for (size_t k : {size_t{100}, size_t{1000}}) {
    auto c = make<TestType>(topkDitheringSpec(k, 4));
    auto topk = make<TestType>(topkSpec(k));
    const auto t = decodeOk(*topk, encodeWith(*topk, x), d);
    CHECK(encodeWith(*c, x).size() == 36 + 8 + 4 + gapBytes(t) + 4 + (4 * k + 7) / 8);
  }
  {
    auto c = make<TestType>(adacompSpec(500));
    const Frame f = encodeWith(*c, x);
    size_t n = 0;
    const uint64_t gaps = gapBytes(decodeOk(*c, f, d), &n);
    CHECK(f.size() == 36 + 4 + gaps + e + (n + 7) / 8);
  }
  {
    auto c = make<TestType>(dqsgdSpec(2, 8, 0.1, 512));
    const Frame f = encodeWith(*c, x);
    CHECK(f.size() == 36 + 8 + 4 * 20 + (d * frameBits(f) + 7) / 8);
  }
}

// Not run by default: `compression_test "[report]"` prints bits per element at d = 10^4 (float32)
// and the measured variance and contraction ratios of the statistics tests run before it.
TEST_CASE("report: bits per element and measured ratios", "[.][report]") {
  const size_t d = 10000;
  const auto x = normalVector<float>(d, 600);
  auto bitsPer = [&](const CompressorSpec& spec, int frames = 1) {
    auto c = make<float>(spec);
    auto state = c->newState(d);
    core::Rng rng(1), noise(2);
    Frame f;
    size_t bytes = 0;
    std::vector<float> v(x);
    for (int t = 0; t < frames; ++t) {
      for (auto& e : v) e = static_cast<float>(noise.normal());
      c->encodeStream(t == 0 ? std::span<const float>(x) : std::span<const float>(v), rng,
                      StreamContext{uint64_t(t), 0, state.get()}, f);
      bytes += f.size();
    }
    return 8.0 * double(bytes) / double(frames) / double(d);
  };
  std::cout << std::fixed << std::setprecision(3);
  std::cout << "bits per element, d = 10^4, float32 (normal vector)\n";
  for (int bits : {2, 4, 8}) {
    std::cout << "  nuqsgd bits " << bits << " bucket 512: " << bitsPer(nuqsgdSpec(bits, 512))
              << "\n";
  }
  std::cout << "  natural: " << bitsPer(makeSpec(Kind::kNatural)) << "\n";
  for (int s : {1, 2, 4, 8}) {
    std::cout << "  natural_dithering s=" << s << ": " << bitsPer(ditheringSpec(s, false)) << "\n";
  }
  for (size_t k : {size_t{100}, size_t{1000}}) {
    std::cout << "  topk_dithering s=4 k=" << k << ": " << bitsPer(topkDitheringSpec(k, 4)) << "\n";
  }
  for (size_t bin : {size_t{50}, size_t{500}}) {
    std::cout << "  adacomp bin " << bin << ": first frame " << bitsPer(adacompSpec(bin))
              << ", mean of 50 frames " << bitsPer(adacompSpec(bin), 50) << "\n";
  }
  for (double target : {0.01, 0.1, 1.0}) {
    std::cout << "  dqsgd 2..8 bits target " << target
              << " bucket 512: " << bitsPer(dqsgdSpec(2, 8, target, 512)) << "\n";
  }
  std::cout << std::setprecision(4) << "measured / bound\n";
  for (const Measured& m : report()) {
    std::cout << "  " << m.what << ": " << m.measured << " / " << m.bound << "\n";
  }
}

// ---------------------------------------------------------------------------------------------
// Corruption

TEMPLATE_TEST_CASE("malformed frames of every family codec are corruption", "[compression][unit]",
                   float, double) {
  for (const CompressorSpec& spec : kFamily) {
    for (size_t d : {size_t{0}, size_t{7}, size_t{20}}) {
      CAPTURE(compressorKindName(spec.kind), d);
      requireMalformedRejected<TestType>(spec, d);
    }
  }
}

const float kBadScales[] = {std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            -1.0f,
                            -0.0f};

TEMPLATE_TEST_CASE("nuqsgd and dqsgd frames with bad params, scales or codes are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  const bool dq = GENERATE(false, true);
  CAPTURE(dq);
  auto c = make<T>(dq ? dqsgdSpec(2, 8, 0.1, 512) : nuqsgdSpec(4, 2));
  const CodecId id = c->id();
  // bits 4, bucket 2; d = 3: scales 2.0f, 1.0f; codes 7, 8|1, 0 -> bytes 97 00.
  auto params = [dq](unsigned bits, uint32_t bucket, unsigned norm = 0) {
    Bytes p = bytesOf({bits});
    if (dq) p.push_back(std::byte(norm));
    appendU32(p, bucket);
    return p;
  };
  auto payload = [](float scale0, float scale1, uint8_t code0, uint8_t code1) {
    Bytes p;
    appendValue<float>(p, scale0);
    appendValue<float>(p, scale1);
    p.push_back(std::byte{code0});
    p.push_back(std::byte{code1});
    return p;
  };
  const size_t d = 3;
  const Bytes good = payload(2.0f, 1.0f, 0x97, 0x00);
  // nuqsgd: s = 7, level 7 = 1, level 1 = 2^-6; dqsgd: qsgd's 7/7 and 1/7 (of the scale 2).
  CHECK(decodeOk(*c, craft<T>(id, d, params(4, 2), good), d) ==
        std::vector<T>{T(2), T(dq ? -2.0 / 7 : -2.0 / 64), T(0)});
  for (unsigned bits : {0u, 1u, 9u, 255u}) {
    CAPTURE(bits);
    requireCorrupt(*c, craft<T>(id, d, params(bits, 2), good), d);
  }
  requireCorrupt(*c, craft<T>(id, d, params(4, 0), good), d);  // bucket 0
  requireCorrupt(*c, craft<T>(id, d, params(4, 1), good), d);  // 3 scales implied
  requireCorrupt(*c, craft<T>(id, d, params(4, 3), good), d);  // 1 scale implied
  requireCorrupt(*c, craft<T>(id, d, params(8, 2), good), d);  // 3 code bytes implied
  if (dq) {
    requireCorrupt(*c, craft<T>(id, d, params(4, 2, 1), good), d);  // linf is not dqsgd's
    requireCorrupt(*c, craft<T>(id, d, params(4, 2, 2), good), d);
  }
  for (float bad : kBadScales) {
    CAPTURE(bad);
    requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(2.0f, bad, 0x97, 0)), d);
    requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(bad, 1.0f, 0x97, 0)), d);
  }
  requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(2.0f, 1.0f, 0x87, 0x00)), d);  // -0
  requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(2.0f, 1.0f, 0x97, 0x08)), d);  // -0
  requireCorrupt(*c, craft<T>(id, d, params(4, 2), payload(2.0f, 1.0f, 0x97, 0x10)), d);  // pad
}

TEMPLATE_TEST_CASE("natural frames with bad codes or padding are corruption", "[compression][unit]",
                   float, double) {
  using T = TestType;
  auto c = make<T>(makeSpec(Kind::kNatural));
  // d = 2: 18 bits in 3 bytes; codes 127 (1.0) and 128 | 256 (-2.0) -> 7f 00 03.
  auto frame = [](uint32_t code0, uint32_t code1, uint8_t extra = 0) {
    const uint32_t v = code0 | code1 << 9 | uint32_t{extra} << 18;
    return craft<T>(CodecId::kNatural, 2, {},
                    bytesOf({v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff}));
  };
  CHECK(decodeOk(*c, frame(127, 384), 2) == std::vector<T>{1, -2});
  CHECK(decodeOk(*c, frame(1, 254), 2) ==
        std::vector<T>{T(std::ldexp(1.0, -126)), T(std::ldexp(1.0, 127))});
  requireCorrupt(*c, frame(255, 127), 2);        // the code of no value
  requireCorrupt(*c, frame(127, 255 | 256), 2);  // with a sign too
  requireCorrupt(*c, frame(256, 127), 2);        // negative zero
  requireCorrupt(*c, frame(127, 384, 1), 2);     // padding bit 18
  requireCorrupt(*c, frame(127, 384, 0x20), 2);  // padding bit 23
  requireCorrupt(*c, craft<T>(CodecId::kNatural, 2, bytesOf({0}), bytesOf({0x7f, 0, 3})), 2);
}

TEMPLATE_TEST_CASE("natural dithering frames with bad params, norms or codes are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  auto c = make<T>(ditheringSpec(4, false));
  // s = 5 takes 3-bit levels and 4-bit codes. d = 3: norm 8.0f; codes 5, 8|4, 0 -> c5 00.
  auto payload = [](float norm, uint8_t b0, uint8_t b1) {
    Bytes p;
    appendValue<float>(p, norm);
    p.push_back(std::byte{b0});
    p.push_back(std::byte{b1});
    return p;
  };
  const CodecId id = CodecId::kNaturalDithering;
  const size_t d = 3;
  CHECK(decodeOk(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0xc5, 0)), d) ==
        std::vector<T>{8, -4, 0});
  CHECK(decodeOk(*c, craft<T>(id, d, bytesOf({5, 1}), payload(8.0f, 0xc1, 0)), d) ==
        std::vector<T>{T(0.5), -4, 0});  // level 1 = 2^-4 of the norm; the norm flag is free
  for (unsigned levels : {0u, 31u, 255u}) {
    requireCorrupt(*c, craft<T>(id, d, bytesOf({levels, 0}), payload(8.0f, 0xc5, 0)), d);
  }
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 2}), payload(8.0f, 0xc5, 0)), d);  // norm flag
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0xc6, 0)), d);  // level 6 > 5
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0xf5, 0)), d);  // level 7
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0x85, 0)), d);  // -0
  requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(8.0f, 0xc5, 0x10)), d);  // pad
  requireCorrupt(*c, craft<T>(id, d, bytesOf({4, 0}), payload(8.0f, 0xc5, 0)), d);     // 5 > s = 4
  for (float bad : kBadScales) {
    CAPTURE(bad);
    requireCorrupt(*c, craft<T>(id, d, bytesOf({5, 0}), payload(bad, 0xc5, 0)), d);
    Bytes empty;
    appendValue<float>(empty, bad);
    requireCorrupt(*c, craft<T>(id, 0, bytesOf({5, 0}), empty), 0);
  }
}

TEMPLATE_TEST_CASE("topk dithering frames with bad counts, indices or codes are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  auto c = make<T>(topkDitheringSpec(2, 4));
  const CodecId id = CodecId::kTopKDithering;
  const size_t d = 5;
  // count k | index bytes | norm | code bytes; s = 2: 3-bit codes.
  auto payload = [](uint32_t k, const Bytes& indexBytes, float norm, const Bytes& codes) {
    Bytes p;
    appendU32(p, k);
    p.insert(p.end(), indexBytes.begin(), indexBytes.end());
    appendValue<float>(p, norm);
    p.insert(p.end(), codes.begin(), codes.end());
    return p;
  };
  const Bytes s2 = bytesOf({2});
  // Indices 1 and 4, codes 2 and 4|1 -> 0x2a: norm, -norm/2, over zeta_2 = 9/8 + (sqrt(2)/2)^2.
  const double z = 9.0 / 8 + 0.5;
  CHECK(decodeOk(*c, craft<T>(id, d, s2, payload(2, bytesOf({1, 3}), 4.0f, bytesOf({0x2a}))), d) ==
        std::vector<T>{0, T(4 / z), 0, 0, T(-2 / z)});
  auto bad = [&](uint32_t k, const Bytes& indexBytes, const Bytes& codes,
                 const Bytes& params = bytesOf({2}), float norm = 4.0f) {
    requireCorrupt(*c, craft<T>(id, d, params, payload(k, indexBytes, norm, codes)), d);
  };
  bad(6, bytesOf({0, 1, 1, 1, 1, 1}), bytesOf({0x49, 0x92, 0x04}));  // k > d
  bad(0, {}, {});                                                    // no element of d > 0
  bad(2, bytesOf({5, 1}), bytesOf({0x2a}));                          // index = d
  bad(2, bytesOf({1, 4}), bytesOf({0x2a}));                          // past the end
  bad(2, bytesOf({1, 0}), bytesOf({0x2a}));                          // gap 0
  bad(2, bytesOf({1, 0x83, 0x00}), bytesOf({0x2a}));                 // overlong varint
  bad(2, bytesOf({1, 3}), bytesOf({0x2b}));                          // level 3 > 2
  bad(2, bytesOf({1, 3}), bytesOf({0x22}));                          // -0
  bad(2, bytesOf({1, 3}), bytesOf({0x6a}));                          // padding
  bad(2, bytesOf({1, 3}), bytesOf({0x2a, 0x00}));                    // a code byte too many
  bad(2, bytesOf({1, 3}), {});                                       // none
  bad(2, bytesOf({1, 3}), bytesOf({0x2a}), bytesOf({0}));            // levels 0
  bad(2, bytesOf({1, 3}), bytesOf({0x2a}), bytesOf({31}));           // levels 31
  bad(1000, bytesOf({1, 3}), bytesOf({0x2a}));                       // a count without bytes
  for (float scale : kBadScales) {
    CAPTURE(scale);
    bad(2, bytesOf({1, 3}), bytesOf({0x2a}), s2, scale);
  }
}

TEMPLATE_TEST_CASE("adacomp frames with bad counts, indices, scales or signs are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  using L = std::numeric_limits<T>;
  auto c = make<T>(adacompSpec(4));
  const CodecId id = CodecId::kAdaComp;
  const size_t d = 5;
  auto payload = [](uint32_t n, const Bytes& indexBytes, T scale, const Bytes& signs) {
    Bytes p;
    appendU32(p, n);
    p.insert(p.end(), indexBytes.begin(), indexBytes.end());
    appendValue<T>(p, scale);
    p.insert(p.end(), signs.begin(), signs.end());
    return p;
  };
  CHECK(decodeOk(*c, craft<T>(id, d, {}, payload(2, bytesOf({1, 3}), T(0.5), bytesOf({2}))), d) ==
        std::vector<T>{0, T(0.5), 0, 0, T(-0.5)});
  CHECK(decodeOk(*c, craft<T>(id, d, {}, payload(0, {}, T(0), {})), d) == std::vector<T>(d, 0));
  auto bad = [&](uint32_t n, const Bytes& indexBytes, T scale, const Bytes& signs) {
    requireCorrupt(*c, craft<T>(id, d, {}, payload(n, indexBytes, scale, signs)), d);
  };
  bad(6, bytesOf({0, 1, 1, 1, 1, 1}), T(1), bytesOf({0}));  // n > d
  bad(2, bytesOf({5, 1}), T(1), bytesOf({0}));              // index = d
  bad(2, bytesOf({1, 4}), T(1), bytesOf({0}));              // past the end
  bad(2, bytesOf({1, 0}), T(1), bytesOf({0}));              // gap 0
  bad(2, bytesOf({1, 0x83, 0x00}), T(1), bytesOf({0}));     // overlong varint
  bad(2, bytesOf({1, 3}), T(1), bytesOf({4}));              // a sign bit past n
  bad(2, bytesOf({1, 3}), T(1), bytesOf({0, 0}));           // a sign byte too many
  bad(2, bytesOf({1, 3}), T(1), {});                        // none
  bad(0, {}, T(1), {});                                     // a scale without elements
  bad(1000, bytesOf({1, 3}), T(1), bytesOf({0}));           // a count without bytes
  for (T scale : {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity(), T(-1), T(-0.0)}) {
    CAPTURE(scale);
    bad(2, bytesOf({1, 3}), scale, bytesOf({0}));
    bad(0, {}, scale, {});
  }
  requireCorrupt(*c, craft<T>(id, d, bytesOf({0}), payload(2, bytesOf({1, 3}), T(1), bytesOf({0}))),
                 d);  // params
}

TEMPLATE_TEST_CASE("non-finite input gives family frames that fail to decode",
                   "[compression][unit]", float, double) {
  using L = std::numeric_limits<TestType>;
  for (const CompressorSpec& spec : kFamily) {
    CAPTURE(compressorKindName(spec.kind), spec.k);
    auto c = make<TestType>(spec);
    for (const std::vector<TestType>& x : {std::vector<TestType>{1, L::quiet_NaN(), -2, 3},
                                           std::vector<TestType>{1, -2, 3, L::infinity()},
                                           std::vector<TestType>{-L::infinity(), 1, 2, 3}}) {
      requireCorrupt(*c, encodeWith(*c, x), x.size());
    }
  }
  // AdaComp's residue keeps a NaN: the stream's later frames fail too.
  auto c = make<TestType>(adacompSpec(2));
  auto state = c->newState(2);
  core::Rng rng(1);
  Frame f;
  c->encodeStream(std::vector<TestType>{1, L::quiet_NaN()}, rng, StreamContext{0, 0, state.get()},
                  f);
  requireCorrupt(*c, f, 2);
  c->encodeStream(std::vector<TestType>{1, 2}, rng, StreamContext{1, 0, state.get()}, f);
  requireCorrupt(*c, f, 2);
}

// Mutated params and payloads, re-sealed: decoding returns ok or kCorruption, never reads outside
// the frame (ASan), and an accepted frame decodes to finite values.
TEMPLATE_TEST_CASE("mutated family frames never crash a decoder", "[compression][unit]", float,
                   double) {
  core::Rng rng(700);
  for (const CompressorSpec& spec : kFamily) {
    CAPTURE(compressorKindName(spec.kind));
    auto c = make<TestType>(spec);
    const size_t d = 37;
    const Frame f = encodeWith(*c, normalVector<TestType>(d, 701));
    const auto view = parseFrame(f);
    REQUIRE(view.isOk());
    for (int t = 0; t < 2000; ++t) {
      Bytes params(view->params.begin(), view->params.end());
      Bytes payload(view->payload.begin(), view->payload.end());
      mutate(params, payload, rng);
      std::vector<TestType> out(d);
      const core::Status st = c->decode(craft<TestType>(c->id(), d, params, payload), out);
      REQUIRE((st.isOk() || st.code() == StatusCode::kCorruption));
      if (st.isOk()) {
        REQUIRE(std::all_of(out.begin(), out.end(), [](TestType v) { return std::isfinite(v); }));
      }
    }
  }
}

}  // namespace
}  // namespace starling::compression

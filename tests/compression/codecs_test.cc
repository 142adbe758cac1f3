// createCompressor, 16-bit conversions and codec round trips (docs/wire_format.md).
#include <cstring>
#include <set>
#include <string>

#include "tests/compression/codec_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;

// ---------------------------------------------------------------------------------------------
// createCompressor

TEST_CASE("createCompressor builds every kind with its codec id", "[compression][unit]") {
  struct Case {
    CompressorSpec spec;
    CodecId id;
    bool unbiased;
    const char* name;
  };
  const Case cases[] = {
      {makeSpec(Kind::kIdentity), CodecId::kIdentity, true, "identity"},
      {makeSpec(Kind::kFp16), CodecId::kFp16, false, "fp16"},
      {makeSpec(Kind::kBf16), CodecId::kBf16, false, "bf16"},
      {topkSpec(3), CodecId::kTopK, false, "topk"},
      {randkSpec(3, true), CodecId::kRandK, true, "randk"},
      {randkSpec(0, false, 0.1), CodecId::kRandK, false, "randk"},
      {makeSpec(Kind::kSign), CodecId::kSign, false, "sign"},
      {qsgdSpec(4, 512, false), CodecId::kQsgd, true, "qsgd"},
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
  }
}

TEST_CASE("createCompressor rejects parameters out of range", "[compression][unit]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const CompressorSpec bad[] = {
      topkSpec(0, 0.0),
      topkSpec(0, -0.5),
      topkSpec(0, nan),
      topkSpec(0, inf),
      randkSpec(0, true, 0.0),
      randkSpec(0, false, nan),
      qsgdSpec(1, 512, false),
      qsgdSpec(9, 512, false),
      qsgdSpec(0, 512, true),
      qsgdSpec(4, 0, false),
      qsgdSpec(4, uint64_t{1} << 32, false),
  };
  for (const CompressorSpec& s : bad) {
    CAPTURE(compressorKindName(s.kind), s.k, s.ratio, s.bits, s.bucket);
    CHECK(createCompressor<float>(s).status().code() == StatusCode::kInvalidArgument);
    CHECK(createCompressor<double>(s).status().code() == StatusCode::kInvalidArgument);
  }
  // k takes precedence over a meaningless ratio; a ratio above 1 keeps everything.
  CHECK(createCompressor<float>(topkSpec(2, -1.0)).isOk());
  CHECK(createCompressor<float>(topkSpec(0, 3.0)).isOk());
  CHECK(createCompressor<float>(qsgdSpec(2, 1, true)).isOk());
  CHECK(createCompressor<float>(qsgdSpec(8, UINT32_MAX, false)).isOk());
}

// ---------------------------------------------------------------------------------------------
// 16-bit conversions

// Every finite positive 16-bit value: it converts back to itself, the midpoint to its successor
// rounds to the even one of the two, and the doubles and floats just either side of the
// midpoint round down and up.
template <uint16_t kMaxFinite>
void checkRoundToNearestEven(uint16_t (*to16)(double), double (*from16)(uint16_t)) {
  int failures = 0;
  uint32_t firstFailure = 0;
  auto fail = [&](uint32_t h) {
    if (failures++ == 0) firstFailure = h;
  };
  for (uint32_t h = 0; h <= kMaxFinite; ++h) {
    const double a = from16(static_cast<uint16_t>(h));
    if (to16(a) != h || to16(-a) != (h | 0x8000u)) fail(h);
    if (to16(static_cast<float>(a)) != h) fail(h);
    if (h == kMaxFinite) break;
    const double b = from16(static_cast<uint16_t>(h + 1));
    if (!(b > a)) fail(h);
    const double mid = (a + b) / 2;  // exact: at most 12 significant bits
    const uint32_t even = (h & 1) == 0 ? h : h + 1;
    if (to16(mid) != even || to16(-mid) != (even | 0x8000u)) fail(h);
    if (to16(std::nextafter(mid, 0.0)) != h) fail(h);
    if (to16(std::nextafter(mid, std::numeric_limits<double>::infinity())) != h + 1) fail(h);
    const auto midF = static_cast<float>(mid);
    if (static_cast<double>(midF) != mid) fail(h);
    if (to16(std::nextafter(midF, 0.0f)) != h) fail(h);
    if (to16(std::nextafter(midF, std::numeric_limits<float>::infinity())) != h + 1) fail(h);
  }
  INFO("first failure at 0x" << std::hex << firstFailure);
  CHECK(failures == 0);
}

TEST_CASE("fp16 rounds to nearest even, exhaustively", "[compression][unit]") {
  checkRoundToNearestEven<0x7bff>(halfFromDouble, doubleFromHalf);
  CHECK(doubleFromHalf(0x3c00) == 1.0);
  CHECK(doubleFromHalf(0xc100) == -2.5);
  CHECK(doubleFromHalf(0x7bff) == 65504.0);
  CHECK(doubleFromHalf(0x0400) == std::ldexp(1.0, -14));
  CHECK(doubleFromHalf(0x0001) == std::ldexp(1.0, -24));
  CHECK(doubleFromHalf(0x03ff) == std::ldexp(1023.0, -24));
}

TEST_CASE("fp16 saturates finite overflow and keeps infinities, NaN and signed zero",
          "[compression][unit]") {
  CHECK(halfFromDouble(65519.99) == 0x7bff);
  CHECK(halfFromDouble(65520.0) == 0x7bff);  // plain round-to-nearest-even would give infinity
  CHECK(halfFromDouble(1e300) == 0x7bff);
  CHECK(halfFromDouble(-1e300) == 0xfbff);
  CHECK(halfFromDouble(std::numeric_limits<double>::max()) == 0x7bff);
  CHECK(halfFromDouble(static_cast<float>(1e38)) == 0x7bff);
  CHECK(halfFromDouble(std::numeric_limits<double>::infinity()) == 0x7c00);
  CHECK(halfFromDouble(-std::numeric_limits<double>::infinity()) == 0xfc00);
  const uint16_t nan = halfFromDouble(std::numeric_limits<double>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
  CHECK(std::isnan(doubleFromHalf(nan)));
  CHECK(std::isinf(doubleFromHalf(0xfc00)));
  CHECK(halfFromDouble(0.0) == 0x0000);
  CHECK(halfFromDouble(-0.0) == 0x8000);
  CHECK(std::signbit(doubleFromHalf(0x8000)));
  // Underflow: half the smallest subnormal is a tie that goes to even (zero).
  CHECK(halfFromDouble(std::ldexp(1.0, -25)) == 0x0000);
  CHECK(halfFromDouble(std::nextafter(std::ldexp(1.0, -25), 1.0)) == 0x0001);
  CHECK(halfFromDouble(std::ldexp(3.0, -26)) == 0x0001);
  CHECK(halfFromDouble(std::ldexp(1.0, -26)) == 0x0000);
  CHECK(halfFromDouble(1e-300) == 0x0000);
  CHECK(halfFromDouble(-1e-300) == 0x8000);
  CHECK(halfFromDouble(std::numeric_limits<double>::denorm_min()) == 0x0000);
  CHECK(halfFromDouble(std::ldexp(1023.5, -24)) == 0x0400);  // carries into the smallest normal
}

TEST_CASE("bf16 rounds to nearest even, exhaustively", "[compression][unit]") {
  checkRoundToNearestEven<0x7f7f>(bf16FromDouble, doubleFromBf16);
  CHECK(doubleFromBf16(0x3f80) == 1.0);
  CHECK(doubleFromBf16(0xc020) == -2.5);
  CHECK(doubleFromBf16(0x0001) == std::ldexp(1.0, -133));
  CHECK(doubleFromBf16(0x7f7f) == std::ldexp(255.0, 120));
}

TEST_CASE("bf16 of a float is the top 16 bits rounded to nearest even", "[compression][unit]") {
  // The textbook float32 -> bf16 rounding, except that we saturate where it overflows.
  auto reference = [](float f) -> uint16_t {
    const uint32_t b = std::bit_cast<uint32_t>(f);
    const uint32_t r = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    if ((r & 0x7f80u) == 0x7f80u) return static_cast<uint16_t>((r & 0x8000u) | 0x7f7fu);
    return static_cast<uint16_t>(r);
  };
  core::Rng rng(42);
  int failures = 0;
  for (int i = 0; i < 200000; ++i) {
    const auto f = std::bit_cast<float>(static_cast<uint32_t>(rng.nextU64()));
    if (!std::isfinite(f)) continue;
    if (bf16FromDouble(f) != reference(f)) ++failures;
  }
  CHECK(failures == 0);
  CHECK(bf16FromDouble(std::numeric_limits<float>::max()) == 0x7f7f);
  CHECK(bf16FromDouble(1e39) == 0x7f7f);
  CHECK(bf16FromDouble(-1e300) == 0xff7f);
  CHECK(bf16FromDouble(std::numeric_limits<double>::infinity()) == 0x7f80);
  CHECK(bf16FromDouble(1e-40) == 0x0001);  // a float subnormal
  CHECK(bf16FromDouble(-0.0) == 0x8000);
  CHECK(std::isnan(doubleFromBf16(bf16FromDouble(std::nan("")))));
}

// ---------------------------------------------------------------------------------------------
// Round trips

const size_t kSizes[] = {0, 1, 7, 1000, 4097};

TEMPLATE_TEST_CASE("identity round trips exactly, in encodeDense's bytes", "[compression][unit]",
                   float, double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  CAPTURE(d);
  auto c = make<TestType>(makeSpec(Kind::kIdentity));
  const auto x = normalVector<TestType>(d, 3 + d);
  const Frame f = encodeWith(*c, x);
  Frame dense;
  encodeDense<TestType>(x, dense);
  CHECK(f == dense);
  CHECK(decodeOk(*c, f, d) == x);
}

TEMPLATE_TEST_CASE("fp16 and bf16 round trip within their rounding bound", "[compression][unit]",
                   float, double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  const bool bf16 = GENERATE(false, true);
  CAPTURE(d, bf16);
  auto c = make<TestType>(makeSpec(bf16 ? Kind::kBf16 : Kind::kFp16));
  auto x = normalVector<TestType>(d, 5 + d, 100.0);
  if (d >= 7) {
    x[1] = TestType(0);
    x[2] = TestType(1e-6);  // an fp16 subnormal
    x[3] = TestType(-65504);
  }
  const Frame f = encodeWith(*c, x);
  REQUIRE(f.size() == kFrameHeaderBytes + 2 * d + kFrameTrailerBytes);
  const auto y = decodeOk(*c, f, d);
  // Relative half an ulp: 2^-11 (10 fraction bits) and 2^-8 (7); below fp16's normal range the
  // spacing is fixed at 2^-24, so the bound there is absolute.
  const double relative = bf16 ? 0x1p-8 : 0x1p-11;
  const double absolute = bf16 ? 0.0 : 0x1p-25;
  for (size_t i = 0; i < d; ++i) {
    const double xi = x[i];
    CAPTURE(i, xi, y[i]);
    REQUIRE(std::abs(static_cast<double>(y[i]) - xi) <=
            std::max(relative * std::abs(xi), absolute));
    REQUIRE(static_cast<double>(y[i]) ==
            (bf16 ? doubleFromBf16(bf16FromDouble(xi)) : doubleFromHalf(halfFromDouble(xi))));
  }
}

// The k largest magnitudes, ties to the lower index: a sort-based reference.
template <typename T>
std::vector<T> topkReference(const std::vector<T>& x, size_t k) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return std::abs(x[a]) > std::abs(x[b]); });
  std::vector<T> y(x.size(), T(0));
  for (size_t j = 0; j < std::min(k, x.size()); ++j) y[order[j]] = x[order[j]];
  return y;
}

TEMPLATE_TEST_CASE("topk keeps exactly the k largest magnitudes", "[compression][unit]", float,
                   double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  const bool ties = GENERATE(false, true);
  CAPTURE(d, ties);
  std::vector<TestType> x = normalVector<TestType>(d, 11 + d);
  if (ties) {  // few distinct magnitudes and many zeros: the index tie-break decides
    core::Rng rng(17 + d);
    for (TestType& v : x) v = static_cast<TestType>(static_cast<int>(rng.below(7)) - 3);
  }
  const size_t ks[] = {1, 3, d / 10 + 1, d, d + 5};
  for (size_t k : ks) {
    if (k == 0) continue;  // k = 0 means "use the ratio"
    CAPTURE(k);
    auto c = make<TestType>(topkSpec(k));
    const auto y = decodeOk(*c, encodeWith(*c, x), d);
    const auto expected = topkReference(x, k);
    REQUIRE(y == expected);
    // Deterministic contraction: ||C(x) - x||^2 <= (1 - k/d) ||x||^2.
    if (d > 0) {
      const double keep = static_cast<double>(std::min(k, d)) / static_cast<double>(d);
      CHECK(squaredDistance<TestType>(y, x) <=
            (1.0 - keep) * squaredNorm<TestType>(x) * (1 + 1e-12));
    }
  }
  // k from the ratio: ceil(0.01 * d), at least 1.
  auto byRatio = make<TestType>(topkSpec(0, 0.01));
  const size_t kRatio = d == 0 ? 0 : std::max<size_t>(1, (d + 99) / 100);
  CHECK(decodeOk(*byRatio, encodeWith(*byRatio, x), d) == topkReference(x, kRatio));
}

TEMPLATE_TEST_CASE("topk sends NaN elements first, deterministically", "[compression][unit]", float,
                   double) {
  std::vector<TestType> x = {1, std::numeric_limits<TestType>::quiet_NaN(), -5,
                             std::numeric_limits<TestType>::infinity(), 2};
  auto c = make<TestType>(topkSpec(2));
  const auto y = decodeOk(*c, encodeWith(*c, x), x.size());
  CHECK(std::isnan(y[1]));
  CHECK(std::isinf(y[3]));
  CHECK((y[0] == 0 && y[2] == 0 && y[4] == 0));
}

TEMPLATE_TEST_CASE("randk keeps k random elements, scaled by d/k when asked", "[compression][unit]",
                   float, double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  const bool scaled = GENERATE(false, true);
  CAPTURE(d, scaled);
  std::vector<TestType> x = normalVector<TestType>(d, 23 + d);
  for (TestType& v : x) v = v == 0 ? TestType(1) : v;  // nonzero, so kept means nonzero
  const size_t ks[] = {1, 3, d / 10 + 1, d, d + 5};
  for (size_t k : ks) {
    if (k == 0) continue;  // k = 0 means "use the ratio"
    CAPTURE(k);
    auto c = make<TestType>(randkSpec(k, scaled));
    const size_t kept = std::min(k, d);
    const double factor = scaled && kept > 0 ? static_cast<double>(d) / kept : 1.0;
    std::set<size_t> seen;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const Frame f = encodeWith(*c, x, seed);
      CHECK(f == encodeWith(*c, x, seed));  // the draw is a function of the rng alone
      const auto y = decodeOk(*c, f, d);
      size_t nonzero = 0;
      for (size_t i = 0; i < d; ++i) {
        if (y[i] == 0) continue;
        ++nonzero;
        seen.insert(i);
        REQUIRE(y[i] == static_cast<TestType>(static_cast<double>(x[i]) * factor));
      }
      REQUIRE(nonzero == kept);
      if (kept == d) CHECK(y == x);
    }
    // Three draws of one element out of 1000 that all pick the same index would be a bug.
    if (d >= 1000 && k == 1) CHECK(seen.size() > 1);
  }
}

TEST_CASE("randk draws Floyd's sample from the caller's rng", "[compression][unit]") {
  struct Case {
    size_t d, k;
  };
  // Small and large k / d: the encoder tracks membership differently in the two regimes, the
  // sample must not depend on it.
  for (const Case& cs : {Case{1000, 1}, Case{1000, 10}, Case{1000, 500}, Case{4097, 4097},
                         Case{100, 99}, Case{100000, 3000}}) {
    CAPTURE(cs.d, cs.k);
    const uint64_t seed = 7 * cs.d + cs.k;
    core::Rng reference(seed);
    std::set<size_t> expected;
    for (size_t j = cs.d - cs.k; j < cs.d; ++j) {
      if (!expected.insert(reference.below(j + 1)).second) expected.insert(j);
    }
    auto c = make<double>(randkSpec(cs.k, false));
    const std::vector<double> x(cs.d, 1.0);
    const auto y = decodeOk(*c, encodeWith(*c, x, seed), cs.d);
    std::set<size_t> kept;
    for (size_t i = 0; i < cs.d; ++i) {
      if (y[i] != 0) kept.insert(i);
    }
    CHECK(kept == expected);
  }
}

TEMPLATE_TEST_CASE("sign decodes to +-||x||_1/d with the signs of x", "[compression][unit]", float,
                   double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  CAPTURE(d);
  auto c = make<TestType>(makeSpec(Kind::kSign));
  std::vector<TestType> x = normalVector<TestType>(d, 29 + d);
  if (d >= 7) x[4] = TestType(0), x[5] = TestType(-0.0);
  const Frame f = encodeWith(*c, x);
  REQUIRE(f.size() == kFrameHeaderBytes + sizeof(TestType) + (d + 7) / 8 + kFrameTrailerBytes);
  const auto y = decodeOk(*c, f, d);
  double l1 = 0;
  for (TestType v : x) l1 += std::abs(static_cast<double>(v));
  const auto scale = static_cast<TestType>(d == 0 ? 0.0 : l1 / static_cast<double>(d));
  for (size_t i = 0; i < d; ++i) {
    CAPTURE(i);
    REQUIRE(y[i] == (x[i] < 0 ? -scale : scale));
  }
}

TEMPLATE_TEST_CASE("qsgd decodes onto its level grid, one level from x", "[compression][unit]",
                   float, double) {
  const size_t d = GENERATE(from_range(std::begin(kSizes), std::end(kSizes)));
  const int bits = GENERATE(2, 3, 4, 8);
  const bool linf = GENERATE(false, true);
  const uint64_t bucket = GENERATE(uint64_t{1}, uint64_t{5}, uint64_t{512}, uint64_t{100000});
  CAPTURE(d, bits, linf, bucket);
  auto c = make<TestType>(qsgdSpec(bits, bucket, linf));
  const auto x = normalVector<TestType>(d, 31 + d);
  const Frame f = encodeWith(*c, x);
  const auto y = decodeOk(*c, f, d);
  const auto view = parseFrame(f);
  REQUIRE(view.isOk());
  const double s = (1 << (bits - 1)) - 1;
  const size_t buckets = (d + bucket - 1) / bucket;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * bucket, hi = std::min<size_t>(d, lo + bucket);
    const std::span<const TestType> part(x.data() + lo, hi - lo);
    double norm = 0;
    for (TestType v : part) {
      norm = linf ? std::max(norm, std::abs(static_cast<double>(v))) : norm + double(v) * double(v);
    }
    if (!linf) norm = std::sqrt(norm);
    const double scale = loadF32(view->payload, 4 * b);
    CAPTURE(b, norm, scale);
    REQUIRE(scale >= norm * (1 - 1e-15));  // rounded up to float32, so no level exceeds s
    REQUIRE(scale <= norm * (1 + 0x1p-23));
    for (size_t i = lo; i < hi; ++i) {
      const double level = std::abs(static_cast<double>(y[i])) / scale * s;
      CAPTURE(i, x[i], y[i], level);
      REQUIRE(std::abs(level - std::round(level)) < 1e-5);
      REQUIRE(std::round(level) <= s);
      REQUIRE(std::abs(static_cast<double>(y[i]) - x[i]) <= scale / s * (1 + 1e-6));
      if (y[i] != 0) REQUIRE((y[i] < 0) == (x[i] < 0));
    }
  }
}

TEMPLATE_TEST_CASE("encode replaces the output buffer's previous contents", "[compression][unit]",
                   float, double) {
  const CompressorSpec specs[] = {makeSpec(Kind::kFp16), topkSpec(2), randkSpec(2, true),
                                  makeSpec(Kind::kSign), qsgdSpec(4, 3, false)};
  const std::vector<TestType> x = {1, -2, 3, -4, 5};
  for (const CompressorSpec& spec : specs) {
    auto c = make<TestType>(spec);
    Frame reused(1000, std::byte{0xee});
    core::Rng rng(9);
    c->encode(x, rng, reused);
    CHECK(reused == encodeWith(*c, x, 9));
  }
}


TEST_CASE("the name table: every kind once, names round trip, frames carry the table's codec id",
          "[compression][unit]") {
  const auto kinds = compressorKinds();
  REQUIRE(kinds.size() == static_cast<size_t>(CompressorSpec::Kind::kDctSign) + 1);
  std::set<std::string> names;
  std::set<int> ids;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const auto& k = kinds[i];
    CAPTURE(k.name);
    CHECK(static_cast<size_t>(k.kind) == i);
    CHECK(names.insert(k.name).second);
    CHECK(ids.insert(static_cast<int>(k.codec)).second);
    CHECK(compressorKindFromName(k.name) == k.kind);
    CHECK(std::string(compressorKindName(k.kind)) == k.name);
    // A codec of this kind writes frames with the table's codec id (byte 5 of the header).
    CompressorSpec spec;
    spec.kind = k.kind;
    spec.ratio = 0.5;
    spec.meanEstimate = true;  // countsketch: the variant that needs no k or threshold
    spec.cols = 4;
    auto codec = createCompressor<float>(spec);
    REQUIRE(codec.isOk());
    CHECK((*codec)->id() == k.codec);
    const std::vector<float> x = {1.0f, -2.0f, 0.5f, 4.0f, -0.25f, 3.0f, 0.0f, 2.0f};
    core::Rng rng(3);
    std::vector<std::byte> frame;
    (*codec)->encode(x, rng, frame);
    REQUIRE(frame.size() > 5);
    CHECK(static_cast<int>(frame[5]) == static_cast<int>(k.codec));
  }
  CHECK_FALSE(compressorKindFromName("Identity").has_value());
  CHECK_FALSE(compressorKindFromName("").has_value());
  CHECK_FALSE(compressorKindFromName("topk ").has_value());
}

TEST_CASE("encodeSeen writes encodeStream's frames and, beside them, exactly what decode returns",
          "[compression][unit]") {
  // For every codec, with and without error feedback, over rounds of one stream: the frame is
  // byte for byte the one encodeStream writes from the same generator and state, and `seen` is
  // decode(frame) bit for bit (error feedback's residual comes from it: a wrong `seen` would
  // change the next rounds' frames).
  for (const auto& k : compressorKinds()) {
    for (const bool feedback : {false, true}) {
      if (feedback && k.kind == CompressorSpec::Kind::kAdaComp) continue;  // keeps its own residue
      CAPTURE(k.name, feedback);
      CompressorSpec spec;
      spec.kind = k.kind;
      spec.ratio = 0.25;
      spec.meanEstimate = true;
      spec.cols = 16;
      spec.errorFeedback = feedback;
      auto a = createCompressor<float>(spec);
      auto b = createCompressor<float>(spec);
      REQUIRE(a.isOk());
      REQUIRE(b.isOk());
      const size_t d = 37;
      auto stateA = (*a)->newState(d);
      auto stateB = (*b)->newState(d);
      core::Rng rngA(11), rngB(11), data(5);
      for (uint64_t round = 0; round < 4; ++round) {
        CAPTURE(round);
        std::vector<float> x(d);
        for (auto& v : x) v = static_cast<float>(data.normal());
        std::vector<std::byte> frameA, frameB;
        std::vector<float> seen(d, -7.0f), decoded(d, 9.0f);
        (*a)->encodeStream(x, rngA, StreamContext{round, 3, stateA.get()}, frameA);
        REQUIRE((*b)->encodeSeen(x, rngB, StreamContext{round, 3, stateB.get()}, frameB, seen)
                    .isOk());
        CHECK(frameA == frameB);
        REQUIRE((*b)->decode(frameB, decoded).isOk());
        CHECK(std::memcmp(seen.data(), decoded.data(), d * sizeof(float)) == 0);
      }
      CHECK(rngA.nextU64() == rngB.nextU64());
    }
  }
}

}  // namespace
}  // namespace starling::compression

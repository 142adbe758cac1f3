// Codecs behind createCompressor: round trips, 16-bit rounding, statistical properties, golden
// frames, frame sizes and a corruption corpus (docs/wire_format.md).
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
#include "runtime/core/rng.h"

namespace starling::compression {
namespace {

using codecs::bf16FromDouble;
using codecs::doubleFromBf16;
using codecs::doubleFromHalf;
using codecs::halfFromDouble;
using core::StatusCode;
using Kind = CompressorSpec::Kind;
using Frame = std::vector<std::byte>;
using Bytes = std::vector<std::byte>;

// ---------------------------------------------------------------------------------------------
// Helpers

using testing::fromHex;
using testing::toHex;

// The hand-written frame body followed by its CRC32C, little-endian.
Frame sealed(std::string_view bodyHex) {
  Frame f = fromHex(bodyHex);
  const uint32_t crc = crc32c(f);
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::byte>((crc >> (8 * i)) & 0xff));
  return f;
}

Bytes bytesOf(std::initializer_list<unsigned> v) {
  Bytes b;
  for (unsigned x : v) b.push_back(static_cast<std::byte>(x));
  return b;
}

void appendU32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

template <typename T>
void appendValue(Bytes& b, T v) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const U u = std::bit_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i) b.push_back(static_cast<std::byte>((u >> (8 * i)) & 0xff));
}

CompressorSpec makeSpec(Kind kind) {
  CompressorSpec s;
  s.kind = kind;
  return s;
}
CompressorSpec topkSpec(uint64_t k, double ratio = 0.0) {
  CompressorSpec s = makeSpec(Kind::kTopK);
  s.k = k;
  s.ratio = ratio;
  return s;
}
CompressorSpec randkSpec(uint64_t k, bool scaled, double ratio = 0.0) {
  CompressorSpec s = makeSpec(Kind::kRandK);
  s.k = k;
  s.ratio = ratio;
  s.scaled = scaled;
  return s;
}
CompressorSpec qsgdSpec(int bits, uint64_t bucket, bool linf) {
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

float loadF32(std::span<const std::byte> p, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= std::to_integer<uint32_t>(p[at + i]) << (8 * i);
  return std::bit_cast<float>(v);
}

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

// ---------------------------------------------------------------------------------------------
// Statistical properties (fixed seeds; tolerances of 5 standard errors estimated from the draws)

constexpr int kDraws = 20000;

TEMPLATE_TEST_CASE("scaled randk is unbiased", "[compression][unit]", float, double) {
  const size_t d = 40, k = 4;
  auto c = make<TestType>(randkSpec(k, true));
  const auto x = normalVector<TestType>(d, 101);
  std::vector<Moments> m(d);
  core::Rng rng(102);
  Frame f;
  std::vector<TestType> y(d);
  for (int t = 0; t < kDraws; ++t) {
    c->encode(x, rng, f);
    REQUIRE(c->decode(f, y).isOk());
    for (size_t i = 0; i < d; ++i) m[i].add(y[i]);
  }
  for (size_t i = 0; i < d; ++i) {
    CAPTURE(i, x[i], m[i].mean, m[i].standardError());
    REQUIRE(m[i].sd() > 0);
    CHECK(std::abs(m[i].mean - x[i]) <= 5 * m[i].standardError());
  }
}

TEMPLATE_TEST_CASE("unscaled randk contracts by 1 - k/d in expectation", "[compression][unit]",
                   float, double) {
  const size_t d = 50, k = 5;
  auto c = make<TestType>(randkSpec(k, false));
  const auto x = normalVector<TestType>(d, 103);
  const double bound = (1.0 - double(k) / d) * squaredNorm<TestType>(x);
  Moments err;
  core::Rng rng(104);
  Frame f;
  std::vector<TestType> y(d);
  for (int t = 0; t < kDraws; ++t) {
    c->encode(x, rng, f);
    REQUIRE(c->decode(f, y).isOk());
    err.add(squaredDistance<TestType>(y, x));
  }
  CAPTURE(err.mean, bound, err.standardError());
  CHECK(err.mean <= bound + 5 * err.standardError());
  // The bound is the exact expectation for rand-k, so it is also met from below.
  CHECK(err.mean >= bound - 5 * err.standardError());
}

TEMPLATE_TEST_CASE("qsgd is unbiased with the variance the levels imply", "[compression][unit]",
                   float, double) {
  const int bits = GENERATE(2, 3, 4, 8);
  const bool linf = GENERATE(false, true);
  CAPTURE(bits, linf);
  const size_t d = 300, bucket = 128;  // two full buckets and one of 44
  auto c = make<TestType>(qsgdSpec(bits, bucket, linf));
  const auto x = normalVector<TestType>(d, 200 + bits);
  const double s = (1 << (bits - 1)) - 1;
  const size_t buckets = (d + bucket - 1) / bucket;

  std::vector<Moments> value(d), err(buckets);
  core::Rng rng(300 + bits + linf);
  Frame f;
  std::vector<TestType> y(d);
  for (int t = 0; t < kDraws; ++t) {
    c->encode(x, rng, f);
    REQUIRE(c->decode(f, y).isOk());
    for (size_t i = 0; i < d; ++i) value[i].add(y[i]);
    for (size_t b = 0; b < buckets; ++b) {
      const size_t lo = b * bucket, n = std::min(bucket, d - lo);
      err[b].add(
          squaredDistance<TestType>(std::span(y).subspan(lo, n), std::span(x).subspan(lo, n)));
    }
  }
  const auto view = parseFrame(f);
  REQUIRE(view.isOk());
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * bucket, n = std::min(bucket, d - lo);
    const double scale = loadF32(view->payload, 4 * b);
    const double step = scale / s;
    double exact = 0;  // sum over the bucket of step^2 p (1 - p), p the round-up probability
    for (size_t i = lo; i < lo + n; ++i) {
      // Unbiased: E y_i = x_i. A coordinate whose rare round-up never happened has a sample
      // deviation of 0; one rounding event's deviation, step / sqrt(N), is the floor.
      const double sigma = std::max(value[i].sd(), step / std::sqrt(double(kDraws)));
      CAPTURE(b, i, x[i], value[i].mean, sigma);
      CHECK(std::abs(value[i].mean - x[i]) <= 5 * sigma / std::sqrt(double(kDraws)));
      const double r = std::min(s * std::abs(static_cast<double>(x[i])) / scale, s);
      const double p = r - std::floor(r);
      exact += step * step * p * (1 - p);
    }
    // QSGD's bound with d -> the bucket's size: E||Q(v) - v||^2 <= min(n/s^2, sqrt(n)/s) ||v||^2
    // (it holds for the linf scale too: ||v||_inf <= ||v||_2).
    const double norm2 = squaredNorm<TestType>(std::span(x).subspan(lo, n));
    const double bound = std::min(n / (s * s), std::sqrt(double(n)) / s) * norm2;
    const double tolerance =
        5 * err[b].standardError() + 1e-5 * norm2;  // + float32 output rounding
    CAPTURE(b, n, err[b].mean, exact, bound, tolerance);
    CHECK(exact <= bound);
    CHECK(err[b].mean <= bound + tolerance);
    CHECK(std::abs(err[b].mean - exact) <= tolerance);
  }
}

// ---------------------------------------------------------------------------------------------
// Golden frames: headers written by hand; the CRC32C computed.

TEST_CASE("golden frames", "[compression][unit]") {
  SECTION("identity float32 {1, -2.5}: encodeDense's bytes") {
    auto c = make<float>(makeSpec(Kind::kIdentity));
    const Frame expected = sealed(
        "53 54 52 4c 01 00 01 00  02 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "08 00 00 00 00 00 00 00  00 00 80 3f 00 00 20 c0");
    CHECK(toHex(encodeWith(*c, std::vector<float>{1.0f, -2.5f})) == toHex(expected));
  }
  SECTION("fp16 float32 {1, -2.5, 1/3, 1e6 (saturates), 0}") {
    auto c = make<float>(makeSpec(Kind::kFp16));
    const Frame expected = sealed(
        "53 54 52 4c 01 01 01 00  05 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "0a 00 00 00 00 00 00 00  00 3c 00 c1 55 35 ff 7b  00 00");
    const std::vector<float> x = {1.0f, -2.5f, 1.0f / 3, 1e6f, 0.0f};
    CHECK(toHex(encodeWith(*c, x)) == toHex(expected));
    CHECK(decodeOk(*c, expected, 5) ==
          std::vector<float>{1.0f, -2.5f, 0.333251953125f, 65504.0f, 0.0f});
  }
  SECTION("bf16 float64 {1, -2.5, 1/3, 1e39 (saturates)}") {
    auto c = make<double>(makeSpec(Kind::kBf16));
    const Frame expected = sealed(
        "53 54 52 4c 01 02 02 00  04 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "08 00 00 00 00 00 00 00  80 3f 20 c0 ab 3e 7f 7f");
    CHECK(toHex(encodeWith(*c, std::vector<double>{1.0, -2.5, 1.0 / 3, 1e39})) == toHex(expected));
  }
  SECTION("topk k=2 float64 {0.5, -3, 2, 0, 1}") {
    auto c = make<double>(topkSpec(2));
    // count 2 | index 1 | gap 1 | -3.0 | 2.0
    const Frame expected = sealed(
        "53 54 52 4c 01 03 02 00  05 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "16 00 00 00 00 00 00 00  02 00 00 00 01 01"
        "00 00 00 00 00 00 08 c0  00 00 00 00 00 00 00 40");
    CHECK(toHex(encodeWith(*c, std::vector<double>{0.5, -3, 2, 0, 1})) == toHex(expected));
  }
  SECTION("topk k=2 float32 d=300: a two-byte index varint") {
    auto c = make<float>(topkSpec(2));
    std::vector<float> x(300, 0.0f);
    x[5] = 1, x[200] = -4, x[299] = 2;
    // count 2 | index 200 = c8 01 | gap 99 = 63 | -4.0f | 2.0f
    const Frame expected = sealed(
        "53 54 52 4c 01 03 01 00  2c 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "0f 00 00 00 00 00 00 00  02 00 00 00 c8 01 63 00  00 80 c0 00 00 00 40");
    CHECK(toHex(encodeWith(*c, x)) == toHex(expected));
  }
  SECTION("randk k=d=2 scaled float32 {1, -2}") {
    auto c = make<float>(randkSpec(2, true));
    // params: scaled = 1, padded to 8 | count 2 | index 0 | gap 1 | 1.0f | -2.0f
    const Frame expected = sealed(
        "53 54 52 4c 01 04 01 00  02 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00"
        "0e 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00"
        "02 00 00 00 00 01 00 00  80 3f 00 00 00 c0");
    CHECK(toHex(encodeWith(*c, std::vector<float>{1, -2})) == toHex(expected));
  }
  SECTION("sign float32 {1, -2, 0, 3}") {
    auto c = make<float>(makeSpec(Kind::kSign));
    // scale 6/4 = 1.5f | signs: bit 1
    const Frame expected = sealed(
        "53 54 52 4c 01 05 01 00  04 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "05 00 00 00 00 00 00 00  00 00 c0 3f 02");
    CHECK(toHex(encodeWith(*c, std::vector<float>{1, -2, 0, 3})) == toHex(expected));
  }
  SECTION("sign float64 {-1, 1, -1, 1, 0, -1, 1, 1, -2}") {
    auto c = make<double>(makeSpec(Kind::kSign));
    // scale 9/9 = 1.0 | signs: bits 0, 2, 5 -> 25, bit 8 -> 01
    const Frame expected = sealed(
        "53 54 52 4c 01 05 02 00  09 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"
        "0a 00 00 00 00 00 00 00  00 00 00 00 00 00 f0 3f  25 01");
    CHECK(toHex(encodeWith(*c, std::vector<double>{-1, 1, -1, 1, 0, -1, 1, 1, -2})) ==
          toHex(expected));
  }
  SECTION("qsgd 5 bits l2 bucket 512 float32 {3, -4, 0}: levels 9, -12, 0 of s = 15") {
    auto c = make<float>(qsgdSpec(5, 512, false));
    // params: bits 5, l2, bucket 512 | scale 5.0f | codes 9, 16|12, 0 in 5-bit fields, LSB first
    const Frame expected = sealed(
        "53 54 52 4c 01 06 01 00  03 00 00 00 00 00 00 00  06 00 00 00 00 00 00 00"
        "06 00 00 00 00 00 00 00  05 00 00 02 00 00 00 00  00 00 a0 40 89 03");
    for (uint64_t seed = 1; seed < 4; ++seed) {  // every level is exact: no rounding draw matters
      CHECK(toHex(encodeWith(*c, std::vector<float>{3, -4, 0}, seed)) == toHex(expected));
    }
  }
  SECTION("qsgd 3 bits linf bucket 2 float64 {3, -2, 1, 0}: levels 3, -2 | 3, 0 of s = 3") {
    auto c = make<double>(qsgdSpec(3, 2, true));
    // params: bits 3, linf, bucket 2 | scales 3.0f, 1.0f | codes 3, 4|2, 3, 0 in 3-bit fields
    const Frame expected = sealed(
        "53 54 52 4c 01 06 02 00  04 00 00 00 00 00 00 00  06 00 00 00 00 00 00 00"
        "0a 00 00 00 00 00 00 00  03 01 02 00 00 00 00 00  00 00 40 40 00 00 80 3f  f3 00");
    CHECK(toHex(encodeWith(*c, std::vector<double>{3, -2, 1, 0})) == toHex(expected));
    CHECK(decodeOk(*c, expected, 4) == std::vector<double>{3, -2, 1, 0});
  }
}

// ---------------------------------------------------------------------------------------------
// Frame sizes

TEMPLATE_TEST_CASE("frame sizes follow the wire format's formulas", "[compression][unit]", float,
                   double) {
  constexpr size_t kOverhead = kFrameHeaderBytes + kFrameTrailerBytes;  // 36
  constexpr size_t kValue = sizeof(TestType);
  const size_t d = 1000;
  std::vector<TestType> x(d);
  for (size_t i = 0; i < d; ++i) x[i] = static_cast<TestType>(i + 1);  // the largest at the end

  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kIdentity)), x).size() == kOverhead + d * kValue);
  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kFp16)), x).size() == kOverhead + 2 * d);
  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kBf16)), x).size() == kOverhead + 2 * d);
  // top-10 = indices 990..999: count 4 + varint(990) 2 + nine gaps of 1 + 10 values.
  CHECK(encodeWith(*make<TestType>(topkSpec(10)), x).size() == kOverhead + 4 + 2 + 9 + 10 * kValue);
  // rand-k with k = d keeps every index: 1 + 999 one-byte varints; params 1 byte padded to 8.
  CHECK(encodeWith(*make<TestType>(randkSpec(d, true)), x).size() ==
        kOverhead + 8 + 4 + d + d * kValue);
  // rand-k 10 of 1000: the varint bytes depend on the gaps drawn.
  {
    auto c = make<TestType>(randkSpec(10, false));
    const Frame f = encodeWith(*c, x, 77);
    const auto y = decodeOk(*c, f, d);
    size_t varints = 0, previous = 0, kept = 0;
    for (size_t i = 0; i < d; ++i) {
      if (y[i] == 0) continue;
      const size_t gap = kept++ == 0 ? i : i - previous;
      varints += gap < 128 ? 1 : 2;
      previous = i;
    }
    CHECK(f.size() == kOverhead + 8 + 4 + varints + 10 * kValue);
  }
  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kSign)), x).size() == kOverhead + kValue + 125);
  // qsgd 4 bits, bucket 512: 2 float32 scales + 1000 * 4 / 8 code bytes; params 6 padded to 8.
  CHECK(encodeWith(*make<TestType>(qsgdSpec(4, 512, false)), x).size() == 36 + 8 + 2 * 4 + 500);
  CHECK(encodeWith(*make<TestType>(qsgdSpec(4, 512, false)), x).size() == 552);
  // qsgd 3 bits, bucket 128: 8 scales (7 x 128 + 104) + ceil(3000 / 8) = 375 code bytes.
  CHECK(encodeWith(*make<TestType>(qsgdSpec(3, 128, true)), x).size() == 36 + 8 + 32 + 375);
  // Empty vectors: just the fixed parts.
  const std::vector<TestType> empty;
  CHECK(encodeWith(*make<TestType>(topkSpec(3)), empty).size() == kOverhead + 4);
  CHECK(encodeWith(*make<TestType>(randkSpec(3, true)), empty).size() == kOverhead + 8 + 4);
  CHECK(encodeWith(*make<TestType>(makeSpec(Kind::kSign)), empty).size() == kOverhead + kValue);
  CHECK(encodeWith(*make<TestType>(qsgdSpec(8, 16, false)), empty).size() == kOverhead + 8);
}

// ---------------------------------------------------------------------------------------------
// Corruption corpus

const CompressorSpec kAllSpecs[] = {
    makeSpec(Kind::kIdentity), makeSpec(Kind::kFp16),
    makeSpec(Kind::kBf16),     topkSpec(3),
    randkSpec(3, true),        randkSpec(0, false, 0.5),
    makeSpec(Kind::kSign),     qsgdSpec(3, 4, false),
    qsgdSpec(8, 512, true),
};

TEMPLATE_TEST_CASE("malformed frames of every codec are corruption", "[compression][unit]", float,
                   double) {
  using Other = std::conditional_t<std::is_same_v<TestType, float>, double, float>;
  for (const CompressorSpec& spec : kAllSpecs) {
    for (size_t d : {size_t{0}, size_t{7}, size_t{20}}) {
      CAPTURE(compressorKindName(spec.kind), d);
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
      for (int id : {0, 1, 2, 3, 4, 5, 6, 7, 200, 255}) {
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
  }
}

TEMPLATE_TEST_CASE("malformed sparse payloads are corruption", "[compression][unit]", float,
                   double) {
  using T = TestType;
  const bool randk = GENERATE(false, true);
  CAPTURE(randk);
  auto c = make<T>(randk ? randkSpec(2, true) : topkSpec(2));
  const CodecId id = c->id();
  const Bytes params = randk ? bytesOf({1}) : Bytes{};
  const size_t d = 5;
  // count k | the given index bytes | k values of 1.0
  auto sparse = [](uint32_t k, const Bytes& indexBytes, size_t values) {
    Bytes p;
    appendU32(p, k);
    p.insert(p.end(), indexBytes.begin(), indexBytes.end());
    for (size_t j = 0; j < values; ++j) appendValue<T>(p, T(1));
    return p;
  };
  // The well-formed reference: indices 1 and 4.
  CHECK(decodeOk(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 3}), 2)), d) ==
        std::vector<T>{0, T(randk ? 2.5 : 1), 0, 0, T(randk ? 2.5 : 1)});

  SECTION("more elements than d") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(6, bytesOf({0, 1, 1, 1, 1, 1}), 6)), d);
  }
  SECTION("no element of a non-empty vector") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(0, {}, 0)), d);
  }
  SECTION("a count without the bytes behind it") {
    requireCorrupt(*c, craft<T>(id, 1000, params, sparse(1000, bytesOf({1, 3}), 2)), 1000);
  }
  SECTION("first index = d") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({5, 1}), 2)), d);
  }
  SECTION("a gap past the end") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 4}), 2)), d);
  }
  SECTION("a huge gap that wraps around 2^64") {
    requireCorrupt(
        *c,
        craft<T>(
            id, d, params,
            sparse(2, bytesOf({1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), 2)),
        d);
  }
  SECTION("a repeated index (gap 0)") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 0}), 2)), d);
  }
  SECTION("a varint that never ends") {
    requireCorrupt(*c,
                   craft<T>(id, d, params,
                            sparse(2,
                                   bytesOf({1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                            0x80, 0x80, 0x80}),
                                   0)),
                   d);
  }
  SECTION("an overlong varint (redundant zero group)") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 0x83, 0x00}), 2)), d);
  }
  SECTION("an eleven-byte varint") {
    requireCorrupt(
        *c,
        craft<T>(
            id, d, params,
            sparse(1, bytesOf({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}),
                   1)),
        d);
  }
  SECTION("one value missing") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 3}), 1)), d);
  }
  SECTION("one value too many") {
    requireCorrupt(*c, craft<T>(id, d, params, sparse(2, bytesOf({1, 3}), 3)), d);
  }
  SECTION("an empty payload") { requireCorrupt(*c, craft<T>(id, d, params, {}), d); }
  if (randk) {
    SECTION("scaled flag 2") {
      requireCorrupt(*c, craft<T>(id, d, bytesOf({2}), sparse(2, bytesOf({1, 3}), 2)), d);
    }
    SECTION("scaled flag 255") {
      requireCorrupt(*c, craft<T>(id, d, bytesOf({255}), sparse(2, bytesOf({1, 3}), 2)), d);
    }
  }
}

TEMPLATE_TEST_CASE("sign frames with a bad scale or padding are corruption", "[compression][unit]",
                   float, double) {
  using T = TestType;
  using L = std::numeric_limits<T>;
  auto c = make<T>(makeSpec(Kind::kSign));
  auto payload = [](T scale, uint8_t signs) {
    Bytes p;
    appendValue<T>(p, scale);
    p.push_back(std::byte{signs});
    return p;
  };
  const size_t d = 7;
  CHECK(decodeOk(*c, craft<T>(CodecId::kSign, d, {}, payload(T(2), 0x41)), d) ==
        std::vector<T>{-2, 2, 2, 2, 2, 2, -2});
  CHECK(decodeOk(*c, craft<T>(CodecId::kSign, d, {}, payload(T(0), 0)), d) == std::vector<T>(d, 0));
  for (T bad : {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity(), T(-1), T(-0.0)}) {
    CAPTURE(bad);
    requireCorrupt(*c, craft<T>(CodecId::kSign, d, {}, payload(bad, 0)), d);
  }
  requireCorrupt(*c, craft<T>(CodecId::kSign, d, {}, payload(T(1), 0x80)), d);  // bit 7 of 7
  requireCorrupt(*c, craft<T>(CodecId::kSign, d, bytesOf({0}), payload(T(1), 0)), d);
}

TEMPLATE_TEST_CASE("qsgd frames with bad params, scales or codes are corruption",
                   "[compression][unit]", float, double) {
  using T = TestType;
  auto c = make<T>(qsgdSpec(4, 2, false));
  auto params = [](unsigned bits, unsigned linf, uint32_t bucket) {
    Bytes p = bytesOf({bits, linf});
    appendU32(p, bucket);
    return p;
  };
  // d = 3, bits 4, bucket 2: scales 2.0f and 1.0f, codes 7, 8|1 (-1/7), 0 -> bytes 97 00.
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
  const auto y = decodeOk(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), good), d);
  CHECK(y == std::vector<T>{T(2.0), T(-2.0 / 7), T(0)});
  // A frame's own params decide how it decodes (this compressor was built with 4 bits, bucket 2):
  // 8 bits, linf, one bucket, scale 1, codes 127, 128|1, 0.
  Bytes own;
  appendValue<float>(own, 1.0f);
  own.insert(own.end(), {std::byte{0x7f}, std::byte{0x81}, std::byte{0x00}});
  CHECK(decodeOk(*c, craft<T>(CodecId::kQsgd, d, params(8, 1, 3), own), d) ==
        std::vector<T>{T(1), T(-1.0 / 127), T(0)});

  for (unsigned bits : {0u, 1u, 9u, 16u, 255u}) {
    CAPTURE(bits);
    requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(bits, 0, 2), good), d);
  }
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 2, 2), good), d);  // linf flag 2
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 0), good), d);  // bucket 0
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 1), good), d);  // 3 scales implied
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 3), good), d);  // 1 scale implied
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(8, 0, 2), good), d);  // 3 code bytes
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, -nan, inf, -inf, -1.0f, -0.0f}) {
    CAPTURE(bad);
    requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, bad, 0x97, 0)),
                   d);
    requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(bad, 1.0f, 0x97, 0)),
                   d);
  }
  // The code "negative zero" (sign bit, level 0) is not canonical.
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, 1.0f, 0x87, 0x00)),
                 d);
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, 1.0f, 0x08, 0x00)),
                 d);
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, 1.0f, 0x97, 0x08)),
                 d);
  // The unused high nibble of the last byte must be zero.
  requireCorrupt(*c, craft<T>(CodecId::kQsgd, d, params(4, 0, 2), payload(2.0f, 1.0f, 0x97, 0x10)),
                 d);
}

TEMPLATE_TEST_CASE(
    "non-finite input is carried by identity, fp16 and bf16 and rejected in sign "
    "and qsgd frames",
    "[compression][unit]", float, double) {
  using L = std::numeric_limits<TestType>;
  const std::vector<TestType> x = {1, L::quiet_NaN(), -2, L::infinity()};
  for (Kind kind : {Kind::kIdentity, Kind::kFp16, Kind::kBf16}) {
    auto c = make<TestType>(makeSpec(kind));
    const auto y = decodeOk(*c, encodeWith(*c, x), x.size());
    CHECK((y[0] == 1 && std::isnan(y[1]) && y[2] == -2 && y[3] == L::infinity()));
  }
  for (const CompressorSpec& spec :
       {makeSpec(Kind::kSign), qsgdSpec(4, 2, false), qsgdSpec(4, 2, true)}) {
    auto c = make<TestType>(spec);
    requireCorrupt(*c, encodeWith(*c, x), x.size());
  }
  // A norm beyond float32's range has no float32 scale: that bucket's frame is rejected too.
  if constexpr (std::is_same_v<TestType, double>) {
    auto c = make<double>(qsgdSpec(4, 2, false));
    requireCorrupt(*c, encodeWith(*c, std::vector<double>{1e39, 1.0}), 2);
    CHECK(decodeOk(*c, encodeWith(*c, std::vector<double>{1e30, 1.0}), 2)[0] > 0);
  }
}

// Mutated params and payloads, re-sealed so that the CRC is valid: decoding returns ok or
// kCorruption and never reads outside the frame (run under ASan to see the latter).
TEMPLATE_TEST_CASE("mutated frames never crash a decoder", "[compression][unit]", float, double) {
  core::Rng rng(500);
  for (const CompressorSpec& spec : kAllSpecs) {
    CAPTURE(compressorKindName(spec.kind));
    auto c = make<TestType>(spec);
    const size_t d = 37;
    const Frame f = encodeWith(*c, normalVector<TestType>(d, 501));
    const auto view = parseFrame(f);
    REQUIRE(view.isOk());
    int accepted = 0;
    for (int t = 0; t < 3000; ++t) {
      Bytes params(view->params.begin(), view->params.end());
      Bytes payload(view->payload.begin(), view->payload.end());
      const int edits = 1 + static_cast<int>(rng.below(3));
      for (int e = 0; e < edits; ++e) {
        Bytes& target = (!params.empty() && rng.below(4) == 0) ? params : payload;
        switch (rng.below(4)) {
          case 0:
            if (!target.empty())
              target[rng.below(target.size())] ^=
                  std::byte{static_cast<uint8_t>(1u << rng.below(8))};
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
      std::vector<TestType> out(d);
      const core::Status st = c->decode(craft<TestType>(c->id(), d, params, payload), out);
      REQUIRE((st.isOk() || st.code() == StatusCode::kCorruption));
      if (st.isOk()) {
        ++accepted;
        if (spec.kind == Kind::kSign || spec.kind == Kind::kQsgd) {
          REQUIRE(std::all_of(out.begin(), out.end(), [](TestType v) { return std::isfinite(v); }));
        }
      }
    }
    // Not everything is rejected: payload bytes of dense codecs are all valid values.
    if (spec.kind == Kind::kFp16) CHECK(accepted > 0);
  }
}

}  // namespace
}  // namespace starling::compression

// The exponential-level and adaptive codecs (nuqsgd, natural, natural_dithering, topk_dithering,
// adacomp, dqsgd): construction, round trips and statistics against the papers' bounds.
// codecs_family_adaptive_test.cc has the AdaComp/DQSGD rules and frame sizes,
// codecs_family_corrupt_test.cc the corruption corpora, codecs_frames_test.cc the golden frames.
#include <bit>
#include <iomanip>
#include <iostream>

#include "tests/compression/codec_family_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;
using namespace family_testing;

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

}  // namespace
}  // namespace starling::compression

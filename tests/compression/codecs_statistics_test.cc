// Statistical properties of the codecs: unbiasedness, variance bounds, contraction.
#include "tests/compression/codec_testing.h"

namespace starling::compression {
namespace {

using namespace codec_testing;

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


}  // namespace
}  // namespace starling::compression

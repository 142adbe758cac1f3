// Count-Sketch and error feedback. The codec is checked against a plain per-row scatter/gather
// sketch written here from the hash definition in docs/wire_format.md (codec 11), and its
// statistics against the Count-Sketch theory (docs/algorithms.md §12.11).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "codec_testing.h"

namespace starling::compression::codec_testing {
namespace {

CompressorSpec sketchSpec(uint64_t rows, uint64_t cols, uint64_t k, double threshold = 0.0,
                          bool mean = false) {
  CompressorSpec s;
  s.kind = Kind::kCountSketch;
  s.rows = rows;
  s.cols = cols;
  s.k = k;
  s.threshold = threshold;
  s.meanEstimate = mean;
  return s;
}

// Params of a countsketch frame (docs/wire_format.md).
struct Params {
  bool mean;
  uint32_t rows, cols;
  uint64_t k;
  float threshold;
  uint64_t seed;
  double scale;
};

uint64_t le(std::span<const std::byte> p, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(std::to_integer<uint8_t>(p[at + i])) << (8 * i);
  return v;
}

Params paramsOf(const Frame& f) {
  auto v = parseFrame(f);
  REQUIRE(v.isOk());
  REQUIRE(v->params.size() == 34);
  const auto p = v->params;
  return Params{le(p, 0, 1) == 1,
                static_cast<uint32_t>(le(p, 1, 1)),
                static_cast<uint32_t>(le(p, 2, 4)),
                le(p, 6, 8),
                std::bit_cast<float>(static_cast<uint32_t>(le(p, 14, 4))),
                le(p, 18, 8),
                std::bit_cast<double>(le(p, 26, 8))};
}

// The oracle: the documented hashes, one row at a time.
struct Oracle {
  uint64_t seed;
  uint32_t rows, cols;

  uint64_t coef(uint32_t j, uint64_t w) const {
    return core::deriveSeed(seed, 0x534b4554, j, w);
  }
  uint32_t bucket(uint32_t j, uint64_t i) const {
    const uint64_t h = (coef(j, 0) * i + coef(j, 1)) >> 32;
    return static_cast<uint32_t>((h * cols) >> 32);
  }
  double sign(uint32_t j, uint64_t i) const {
    return ((coef(j, 2) * i + coef(j, 3)) >> 63) != 0 ? -1.0 : 1.0;
  }
  template <typename T>
  std::vector<std::vector<T>> table(const std::vector<T>& x) const {
    std::vector<std::vector<T>> t(rows, std::vector<T>(cols, T(0)));
    for (uint32_t j = 0; j < rows; ++j) {
      for (size_t i = 0; i < x.size(); ++i) t[j][bucket(j, i)] += static_cast<T>(sign(j, i)) * x[i];
    }
    return t;
  }
  // Median (lower, for even rows) or mean of the rows' estimates.
  template <typename T>
  std::vector<T> estimate(const std::vector<std::vector<T>>& t, size_t d, bool mean) const {
    std::vector<T> est(d);
    for (size_t i = 0; i < d; ++i) {
      std::vector<T> v;
      for (uint32_t j = 0; j < rows; ++j) v.push_back(static_cast<T>(sign(j, i)) * t[j][bucket(j, i)]);
      if (mean) {
        T s = 0;
        for (T e : v) s += e;
        est[i] = s * (T(1) / static_cast<T>(rows));
      } else {
        std::sort(v.begin(), v.end());
        est[i] = v[(rows - 1) / 2];
      }
    }
    return est;
  }
};

// The k largest |est|, ties to lower indices; everything else zeroed.
template <typename T>
std::vector<T> topK(std::vector<T> est, uint64_t k) {
  std::vector<size_t> idx(est.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return std::abs(est[a]) > std::abs(est[b]); });
  std::vector<T> out(est.size(), T(0));
  for (size_t m = 0; m < std::min<size_t>(k, idx.size()); ++m) out[idx[m]] = est[idx[m]];
  return out;
}

template <typename T>
std::vector<T> oracleDecode(const Params& p, const std::vector<T>& x) {
  const Oracle o{p.seed, p.rows, p.cols};
  const auto t = o.table(x);
  std::vector<T> y = o.estimate(t, x.size(), p.mean);
  if (!p.mean && !x.empty()) {
    if (p.k > 0) {
      y = topK(y, p.k);
    } else {
      std::vector<double> sums;
      for (const auto& row : t) {
        double s = 0;
        for (T v : row) s += static_cast<double>(v) * v;
        sums.push_back(s);
      }
      std::sort(sums.begin(), sums.end());
      const double thr = static_cast<double>(p.threshold) * std::sqrt(sums[(p.rows - 1) / 2]);
      for (T& v : y) {
        if (!(std::abs(static_cast<double>(v)) >= thr)) v = T(0);
      }
    }
  }
  for (T& v : y) v = static_cast<T>(p.scale) * v;
  return y;
}

// lambda = <x, y> / ||y||^2 of the unscaled estimate y.
template <typename T>
double lsScale(const std::vector<T>& x, const std::vector<T>& y) {
  double xy = 0, yy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xy += static_cast<double>(x[i]) * y[i];
    yy += static_cast<double>(y[i]) * y[i];
  }
  return yy > 0 ? xy / yy : 0.0;
}

}  // namespace

TEMPLATE_TEST_CASE("countsketch decodes to the per-row scatter/gather oracle", "[compression]",
                   float, double) {
  using T = TestType;
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  struct Case {
    size_t d;
    uint64_t rows, cols, k;
    double threshold;
    bool mean;
  };
  const Case cases[] = {{0, 5, 10, 3, 0, false},    {1, 1, 1, 1, 0, false},
                        {7, 4, 3, 2, 0, false},     {7, 3, 5, 50, 0, false},  // k >= d
                        {200, 5, 40, 20, 0, false}, {1001, 5, 64, 10, 0, false},
                        {1001, 3, 64, 0, 0.05, false}, {200, 5, 40, 0, 0, true},
                        {1001, 2, 97, 0, 0, true},  {1, 1, 1, 0, 0, true}};
  for (const Case& c : cases) {
    DYNAMIC_SECTION("d " << c.d << ", " << c.rows << " x " << c.cols << ", k " << c.k
                         << ", threshold " << c.threshold << (c.mean ? ", mean" : ", median")) {
      auto codec = make<T>(sketchSpec(c.rows, c.cols, c.k, c.threshold, c.mean));
      const auto x = normalVector<T>(c.d, 17 + c.d);
      const Frame f = encodeWith(*codec, x, 99);
      const Params p = paramsOf(f);
      CHECK(p.rows == c.rows);
      CHECK(p.cols == c.cols);
      CHECK(p.mean == c.mean);
      CHECK(p.k == (c.mean || c.d == 0 || c.threshold > 0 ? 0 : std::min<uint64_t>(c.k, c.d)));
      const auto got = decodeOk(*codec, f, c.d);
      // The scale is the least-squares fit of x on the unscaled estimate.
      Params unscaled = p;
      unscaled.scale = 1.0;
      const auto y = oracleDecode<T>(unscaled, x);
      CHECK(p.scale == Approx(lsScale(x, y)).epsilon(1e-9).margin(1e-12));
      const auto want = oracleDecode<T>(p, x);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < c.d; ++i) {
        INFO("coordinate " << i);
        CHECK(static_cast<double>(got[i]) ==
              Approx(static_cast<double>(want[i])).epsilon(tol).margin(tol));
      }
      // The payload is the table, nothing else: r * c values of T.
      CHECK(parseFrame(f)->payload.size() == c.rows * c.cols * sizeof(T));
    }
  }
}

TEST_CASE("countsketch never sends something worse than nothing", "[compression]") {
  // The case that breaks a naive sketch: a dense Gaussian vector, d = 200, a 5 x 40 table, top
  // 20 heavy hitters. The unscaled median estimates are worse than sending zeros on average;
  // scaled by lambda = <x, y>/||y||^2 the error is ||x||^2 (1 - cos^2) <= ||x||^2 every time.
  auto codec = make<double>(sketchSpec(5, 40, 20));
  double naive = 0, scaled = 0;
  const int draws = 200;
  for (int s = 0; s < draws; ++s) {
    const auto x = normalVector<double>(200, 1000 + s);
    const Frame f = encodeWith(*codec, x, 5000 + s);
    Params p = paramsOf(f);
    const auto got = decodeOk(*codec, f, 200);
    const double nx = squaredNorm<double>(x);
    const double e = squaredDistance<double>(got, x) / nx;
    CHECK(e <= 1.0 + 1e-12);
    scaled += e;
    p.scale = 1.0;
    naive += squaredDistance<double>(oracleDecode<double>(p, x), x) / nx;
  }
  naive /= draws;
  scaled /= draws;
  INFO("mean relative error: naive " << naive << ", scaled " << scaled);
  CHECK(naive > 1.0);
  CHECK(scaled < 1.0);
}

TEST_CASE("countsketch mean estimate: unbiased rows, variance (d-1)/(r c), contraction bound",
          "[compression]") {
  // For one row, est_i - x_i = sum_{k != i} [h(k) = h(i)] s(i) s(k) x_k: mean 0 and variance
  // sum_{k != i} x_k^2 / c for pairwise independent h and s. Averaging r independent rows:
  // E||est - x||^2 = (d - 1) ||x||^2 / (r c) =: omega ||x||^2. The codec scales the estimate by
  // the least-squares lambda, which is never worse than the fixed 1/(1 + omega), so
  // E||C(x) - x||^2 <= omega / (1 + omega) ||x||^2, i.e. delta >= r c / (r c + d - 1).
  const size_t d = 300;
  const uint32_t r = 3, c = 50;
  const double omega = static_cast<double>(d - 1) / (r * c);
  auto codec = make<double>(sketchSpec(r, c, 0, 0, true));
  const auto x = normalVector<double>(d, 4242);
  const double nx = squaredNorm<double>(x);
  const int draws = 400;
  std::vector<double> rawErr, mean(d, 0.0);
  double scaledErr = 0;
  for (int s = 0; s < draws; ++s) {
    const Frame f = encodeWith(*codec, x, 77 + s);
    Params p = paramsOf(f);
    scaledErr += squaredDistance<double>(decodeOk(*codec, f, d), x) / nx;
    p.scale = 1.0;
    const auto est = oracleDecode<double>(p, x);
    rawErr.push_back(squaredDistance<double>(est, x) / nx);
    for (size_t i = 0; i < d; ++i) mean[i] += est[i] / draws;
  }
  double m = 0, v = 0;
  for (double e : rawErr) m += e / draws;
  for (double e : rawErr) v += (e - m) * (e - m) / (draws - 1);
  const double ci = 4.0 * std::sqrt(v / draws);  // 4 standard errors
  INFO("raw relative error " << m << " +- " << ci << ", theory " << omega);
  CHECK(std::abs(m - omega) < ci);
  // Unbiased: each coordinate's mean estimate within 5 standard errors of x_i, where the
  // per-coordinate variance is at most ||x||^2 / (r c).
  const double se = std::sqrt(nx / (r * c) / draws);
  for (size_t i = 0; i < d; ++i) {
    INFO("coordinate " << i);
    CHECK(std::abs(mean[i] - x[i]) < 5.0 * se);
  }
  scaledErr /= draws;
  CHECK(scaledErr <= omega / (1 + omega));
}

TEST_CASE("countsketch median estimates meet the Chebyshev-median bound and recover heavy hitters",
          "[compression]") {
  // Per row, P(|est_i - x_i| >= eps ||x||) <= 1 / (c eps^2) =: p (Chebyshev on the variance
  // above). The median of r rows is off only if at least ceil(r/2) rows are, so the fraction of
  // coordinates off by eps ||x|| is at most sum_{m >= ceil(r/2)} C(r, m) p^m (1-p)^(r-m).
  const size_t d = 20000;
  const uint32_t r = 5, c = 100;
  const double eps = 0.2;
  const double p = 1.0 / (c * eps * eps);  // 0.25
  double bound = 0;
  for (uint32_t m = (r + 1) / 2; m <= r; ++m) {
    bound += std::tgamma(r + 1.0) / (std::tgamma(m + 1.0) * std::tgamma(r - m + 1.0)) *
             std::pow(p, m) * std::pow(1 - p, r - m);
  }
  // Recovery: k = 10 planted heavy hitters of magnitude 60 over a unit Gaussian tail
  // (||x|| ~ 237). A heavy hitter is lost to the top-k only when a tail coordinate's median
  // estimate reaches its level, which in practice needs that coordinate to share a bucket with a
  // heavy hitter in at least ceil(r/2) rows (the tail noise per row, ||x||/sqrt(c), is 12 at
  // c = 400). Expected false heavy hitters per vector:
  //   E_fp <= d sum_{m >= ceil(r/2)} C(r, m) q^m (1 - q)^(r - m),  q = k / c,
  // each displacing at most one planted coordinate. c = 400: E_fp ~ 3; c = 4000: E_fp ~ 3e-3.
  const uint64_t recoveryCols[2] = {400, 4000};
  double expectedFalse[2] = {0, 0};
  for (size_t c2 = 0; c2 < 2; ++c2) {
    const double q = 10.0 / recoveryCols[c2];
    for (uint32_t m = (r + 1) / 2; m <= r; ++m) {
      expectedFalse[c2] += d * std::tgamma(r + 1.0) /
                           (std::tgamma(m + 1.0) * std::tgamma(r - m + 1.0)) * std::pow(q, m) *
                           std::pow(1 - q, r - m);
    }
  }
  int recovered[2] = {0, 0}, planted[2] = {0, 0};
  double offFraction = 0;
  const int draws = 10;
  for (int s = 0; s < draws; ++s) {
    auto x = normalVector<double>(d, 31 + s);
    std::vector<size_t> heavy;
    core::Rng rng(900 + s);
    while (heavy.size() < 10) {
      const size_t i = rng.below(d);
      if (std::find(heavy.begin(), heavy.end(), i) == heavy.end()) heavy.push_back(i);
    }
    for (size_t i : heavy) x[i] = rng.bernoulli(0.5) ? 60.0 : -60.0;
    const double normX = std::sqrt(squaredNorm<double>(x));
    Params params{false, r, c, 10, 0.0f, rng.nextU64(), 1.0};
    const Oracle o{params.seed, r, c};
    const auto est = o.estimate(o.table(x), d, false);
    size_t off = 0;
    for (size_t i = 0; i < d; ++i) off += std::abs(est[i] - x[i]) >= eps * normX ? 1 : 0;
    offFraction += static_cast<double>(off) / d / draws;
    // Through the codec, with c = 400 and c = 4000 columns.
    std::vector<double> got[2];
    for (size_t c2 = 0; c2 < 2; ++c2) {
      auto codec = make<double>(sketchSpec(r, recoveryCols[c2], 10));
      got[c2] = decodeOk(*codec, encodeWith(*codec, x, 600 + s), d);
    }
    for (size_t c2 = 0; c2 < 2; ++c2) {
      for (size_t i : heavy) {
        planted[c2] += 1;
        recovered[c2] += got[c2][i] != 0.0 ? 1 : 0;
      }
    }
  }
  INFO("fraction off by " << eps << " ||x||: " << offFraction << ", bound " << bound);
  CHECK(offFraction <= bound);
  for (size_t c2 = 0; c2 < 2; ++c2) {
    // Misses are at most the false heavy hitters: Poisson mean draws * E_fp, plus 4 sigma.
    const double mean = draws * expectedFalse[c2];
    INFO("c = " << recoveryCols[c2] << ": recall " << recovered[c2] << "/" << planted[c2]
                << ", expected misses <= " << mean);
    CHECK(planted[c2] - recovered[c2] <= mean + 4 * std::sqrt(mean) + 1e-9);
    if (mean < 0.1) CHECK(recovered[c2] == planted[c2]);
  }
}

TEST_CASE("countsketch mean frames of one round add up in sketch space", "[compression]") {
  // Three senders, one round: the weighted sum of their tables decodes to the weighted sum of
  // their decoded vectors (mean estimate and lambda scaling are both linear).
  const size_t d = 500;
  auto codec = make<double>(sketchSpec(4, 60, 0, 0, true));
  const StreamContext ctx{12, 0xfeed, nullptr};
  const double w[3] = {0.5, 0.3, 0.2};
  auto acc = codec->newAccumulator(d);
  REQUIRE(acc != nullptr);
  acc->reset();
  std::vector<double> want(d, 0.0);
  std::vector<Frame> frames;
  for (int s = 0; s < 3; ++s) {
    const auto x = normalVector<double>(d, 70 + s, 1.0 + s);
    core::Rng rng(s);
    Frame f;
    codec->encodeStream(x, rng, ctx, f);
    const auto y = decodeOk(*codec, f, d);
    for (size_t i = 0; i < d; ++i) want[i] += w[s] * y[i];
    REQUIRE(acc->add(f, w[s]).isOk());
    frames.push_back(f);
  }
  std::vector<double> got(d);
  acc->finish(got);
  for (size_t i = 0; i < d; ++i) {
    INFO("coordinate " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(1e-12).margin(1e-12));
  }
  // A frame of another round has other hashes: rejected, and the sum is unchanged.
  const StreamContext other{13, 0xfeed, nullptr};
  core::Rng rng(9);
  Frame late;
  codec->encodeStream(normalVector<double>(d, 3), rng, other, late);
  CHECK(acc->check(late).code() == StatusCode::kCorruption);
  CHECK(acc->add(late, 1.0).code() == StatusCode::kCorruption);
  std::vector<double> again(d);
  acc->finish(again);
  CHECK(again == got);
  // Median frames are not linear: no accumulator.
  CHECK(make<double>(sketchSpec(4, 60, 5))->newAccumulator(d) == nullptr);
}

TEMPLATE_TEST_CASE("countsketch rejects corrupt frames without touching the output",
                   "[compression]", float, double) {
  using T = TestType;
  const size_t d = 50;
  auto codec = make<T>(sketchSpec(3, 8, 5));
  const Frame good = encodeWith(*codec, normalVector<T>(d, 1), 2);
  const auto v = parseFrame(good);
  REQUIRE(v.isOk());
  const Bytes params(v->params.begin(), v->params.end());
  const Bytes payload(v->payload.begin(), v->payload.end());
  auto with = [&](size_t at, std::initializer_list<unsigned> bytes) {
    Bytes p = params;
    size_t i = at;
    for (unsigned b : bytes) p[i++] = static_cast<std::byte>(b);
    return craft<T>(CodecId::kCountSketch, d, p, payload);
  };
  CHECK(decodeOk(*codec, craft<T>(CodecId::kCountSketch, d, params, payload), d).size() == d);
  requireCorrupt(*codec, with(0, {2}), d);                   // estimate flag
  requireCorrupt(*codec, with(1, {0}), d);                   // 0 rows
  requireCorrupt(*codec, with(1, {65}), d);                  // 65 rows
  requireCorrupt(*codec, with(1, {4}), d);                   // 4 rows: payload too short
  requireCorrupt(*codec, with(2, {0, 0, 0, 0}), d);          // 0 cols
  requireCorrupt(*codec, with(2, {0, 0, 0, 0x81}), d);       // 2^31 + 1 cols
  requireCorrupt(*codec, with(6, {51, 0, 0, 0, 0, 0, 0, 0}), d);  // k > d
  requireCorrupt(*codec, with(6, {0, 0, 0, 0, 0, 0, 0, 0}), d);   // neither k nor threshold
  requireCorrupt(*codec, with(14, {0, 0, 0x80, 0x3f}), d);   // both k and threshold (1.0)
  requireCorrupt(*codec, with(0, {1}), d);                   // mean with k
  requireCorrupt(*codec, with(26, {0, 0, 0, 0, 0, 0, 0xf8, 0x7f}), d);  // NaN scale
  requireCorrupt(*codec, with(26, {0, 0, 0, 0, 0, 0, 0xf0, 0x7f}), d);  // infinite scale
  Bytes nan = payload;
  const T bad = std::numeric_limits<T>::quiet_NaN();
  std::memcpy(nan.data() + sizeof(T) * 7, &bad, sizeof(T));
  requireCorrupt(*codec, craft<T>(CodecId::kCountSketch, d, params, nan), d);
  Bytes shortPayload(payload.begin(), payload.end() - 1);
  requireCorrupt(*codec, craft<T>(CodecId::kCountSketch, d, params, shortPayload), d);
  requireCorrupt(*codec, craft<T>(CodecId::kCountSketch, d + 1, params, payload), d);
  // A non-finite input gives a frame nobody decodes (the run then fails loudly).
  auto x = normalVector<T>(d, 4);
  x[3] = std::numeric_limits<T>::infinity();
  requireCorrupt(*codec, encodeWith(*codec, x, 5), d);
}

TEST_CASE("error feedback sends, over the rounds, everything it was given", "[compression]") {
  // p_t = C(e_t + v_t), e_{t+1} = e_t + v_t - p_t: so sum_t p_t + e_T = sum_t v_t exactly (up to
  // rounding), whatever the codec drops.
  CompressorSpec spec = topkSpec(3);
  spec.errorFeedback = true;
  auto ef = make<double>(spec);
  auto plain = make<double>(topkSpec(3));
  const size_t d = 40;
  auto state = ef->newState(d);
  REQUIRE(state != nullptr);
  std::vector<double> sumV(d, 0.0), sumP(d, 0.0);
  core::Rng rng(1);
  Frame f;
  std::vector<double> last;
  for (uint64_t t = 0; t < 30; ++t) {
    const auto v = normalVector<double>(d, 300 + t);
    ef->encodeStream(v, rng, StreamContext{t, 0, state.get()}, f);
    const auto p = decodeOk(*ef, f, d);
    CHECK(std::count_if(p.begin(), p.end(), [](double e) { return e != 0.0; }) == 3);
    for (size_t i = 0; i < d; ++i) {
      sumV[i] += v[i];
      sumP[i] += p[i];
    }
    last = v;
  }
  // The residual is what is left: send it with an identity codec's eyes, i.e. compare sums
  // through one more round with v = 0 repeated until the residual is drained (top-3 of 40
  // coordinates drains at least 3 per round).
  for (uint64_t t = 30; t < 60; ++t) {
    const std::vector<double> zero(d, 0.0);
    ef->encodeStream(zero, rng, StreamContext{t, 0, state.get()}, f);
    const auto p = decodeOk(*ef, f, d);
    for (size_t i = 0; i < d; ++i) sumP[i] += p[i];
  }
  for (size_t i = 0; i < d; ++i) {
    INFO("coordinate " << i);
    CHECK(sumP[i] == Approx(sumV[i]).margin(1e-9));
  }
  // The frame is the inner codec's: a plain top-k decoder reads it.
  CHECK(decodeOk(*plain, f, d).size() == d);
  CHECK(ef->id() == CodecId::kTopK);
  // encode() is the first frame of a fresh stream, i.e. the inner codec's frame.
  const auto x = normalVector<double>(d, 8);
  CHECK(encodeWith(*ef, x, 3) == encodeWith(*plain, x, 3));
}

}  // namespace starling::compression::codec_testing

// Gradient estimators (optim/oracle.h): unbiasedness, exact variances, the variance reduction of
// LSVRG and SAGA, and proximal gradient descent driven by each of them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "optim/oracle.h"
#include "optim/regularizer.h"
#include "tests/optim/random_data.h"

namespace starling::optim {
namespace {

using Kind = EstimatorSpec::Kind;
using testing::randomDataset;
using testing::randomVector;

// loss_j'(z), written out independently of problem.cc.
double slope(LossKind loss, double z, double label) {
  if (loss == LossKind::kLeastSquares) return z - label;
  const double b = label > 0.0 ? 1.0 : -1.0;
  return -b / (1.0 + std::exp(b * z));
}

double rowDot(const Dataset& d, size_t j, const std::vector<double>& x) {
  double z = 0.0;
  for (int64_t k = d.rowPtr[j]; k < d.rowPtr[j + 1]; ++k) z += d.values[k] * x[d.colIdx[k]];
  return z;
}

double sqDist(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t k = 0; k < a.size(); ++k) s += (a[k] - b[k]) * (a[k] - b[k]);
  return s;
}

double relError(const std::vector<double>& x, const std::vector<double>& ref) {
  return std::sqrt(sqDist(x, ref) / sqDist(ref, std::vector<double>(ref.size(), 0.0)));
}

EstimatorSpec spec(Kind kind, size_t batch, double p = 0.0) {
  EstimatorSpec e;
  e.kind = kind;
  e.batch = batch;
  e.p = p;
  return e;
}

// Node 1 of 4 with 40 of the 160 samples (scale n/m = 1/40).
struct Shard {
  static constexpr int kD = 5;
  static constexpr size_t kTotal = 160;
  static constexpr int kNodes = 4;
  Dataset data = randomDataset(40, kD, 0.7, 41);
  ProblemSpec problem;
  std::unique_ptr<LocalObjective<double>> f;
  double scale = static_cast<double>(kNodes) / kTotal;

  explicit Shard(LossKind loss) : problem{loss, 0.1} {
    f = LocalObjective<double>::create(problem, data, kTotal, kNodes);
  }
  std::vector<double> gradient(const std::vector<double>& x) const {
    std::vector<double> g(x.size());
    f->gradient(x, g);
    return g;
  }
  // Exact single-draw variance (trace of the covariance) of the per-sample term
  //   c_j = s m_i (loss_j'(x) - loss_j'(y)) a_j     (y = x0 for lsvrg/saga, "none" for sgd),
  // i.e. E||G - grad f_i(x)||^2 for batch 1; a batch of B with replacement divides it by B.
  double varianceOneDraw(const std::vector<double>& x, const std::vector<double>* y) const {
    const size_t m = data.samples();
    std::vector<std::vector<double>> c(m, std::vector<double>(kD, 0.0));
    std::vector<double> mean(kD, 0.0);
    for (size_t j = 0; j < m; ++j) {
      double r = slope(problem.loss, rowDot(data, j, x), data.labels[j]);
      if (y) r -= slope(problem.loss, rowDot(data, j, *y), data.labels[j]);
      for (int64_t k = data.rowPtr[j]; k < data.rowPtr[j + 1]; ++k) {
        c[j][data.colIdx[k]] = scale * static_cast<double>(m) * r * data.values[k];
      }
      for (int k = 0; k < kD; ++k) mean[k] += c[j][k] / static_cast<double>(m);
    }
    double v = 0.0;
    for (const auto& cj : c) v += sqDist(cj, mean);
    return v / static_cast<double>(m);
  }
};

// One draw of G at x from a fresh oracle whose state (w, or the table) was set at x0.
std::vector<double> drawAt(const Shard& s, const EstimatorSpec& e, uint64_t seed,
                           const std::vector<double>& x0, const std::vector<double>& x) {
  auto oracle = createOracle<double>(e, *s.f, seed);
  std::vector<double> g(x.size());
  if (e.kind != Kind::kSgd) oracle->gradient(x0, g);
  oracle->gradient(x, g);
  return g;
}

TEST_CASE("Every estimator is unbiased, with the variance the definitions give", "[optim][unit]") {
  const Kind kind = GENERATE(Kind::kSgd, Kind::kLsvrg, Kind::kSaga);
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const size_t batch = GENERATE(size_t{1}, size_t{4});
  const Shard s(loss);
  const auto x0 = randomVector(Shard::kD, 0.5, 2);
  const auto x = randomVector(Shard::kD, 0.5, 3);
  const auto full = s.gradient(x);

  const int draws = 20000;
  std::vector<double> sum(Shard::kD, 0.0), sumSq(Shard::kD, 0.0);
  double errSum = 0.0, errSqSum = 0.0;
  for (int t = 0; t < draws; ++t) {
    const auto g = drawAt(s, spec(kind, batch), core::deriveSeed(17, t), x0, x);
    for (int k = 0; k < Shard::kD; ++k) {
      sum[k] += g[k];
      sumSq[k] += g[k] * g[k];
    }
    const double err = sqDist(g, full);
    errSum += err;
    errSqSum += err * err;
  }
  // The mean of i.i.d. draws within 5 standard errors of grad f_i(x), per coordinate.
  for (int k = 0; k < Shard::kD; ++k) {
    const double mean = sum[k] / draws;
    const double sd = std::sqrt(std::max(0.0, sumSq[k] / draws - mean * mean));
    INFO("coordinate " << k << ": mean " << mean << ", full " << full[k] << ", sd " << sd);
    CHECK(sd > 0.0);
    CHECK(std::abs(mean - full[k]) <= 5.0 * sd / std::sqrt(double(draws)));
  }
  // E||G - grad||^2 = V / B, V from the definitions (lsvrg and saga with state at x0 have the
  // same per-sample corrections, so the same V).
  const double v = s.varianceOneDraw(x, kind == Kind::kSgd ? nullptr : &x0) / batch;
  const double meanErr = errSum / draws;
  const double seErr = std::sqrt((errSqSum / draws - meanErr * meanErr) / draws);
  INFO("E||G - grad||^2 = " << meanErr << " +- " << seErr << ", expected " << v);
  CHECK(std::abs(meanErr - v) <= 5.0 * seErr);
}

TEST_CASE("LSVRG at x = w is exactly the full gradient", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const Shard s(loss);
  const auto x0 = randomVector(Shard::kD, 0.5, 4);
  LsvrgOracle<double> oracle(*s.f, 3, 0.0, 5);
  std::vector<double> g(Shard::kD);
  oracle.gradient(x0, g);  // w = x0
  CHECK(g == s.gradient(x0));
  oracle.gradient(x0, g);
  CHECK(g == s.gradient(x0));
  // After a refresh at some later x, at the new w again exactly.
  const uint64_t before = oracle.refreshes();
  for (int t = 0; oracle.refreshes() == before; ++t) {
    REQUIRE(t < 10000);
    oracle.gradient(randomVector(Shard::kD, 0.5, 100 + t), g);
  }
  const std::vector<double> w(oracle.reference().begin(), oracle.reference().end());
  CHECK(w != x0);
  oracle.gradient(w, g);
  CHECK(g == s.gradient(w));

  SECTION("in float too") {
    const auto ff = LocalObjective<float>::create(s.problem, s.data, Shard::kTotal, Shard::kNodes);
    const std::vector<float> xf(x0.begin(), x0.end());
    std::vector<float> full(Shard::kD), gf(Shard::kD);
    ff->gradient(xf, full);
    LsvrgOracle<float> of(*ff, 2, 0.0, 6);
    of.gradient(xf, gf);
    CHECK(gf == full);
    of.gradient(xf, gf);
    CHECK(gf == full);
  }
}

TEST_CASE("SAGA equals the full gradient after a full pass at a fixed x", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const Shard s(loss);
  const auto x0 = randomVector(Shard::kD, 0.5, 7);
  const auto x = randomVector(Shard::kD, 0.5, 8);
  SagaOracle<double> oracle(*s.f, 1, 9);
  std::vector<double> g(Shard::kD);
  oracle.gradient(x0, g);  // the table starts full at x0
  const auto full0 = s.gradient(x0);
  for (int k = 0; k < Shard::kD; ++k) CHECK(g[k] == Approx(full0[k]).margin(1e-14));
  // m (ln m + 30) draws of batch 1 visit every one of the m = 40 samples except with probability
  // below m exp(-(ln m + 30)) = e^-30; the running average is then exactly the table's at x.
  const int calls = static_cast<int>(40 * (std::log(40.0) + 30.0));
  for (int t = 0; t < calls; ++t) oracle.gradient(x, g);
  oracle.gradient(x, g);
  const auto full = s.gradient(x);
  for (int k = 0; k < Shard::kD; ++k) CHECK(g[k] == Approx(full[k]).margin(1e-14));
}

TEST_CASE("LSVRG and SAGA variance vanishes as x approaches the reference point", "[optim][unit]") {
  const Kind kind = GENERATE(Kind::kSgd, Kind::kLsvrg, Kind::kSaga);
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const Shard s(loss);
  const auto x0 = randomVector(Shard::kD, 0.5, 10);
  const auto dir = randomVector(Shard::kD, 1.0, 11);
  std::vector<double> variance;
  for (double eps : {1e-1, 1e-2, 1e-3}) {
    std::vector<double> x = x0;
    for (int k = 0; k < Shard::kD; ++k) x[k] += eps * dir[k];
    const auto full = s.gradient(x);
    double err = 0.0;
    const int draws = 2000;  // the same seeds, hence the same samples, for every eps
    for (int t = 0; t < draws; ++t) {
      err += sqDist(drawAt(s, spec(kind, 2), core::deriveSeed(23, t), x0, x), full);
    }
    variance.push_back(err / draws);
  }
  INFO("E||G - grad||^2 at eps = 0.1, 0.01, 0.001: " << variance[0] << ", " << variance[1] << ", "
                                                     << variance[2]);
  if (kind == Kind::kSgd) {
    // No reduction: the variance stays that of the samples themselves.
    CHECK(variance[2] > 0.5 * variance[0]);
  } else if (loss == LossKind::kLeastSquares) {
    // The correction is linear in x - x0: exactly eps^2 times a constant, draw for draw.
    CHECK(variance[1] / variance[0] == Approx(1e-2).epsilon(1e-6));
    CHECK(variance[2] / variance[1] == Approx(1e-2).epsilon(1e-6));
  } else {
    // eps^2 (C + O(eps)): the ratio tends to 1/100.
    CHECK(variance[1] / variance[0] == Approx(1e-2).epsilon(0.2));
    CHECK(variance[2] / variance[1] == Approx(1e-2).epsilon(0.02));
  }
}

// Proximal gradient descent x <- prox_{eta r}(x - eta G(x)) on one node (f_1 = F, scale 1/m), on
// l1-regularised logistic regression. Per-sample smoothness: f_{1,j} = loss_j + (l2/2)||x||^2 has
// L_j = ||a_j||^2 / 4 + l2. Steps and rates from the estimators' analyses (mu >= l2):
//   saga  (Defazio, Bach, Lacoste-Julien 2014, Thm 1): eta = 1/(3 L_max), E||x_k - x*||^2 shrinks
//         by rho = 1 - min(1/(4m), mu/(3 L_max)) per step;
//   lsvrg (Kovalev, Horvath, Richtarik 2020, Thm 5): eta = 1/(6 L_max), p = 1/m,
//         rho = 1 - min(mu eta, p/2) for a Lyapunov function that bounds ||x_k - x*||^2.
// We run K = 50 / (1 - rho) steps, so rho^K < e^-50: the error norm shrinks by e^-25 ~ 1e-11,
// leaving room for the bounds' constants under the 1e-8 asserted. sgd with saga's step has no
// variance reduction and stalls at its noise floor O(eta sigma^2 / mu).
TEST_CASE("Proximal gradient with LSVRG and SAGA converges linearly to x*; SGD stalls",
          "[optim][unit]") {
  const Dataset data = randomDataset(200, 10, 1.0, 81);
  ProblemSpec problem{LossKind::kLogistic, 0.05};
  problem.regularizer.l1 = 0.02;
  const auto xStar = solveCentral(problem, data);
  REQUIRE(xStar.isOk());
  int zeros = 0;
  for (double v : *xStar) zeros += v == 0.0;
  CHECK(zeros > 0);  // the l1 term is active
  CHECK(zeros < 10);

  const auto f = LocalObjective<double>::create(problem, data, data.samples(), 1);
  double lMax = 0.0;
  for (size_t j = 0; j < data.samples(); ++j) {
    double sq = 0.0;
    for (int64_t k = data.rowPtr[j]; k < data.rowPtr[j + 1]; ++k) {
      sq += data.values[k] * data.values[k];
    }
    lMax = std::max(lMax, sq / 4.0 + problem.l2);
  }
  const double m = static_cast<double>(data.samples());
  const double mu = problem.l2;

  const Kind kind = GENERATE(Kind::kLsvrg, Kind::kSaga, Kind::kSgd);
  const double eta = 1.0 / ((kind == Kind::kLsvrg ? 6.0 : 3.0) * lMax);
  const double rate =
      kind == Kind::kLsvrg ? std::min(mu * eta, 0.5 / m) : std::min(0.25 / m, mu / (3.0 * lMax));
  const int steps = static_cast<int>(std::ceil(50.0 / rate));
  REQUIRE(steps <= 200000);  // the test stays cheap: about 1 us per step
  auto oracle = createOracle<double>(spec(kind, 1), *f, 31);
  std::vector<double> x(10, 0.0), g(10);
  std::vector<double> errors;      // after each quarter of the run
  int reached4 = 0, reached8 = 0;  // the first multiple of 100 steps with error <= 1e-4, 1e-8
  for (int k = 1; k <= steps; ++k) {
    oracle->gradient(x, g);
    for (size_t i = 0; i < x.size(); ++i) x[i] -= eta * g[i];
    proximal<double>(problem.regularizer, eta, x, x);
    if (k % 100 == 0) {
      const double e = relError(x, *xStar);
      if (reached4 == 0 && e <= 1e-4) reached4 = k;
      if (reached8 == 0 && e <= 1e-8) reached8 = k;
    }
    if (k % (steps / 4) == 0 && errors.size() < 4) errors.push_back(relError(x, *xStar));
  }
  REQUIRE(errors.size() == 4);
  INFO(estimatorKindName(kind) << ", eta " << eta << ", " << steps << " steps; error <= 1e-4 after "
                               << reached4 << ", <= 1e-8 after " << reached8
                               << "; relative error after each quarter: " << errors[0] << ", "
                               << errors[1] << ", " << errors[2] << ", " << errors[3]);
  if (kind == Kind::kSgd) {
    CHECK(reached4 == 0);
    CHECK(errors[3] > 1e-2);
    CHECK(errors[3] > 0.2 * errors[1]);  // no longer improving: a noise floor, not a slow rate
  } else {
    CHECK(errors[3] <= 1e-8);
    // Linear convergence: from 1e-4 to 1e-8 takes about as long as from 1 to 1e-4 (a 1/k rate
    // would need 10^4 times longer).
    REQUIRE(reached4 > 0);
    REQUIRE(reached8 > 0);
    CHECK(reached8 <= 3 * reached4);
  }
}

}  // namespace
}  // namespace starling::optim

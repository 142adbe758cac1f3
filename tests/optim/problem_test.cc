#include "optim/problem.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <vector>

#include "tests/optim/random_data.h"

namespace starling::optim {
namespace {

using testing::randomDataset;
using testing::randomVector;

double maxAbs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

std::vector<size_t> iota(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), size_t{0});
  return v;
}

// d loss_j / dz, written out here so the per-sample gradients below are an independent reference.
double lossDerivative(LossKind loss, double z, double label) {
  if (loss == LossKind::kLeastSquares) return z - label;
  const double b = label > 0.0 ? 1.0 : -1.0;
  return -b / (1.0 + std::exp(b * z));
}

TEST_CASE("Dataset addRow and subset keep CSR rows intact", "[optim][unit]") {
  Dataset d;
  d.features = 4;
  const std::vector<int32_t> c0{0, 3}, c1{}, c2{1, 2, 3};
  const std::vector<double> v0{1.5, -2.0}, v1{}, v2{4.0, 5.0, 6.0};
  d.addRow(1.0, c0, v0);
  d.addRow(-1.0, c1, v1);
  d.addRow(7.0, c2, v2);
  CHECK(d.samples() == 3);
  CHECK(d.nonZeros() == 5);
  CHECK(d.rowPtr == std::vector<int64_t>{0, 2, 2, 5});
  CHECK(d.colIdx == std::vector<int32_t>{0, 3, 1, 2, 3});

  const std::vector<size_t> pick{2, 0, 2};
  const Dataset s = d.subset(pick);
  CHECK(s.features == 4);
  CHECK(s.labels == std::vector<double>{7.0, 1.0, 7.0});
  CHECK(s.rowPtr == std::vector<int64_t>{0, 3, 5, 8});
  CHECK(s.colIdx == std::vector<int32_t>{1, 2, 3, 0, 3, 1, 2, 3});
  CHECK(s.values == std::vector<double>{4.0, 5.0, 6.0, 1.5, -2.0, 4.0, 5.0, 6.0});
  CHECK(d.subset(std::vector<size_t>{}).samples() == 0);
}

TEST_CASE("Local and global gradients match central finite differences", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const double density = GENERATE(1.0, 0.3);
  const int d = 7;
  const Dataset data = randomDataset(60, d, density, 11);
  const ProblemSpec spec{loss, 0.3};
  const auto local = LocalObjective<double>::create(spec, data, 240, 3);
  const GlobalObjective global(spec, data);
  REQUIRE(local->dim() == d);
  REQUIRE(local->samples() == 60);

  std::vector<double> x = randomVector(d, 0.7, 5);
  std::vector<double> g(d), gg(d), fd(d), fdg(d);
  local->gradient(x, g);
  global.gradient(x, gg);
  const double h = 1e-5;
  for (int k = 0; k < d; ++k) {
    std::vector<double> xp = x, xm = x;
    xp[k] += h;
    xm[k] -= h;
    fd[k] = (local->value(xp) - local->value(xm)) / (2 * h);
    fdg[k] = (global.value(xp) - global.value(xm)) / (2 * h);
  }
  for (int k = 0; k < d; ++k) {
    CHECK(std::abs(g[k] - fd[k]) <= 1e-6 * std::max(1.0, maxAbs(fd)));
    CHECK(std::abs(gg[k] - fdg[k]) <= 1e-6 * std::max(1.0, maxAbs(fdg)));
  }
  // The scale n/m = 3/240 is part of f_i: the local and global objectives differ by it.
  CHECK(maxAbs(g) > 0.0);
}

TEST_CASE("Float objective agrees with double within float accuracy", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const Dataset data = randomDataset(200, 9, 0.5, 21);
  const ProblemSpec spec{loss, 0.05};
  const auto ld = LocalObjective<double>::create(spec, data, 800, 4);
  const auto lf = LocalObjective<float>::create(spec, data, 800, 4);
  const std::vector<double> x = randomVector(9, 0.5, 3);
  std::vector<float> xf(x.begin(), x.end());
  std::vector<double> gd(9);
  std::vector<float> gf(9);
  ld->gradient(x, gd);
  lf->gradient(xf, gf);
  // m_i = 200 float accumulations: relative error well below 1e-4; an error in the float path
  // (wrong scale, wrong label map) would be O(1).
  for (int k = 0; k < 9; ++k) CHECK(std::abs(gf[k] - gd[k]) <= 1e-4 * std::max(1.0, maxAbs(gd)));
  const double vd = ld->value(x);
  CHECK(std::abs(lf->value(xf) - vd) <= 1e-5 * std::max(1.0, std::abs(vd)));
}

TEST_CASE("Local objectives average exactly to the global objective", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const int nodes = GENERATE(1, 3, 7);
  const size_t m = 101;
  const int d = 6;
  const Dataset data = randomDataset(m, d, 0.6, 31 + nodes);
  const ProblemSpec spec{loss, 0.2};

  // A random partition with uneven shard sizes: shuffle, then cut at random points.
  core::Rng rng(77 + static_cast<uint64_t>(nodes));
  std::vector<size_t> perm = iota(m);
  for (size_t j = m; j > 1; --j) std::swap(perm[j - 1], perm[rng.below(j)]);
  std::vector<size_t> cuts{0};
  for (int i = 1; i < nodes; ++i) cuts.push_back(1 + rng.below(m - 1));
  cuts.push_back(m);
  std::sort(cuts.begin(), cuts.end());

  const std::vector<double> x = randomVector(d, 0.8, 9);
  double avgValue = 0.0;
  std::vector<double> avgGrad(d, 0.0), g(d);
  for (int i = 0; i < nodes; ++i) {
    const std::vector<size_t> idx(perm.begin() + cuts[i], perm.begin() + cuts[i + 1]);
    const auto f = LocalObjective<double>::create(spec, data.subset(idx), m, nodes);
    avgValue += f->value(x) / nodes;
    f->gradient(x, g);
    for (int k = 0; k < d; ++k) avgGrad[k] += g[k] / nodes;
  }
  const GlobalObjective global(spec, data);
  std::vector<double> gg(d);
  global.gradient(x, gg);
  const double fv = global.value(x);
  CHECK(std::abs(avgValue - fv) <= 1e-12 * std::abs(fv));
  for (int k = 0; k < d; ++k) CHECK(std::abs(avgGrad[k] - gg[k]) <= 1e-12 * maxAbs(gg));
}

TEST_CASE("Logistic loss is stable for large margins", "[optim][unit]") {
  Dataset d;
  d.features = 1;
  const std::vector<int32_t> c{0};
  const std::vector<double> v{1.0};
  const ProblemSpec spec{LossKind::kLogistic, 0.0};
  SECTION("double, wrong side by 1000") {
    d.addRow(-1.0, c, v);
    const auto f = LocalObjective<double>::create(spec, d, 1, 1);
    const std::vector<double> x{1000.0};
    std::vector<double> g(1);
    f->gradient(x, g);
    CHECK(f->value(x) == Approx(1000.0).epsilon(1e-14));  // log(1 + e^1000) = 1000 + O(e^-1000)
    CHECK(g[0] == Approx(1.0).epsilon(1e-14));
    std::vector<double> sg(1);
    core::Rng rng(1);
    f->stochasticGradient(x, sg, 3, rng);
    CHECK(sg[0] == Approx(1.0).epsilon(1e-14));
  }
  SECTION("double, right side by 1000") {
    d.addRow(2.5, c, v);  // any positive label is +1
    const auto f = LocalObjective<double>::create(spec, d, 1, 1);
    const std::vector<double> x{1000.0};
    std::vector<double> g(1);
    f->gradient(x, g);
    CHECK(f->value(x) >= 0.0);
    CHECK(f->value(x) < 1e-300);
    CHECK(std::isfinite(g[0]));
    CHECK(std::abs(g[0]) < 1e-300);
  }
  SECTION("float, wrong side by 200 (exp(200) overflows float)") {
    d.addRow(1.0, c, v);
    const auto f = LocalObjective<float>::create(spec, d, 1, 1);
    const std::vector<float> x{-200.0f};
    std::vector<float> g(1);
    f->gradient(x, g);
    CHECK(f->value(x) == Approx(200.0).epsilon(1e-6));
    CHECK(g[0] == Approx(-1.0).epsilon(1e-6));
  }
}

// Per-draw estimates G_j = (n/m) m_i grad loss_j, computed by hand.
std::vector<std::vector<double>> perSampleEstimates(const Dataset& shard, LossKind loss,
                                                    const std::vector<double>& x, double scale) {
  std::vector<std::vector<double>> out;
  for (size_t j = 0; j < shard.samples(); ++j) {
    double z = 0.0;
    for (int64_t k = shard.rowPtr[j]; k < shard.rowPtr[j + 1]; ++k) {
      z += shard.values[k] * x[shard.colIdx[k]];
    }
    const double r = lossDerivative(loss, z, shard.labels[j]) * scale * shard.samples();
    std::vector<double> gj(x.size(), 0.0);
    for (int64_t k = shard.rowPtr[j]; k < shard.rowPtr[j + 1]; ++k) {
      gj[shard.colIdx[k]] = r * shard.values[k];
    }
    out.push_back(gj);
  }
  return out;
}

TEST_CASE("Stochastic gradient is unbiased and its variance is V/batch", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const size_t batch = GENERATE(size_t{1}, size_t{4}, size_t{16});
  const int d = 5;
  const Dataset shard = randomDataset(40, d, 0.7, 41);
  const ProblemSpec spec{loss, 0.1};
  const size_t total = 160;
  const int nodes = 4;
  const auto f = LocalObjective<double>::create(spec, shard, total, nodes);
  const std::vector<double> x = randomVector(d, 0.5, 2);
  std::vector<double> full(d);
  f->gradient(x, full);

  // Exact single-draw variance V = (1/m_i) sum_j ||G_j - mean G||^2 (trace of the covariance).
  const auto per = perSampleEstimates(shard, loss, x, static_cast<double>(nodes) / total);
  double v1 = 0.0;
  for (const auto& gj : per) {
    for (int k = 0; k < d; ++k) {
      const double e = gj[k] - (full[k] - spec.l2 * x[k]);
      v1 += e * e;
    }
  }
  v1 /= static_cast<double>(per.size());

  const int draws = 20000;
  core::Rng rng(core::deriveSeed(99, batch));
  std::vector<double> sum(d, 0.0), sumSq(d, 0.0), est(d);
  double errSum = 0.0, errSqSum = 0.0;
  for (int s = 0; s < draws; ++s) {
    f->stochasticGradient(x, est, batch, rng);
    double err = 0.0;
    for (int k = 0; k < d; ++k) {
      sum[k] += est[k];
      sumSq[k] += est[k] * est[k];
      err += (est[k] - full[k]) * (est[k] - full[k]);
    }
    errSum += err;
    errSqSum += err * err;
  }
  for (int k = 0; k < d; ++k) {
    const double mean = sum[k] / draws;
    const double sd = std::sqrt(std::max(0.0, sumSq[k] / draws - mean * mean));
    CHECK(std::abs(mean - full[k]) <= 5.0 * sd / std::sqrt(double(draws)));
  }
  // E||est - grad||^2 = V / batch exactly for draws with replacement; 5 standard errors.
  const double meanErr = errSum / draws;
  const double seErr = std::sqrt((errSqSum / draws - meanErr * meanErr) / draws);
  CHECK(std::abs(meanErr - v1 / batch) <= 5.0 * seErr);
  CHECK(v1 > 0.0);
}

TEST_CASE("Stochastic gradient is reproducible and precision independent", "[optim][unit]") {
  const Dataset shard = randomDataset(30, 4, 1.0, 51);
  const ProblemSpec spec{LossKind::kLogistic, 0.01};
  const auto fd = LocalObjective<double>::create(spec, shard, 90, 3);
  const auto ff = LocalObjective<float>::create(spec, shard, 90, 3);
  const std::vector<double> x = randomVector(4, 1.0, 8);
  const std::vector<float> xf(x.begin(), x.end());
  std::vector<double> a(4), b(4);
  std::vector<float> c(4);
  core::Rng r1(5), r2(5), r3(5);
  fd->stochasticGradient(x, a, 7, r1);
  fd->stochasticGradient(x, b, 7, r2);
  ff->stochasticGradient(xf, c, 7, r3);
  CHECK(a == b);
  for (int k = 0; k < 4; ++k) CHECK(std::abs(c[k] - a[k]) <= 1e-5 * std::max(1.0, maxAbs(a)));
  fd->stochasticGradient(x, b, 7, r2);  // the stream moved on: a different batch
  CHECK(a != b);
}

}  // namespace
}  // namespace starling::optim

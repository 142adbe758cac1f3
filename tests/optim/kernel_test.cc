// LocalObjective's two shard layouts (optim/problem.cc): a dense matrix when every sample stores
// all features, CSR with 32-bit column indices otherwise. Each is checked against a naive loop
// written here over the Dataset's own CSR arrays, and the two against each other bit for bit:
// both promise the summation order of a CSR row walk, which is what keeps simulations' results
// unchanged by the layout.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "optim/oracle.h"
#include "optim/problem.h"
#include "tests/optim/random_data.h"

namespace starling::optim {
namespace {

using testing::randomDataset;
using testing::randomVector;

double mappedLabel(LossKind loss, double label) {
  if (loss == LossKind::kLeastSquares) return label;
  return label > 0.0 ? 1.0 : -1.0;
}

// d loss / dz, written independently of problem.cc (logistic: -b / (1 + e^{bz})).
double lossSlope(LossKind loss, double z, double b) {
  if (loss == LossKind::kLeastSquares) return z - b;
  return -b / (1.0 + std::exp(b * z));
}

double lossValue(LossKind loss, double z, double b) {
  if (loss == LossKind::kLeastSquares) return 0.5 * (z - b) * (z - b);
  return std::log1p(std::exp(-b * z));
}

// grad f_i(x) = l2 x + s sum_j lossSlope(a_j^T x) a_j by the plainest loops: every sum runs in the
// CSR's order (columns increasing, rows increasing), in double.
std::vector<double> naiveGradient(const Dataset& shard, LossKind loss, double l2, double s,
                                  const std::vector<double>& x) {
  std::vector<double> out(x.size());
  for (size_t k = 0; k < x.size(); ++k) out[k] = l2 * x[k];
  for (size_t j = 0; j < shard.samples(); ++j) {
    double z = 0.0;
    for (int64_t p = shard.rowPtr[j]; p < shard.rowPtr[j + 1]; ++p) {
      z += shard.values[p] * x[shard.colIdx[p]];
    }
    double c = lossSlope(loss, z, mappedLabel(loss, shard.labels[j]));
    c *= s;
    for (int64_t p = shard.rowPtr[j]; p < shard.rowPtr[j + 1]; ++p) {
      out[shard.colIdx[p]] += shard.values[p] * c;
    }
  }
  return out;
}

double naiveValue(const Dataset& shard, LossKind loss, double l2, double s,
                  const std::vector<double>& x) {
  double sum = 0.0;
  for (size_t j = 0; j < shard.samples(); ++j) {
    double z = 0.0;
    for (int64_t p = shard.rowPtr[j]; p < shard.rowPtr[j + 1]; ++p) {
      z += shard.values[p] * x[shard.colIdx[p]];
    }
    sum += lossValue(loss, z, mappedLabel(loss, shard.labels[j]));
  }
  double sq = 0.0;
  for (double v : x) sq += v * v;
  return s * sum + 0.5 * l2 * sq;
}

// The same samples with one more feature that no sample stores: the entries, their order and
// every sum over them are unchanged, but the shard is no longer full, so LocalObjective holds it
// as CSR.
Dataset withEmptyColumn(const Dataset& data) {
  Dataset out = data;
  out.features = data.features + 1;
  return out;
}

TEST_CASE("Dense kernels equal a naive reference and the CSR path bit for bit", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  // Row counts around the kernels' blocks of four rows and chunks of 256; d around four columns.
  const size_t m = GENERATE(size_t{1}, size_t{7}, size_t{64}, size_t{301});
  const int d = GENERATE(1, 5, 33);
  const Dataset data = randomDataset(m, d, 1.0, 1000 + m + static_cast<uint64_t>(d));
  const Dataset sparse = withEmptyColumn(data);
  const ProblemSpec spec{loss, 0.3};
  const size_t total = 4 * m;
  const int nodes = 4;
  const double s = static_cast<double>(nodes) / static_cast<double>(total);
  const auto dense = LocalObjective<double>::create(spec, data, total, nodes);
  const auto csr = LocalObjective<double>::create(spec, sparse, total, nodes);
  REQUIRE(dense->dense());
  REQUIRE_FALSE(csr->dense());

  const std::vector<double> x = randomVector(d, 0.7, 5 + m);
  std::vector<double> xs = x;
  xs.push_back(0.25);  // the empty column's coordinate: its gradient is l2 * 0.25 alone
  std::vector<double> g(d), gs(d + 1);
  dense->gradient(x, g);
  csr->gradient(xs, gs);

  const std::vector<double> ref = naiveGradient(data, loss, spec.l2, s, x);
  for (int k = 0; k < d; ++k) {
    // Dense and CSR add the same terms in the same order: equal to the last bit.
    CHECK(g[k] == gs[k]);
    if (loss == LossKind::kLeastSquares) {
      CHECK(g[k] == ref[k]);  // the same order and the same operations as the naive loop
    } else {
      // The reference's logistic slope is another formula for the same value.
      CHECK(std::abs(g[k] - ref[k]) <= 1e-13 * std::max(1.0, std::abs(ref[k])));
    }
  }
  CHECK(gs[d] == spec.l2 * 0.25);

  const double v = dense->value(x);
  const double vRef = naiveValue(data, loss, spec.l2, s, x);
  CHECK(std::abs(v - vRef) <= 1e-13 * std::max(1.0, std::abs(vRef)));
  // Without the l2 term (whose ||x||^2 runs over d + 1 coordinates on the CSR side) the values
  // are the same loss sums in the same order.
  const ProblemSpec smooth{loss, 0.0};
  const auto dense0 = LocalObjective<double>::create(smooth, data, total, nodes);
  const auto csr0 = LocalObjective<double>::create(smooth, sparse, total, nodes);
  CHECK(dense0->value(x) == csr0->value(xs));
  CHECK(std::abs(dense0->value(x) - naiveValue(data, loss, 0.0, s, x)) <=
        1e-13 * std::max(1.0, std::abs(vRef)));

  // Per-sample access (variance-reduced estimators): a_j^T x and out += c a_j.
  for (size_t j = 0; j < m; j += std::max<size_t>(1, m / 5)) {
    double z = 0.0;
    for (int k = 0; k < d; ++k) z += data.values[j * d + k] * x[k];
    const double expected = lossSlope(loss, z, mappedLabel(loss, data.labels[j]));
    if (loss == LossKind::kLeastSquares) {
      CHECK(dense->lossDerivative(j, x) == expected);
    } else {
      CHECK(std::abs(dense->lossDerivative(j, x) - expected) <= 1e-14);
    }
    CHECK(dense->lossDerivative(j, x) == csr->lossDerivative(j, xs));
    std::vector<double> a(d, 1.0), b(d, 1.0);
    dense->addSample(j, -0.5, a);
    for (int k = 0; k < d; ++k) b[k] += data.values[j * d + k] * -0.5;
    CHECK(a == b);
    std::vector<double> acc(d, 2.0), accRef(d, 2.0);
    dense->accumulateSample(j, 0.125, acc);
    for (int k = 0; k < d; ++k) accRef[k] += 0.125 * data.values[j * d + k];
    CHECK(acc == accRef);
  }
}

TEST_CASE("Dense and CSR layouts agree bit for bit in float, stochastic gradients and SAGA",
          "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const int d = 11;
  const Dataset data = randomDataset(90, d, 1.0, 77);
  const Dataset sparse = withEmptyColumn(data);
  const ProblemSpec spec{loss, 0.05};
  const auto fd = LocalObjective<float>::create(spec, data, 270, 3);
  const auto fs = LocalObjective<float>::create(spec, sparse, 270, 3);
  REQUIRE(fd->dense());
  REQUIRE_FALSE(fs->dense());
  const std::vector<double> x64 = randomVector(d, 0.6, 4);
  const std::vector<float> x(x64.begin(), x64.end());
  std::vector<float> xs = x;
  xs.push_back(0.0f);
  std::vector<float> g(d), gs(d + 1);
  fd->gradient(x, g);
  fs->gradient(xs, gs);
  for (int k = 0; k < d; ++k) CHECK(g[k] == gs[k]);
  // Float against the double reference: within float accuracy, far below an O(1) kernel error.
  const std::vector<double> ref = naiveGradient(data, loss, spec.l2, 3.0 / 270.0, x64);
  double scale = 1.0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (int k = 0; k < d; ++k) CHECK(std::abs(g[k] - ref[k]) <= 1e-4 * scale);

  core::Rng r1(9), r2(9);
  for (int rep = 0; rep < 3; ++rep) {
    fd->stochasticGradient(x, g, 5, r1);
    fs->stochasticGradient(xs, gs, 5, r2);
    for (int k = 0; k < d; ++k) CHECK(g[k] == gs[k]);
  }

  // SAGA keeps its table average in double through accumulateSample: the same on both layouts.
  const auto dd = LocalObjective<double>::create(spec, data, 270, 3);
  const auto ds = LocalObjective<double>::create(spec, sparse, 270, 3);
  auto sagaD = createOracle<double>({EstimatorSpec::Kind::kSaga, 4, 0.0}, *dd, 3);
  auto sagaS = createOracle<double>({EstimatorSpec::Kind::kSaga, 4, 0.0}, *ds, 3);
  std::vector<double> y = x64, ys = x64;
  ys.push_back(0.0);
  std::vector<double> o(d), os(d + 1);
  for (int rep = 0; rep < 4; ++rep) {
    sagaD->gradient(y, o);
    sagaS->gradient(ys, os);
    for (int k = 0; k < d; ++k) {
      CHECK(o[k] == os[k]);
      y[k] -= 0.1 * o[k];
      ys[k] -= 0.1 * os[k];
    }
  }
}

TEST_CASE("CSR kernels with 32-bit columns equal a naive reference", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  SECTION("random sparse rows") {
    const int d = 40;
    const Dataset data = randomDataset(150, d, 0.2, 61);
    const ProblemSpec spec{loss, 0.1};
    const auto f = LocalObjective<double>::create(spec, data, 300, 2);
    REQUIRE_FALSE(f->dense());
    const std::vector<double> x = randomVector(d, 0.9, 6);
    std::vector<double> g(d);
    f->gradient(x, g);
    const auto ref = naiveGradient(data, loss, spec.l2, 2.0 / 300.0, x);
    for (int k = 0; k < d; ++k) {
      if (loss == LossKind::kLeastSquares) {
        CHECK(g[k] == ref[k]);
      } else {
        CHECK(std::abs(g[k] - ref[k]) <= 1e-13 * std::max(1.0, std::abs(ref[k])));
      }
    }
  }
  SECTION("columns beyond 16 bits and past 2^20") {
    // Entries at columns that a narrower index would truncate onto others.
    const int d = (1 << 20) + 7;
    Dataset data;
    data.features = d;
    const std::vector<int32_t> c0{3, 70000, (1 << 20) + 5};
    const std::vector<double> v0{1.0, -2.0, 0.5};
    const std::vector<int32_t> c1{70000 - 65536, (1 << 20) + 6};
    const std::vector<double> v1{3.0, 4.0};
    data.addRow(1.0, c0, v0);
    data.addRow(-1.0, c1, v1);
    const ProblemSpec spec{loss, 0.0};
    const auto f = LocalObjective<double>::create(spec, data, 2, 1);
    REQUIRE_FALSE(f->dense());
    std::vector<double> x(d, 0.0);
    x[3] = 0.5;
    x[70000] = 0.25;
    x[(1 << 20) + 5] = -1.0;
    x[70000 - 65536] = 2.0;
    x[(1 << 20) + 6] = 0.125;
    std::vector<double> g(d, 9.0);
    f->gradient(x, g);
    const auto ref = naiveGradient(data, loss, spec.l2, 0.5, x);
    size_t nonZero = 0;
    for (int k = 0; k < d; ++k) {
      nonZero += g[k] != 0.0 ? 1 : 0;
      if (ref[k] != g[k]) {
        CHECK(std::abs(g[k] - ref[k]) <= 1e-13 * std::max(1.0, std::abs(ref[k])));
      }
    }
    CHECK(nonZero == 5);  // only the five stored columns
    CHECK(g[70000] != 0.0);
    CHECK(g[70000 - 65536] != 0.0);
  }
}

TEST_CASE("The gradient allows x and out to be the same buffer", "[optim][unit]") {
  const Dataset data = randomDataset(20, 6, 1.0, 5);
  const ProblemSpec spec{LossKind::kLogistic, 0.2};
  const auto f = LocalObjective<double>::create(spec, data, 40, 2);
  std::vector<double> x = randomVector(6, 0.5, 1);
  std::vector<double> g(6);
  f->gradient(x, g);
  f->gradient(x, x);
  CHECK(x == g);
}

}  // namespace
}  // namespace starling::optim

// Regularizers: the proximal operators against their closed forms, and the composite central
// solver against optimality conditions checked here independently of it.
#include "optim/regularizer.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "optim/problem.h"
#include "tests/optim/random_data.h"

namespace starling::optim {
namespace {

using testing::randomDataset;
using testing::randomVector;

constexpr double kInf = std::numeric_limits<double>::infinity();

RegularizerSpec makeReg(double l1, double lower = -kInf, double upper = kInf) {
  RegularizerSpec r;
  r.l1 = l1;
  r.lower = lower;
  r.upper = upper;
  return r;
}

std::vector<double> prox(const RegularizerSpec& r, double step, const std::vector<double>& v) {
  std::vector<double> out(v.size());
  proximal<double>(r, step, v, out);
  return out;
}

// The one-dimensional objective prox_{s r}(v) minimises.
double proxObjective(const RegularizerSpec& r, double s, double v, double u) {
  return r.l1 * std::abs(u) + (u - v) * (u - v) / (2.0 * s);
}

TEST_CASE("l1 prox is the soft threshold", "[optim][unit]") {
  // step 0.5, l1 2: threshold 1.
  const std::vector<double> v{3.0, -3.0, 0.5, -0.5, 0.0, 1.0, -1.0, 1.25};
  const auto out = prox(makeReg(2.0), 0.5, v);
  const std::vector<double> expect{2.0, -2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25};
  CHECK(out == expect);
  SECTION("step 0 is the identity") { CHECK(prox(makeReg(2.0), 0.0, v) == v); }
  SECTION("l1 0 is the identity") { CHECK(prox(makeReg(0.0), 7.0, v) == v); }
}

TEST_CASE("box and nonneg prox are clamps", "[optim][unit]") {
  const std::vector<double> v{-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0};
  CHECK(prox(makeReg(0.0, -1.0, 1.0), 0.3, v) ==
        std::vector<double>{-1.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.0});
  CHECK(prox(makeReg(0.0, 0.0), 0.3, v) == std::vector<double>{0, 0, 0, 0, 0.5, 1.0, 3.0});
  // A box that excludes 0.
  CHECK(prox(makeReg(0.0, 0.75, 2.0), 1.0, v) ==
        std::vector<double>{0.75, 0.75, 0.75, 0.75, 0.75, 1.0, 2.0});
}

TEST_CASE("l1 with a box: clamp of the soft threshold, and it is the exact prox", "[optim][unit]") {
  // threshold 0.5, box [-1, 2] / nonneg / [0.25, 0.75]; dyadic values, so the results are exact.
  const std::vector<double> v{-3.0, -1.25, -0.25, 0.125, 0.625, 1.0, 2.375, 4.0};
  CHECK(prox(makeReg(1.0, -1.0, 2.0), 0.5, v) ==
        std::vector<double>{-1.0, -0.75, 0.0, 0.0, 0.125, 0.5, 1.875, 2.0});
  CHECK(prox(makeReg(1.0, 0.0), 0.5, v) ==
        std::vector<double>{0.0, 0.0, 0.0, 0.0, 0.125, 0.5, 1.875, 3.5});
  CHECK(prox(makeReg(1.0, 0.25, 0.75), 0.5, v) ==
        std::vector<double>{0.25, 0.25, 0.25, 0.25, 0.25, 0.5, 0.75, 0.75});

  // Optimality by brute force: on random inputs, no feasible point nearby (or on a grid over the
  // box) has a smaller prox objective than the result.
  const RegularizerSpec regs[] = {makeReg(0.7), makeReg(0.7, -0.4, 1.3), makeReg(0.7, 0.0),
                                  makeReg(0.0, -0.2, 0.2), makeReg(0.3, 0.5, 0.9)};
  const auto inputs = randomVector(200, 2.0, 5);
  for (const auto& r : regs) {
    const double s = 0.8;
    const auto out = prox(r, s, inputs);
    for (size_t k = 0; k < inputs.size(); ++k) {
      const double u = out[k];
      REQUIRE(u >= r.lower);
      REQUIRE(u <= r.upper);
      const double best = proxObjective(r, s, inputs[k], u);
      for (double delta : {1e-3, -1e-3, 0.1, -0.1, 1.0, -1.0}) {
        const double w = std::clamp(u + delta, r.lower, r.upper);
        CHECK(proxObjective(r, s, inputs[k], w) >= best - 1e-15);
      }
    }
  }
}

TEST_CASE("prox may write over its input", "[optim][unit]") {
  const RegularizerSpec r = makeReg(0.4, -0.5, 0.9);
  const auto v = randomVector(64, 1.0, 9);
  const auto expect = prox(r, 1.5, v);
  std::vector<double> inPlace = v;
  proximal<double>(r, 1.5, inPlace, inPlace);
  CHECK(inPlace == expect);

  std::vector<float> vf(v.begin(), v.end());
  std::vector<float> separate(vf.size());
  proximal<float>(r, 1.5, vf, separate);
  proximal<float>(r, 1.5, vf, vf);
  CHECK(vf == separate);
}

TEST_CASE("float prox rounds the box inwards", "[optim][unit]") {
  // float(0.1) > 0.1 and float(-0.1) < -0.1: a float clamp must still land inside the double box.
  const RegularizerSpec r = makeReg(0.0, -0.1, 0.1);
  const std::vector<float> v{-1.0f, 1.0f, 0.05f};
  std::vector<float> out(v.size());
  proximal<float>(r, 1.0, v, out);
  CHECK(static_cast<double>(out[0]) >= -0.1);
  CHECK(static_cast<double>(out[1]) <= 0.1);
  CHECK(static_cast<double>(out[0]) == Approx(-0.1).epsilon(1e-7));
  CHECK(static_cast<double>(out[1]) == Approx(0.1).epsilon(1e-7));
  CHECK(out[2] == 0.05f);
  const std::vector<double> asDouble(out.begin(), out.end());
  CHECK(std::isfinite(regularizerValue(r, asDouble)));
}

TEST_CASE("regularizer values and descriptions", "[optim][unit]") {
  const std::vector<double> x{1.0, -2.0, 0.5};
  CHECK(regularizerValue(makeReg(0.0), x) == 0.0);
  CHECK(regularizerValue(makeReg(0.1), x) == Approx(0.35));
  CHECK(regularizerValue(makeReg(0.1, -2.0, 1.0), x) == Approx(0.35));
  CHECK(regularizerValue(makeReg(0.1, -1.0, 1.0), x) == kInf);
  CHECK(regularizerValue(makeReg(0.0, 0.0), x) == kInf);
  CHECK(std::isnan(regularizerValue(makeReg(0.1), std::vector<double>{NAN})));
  CHECK(makeReg(0.0).none());
  CHECK_FALSE(makeReg(0.0, 0.0).none());
  CHECK(makeReg(0.0).describe() == "none");
  CHECK(makeReg(0.01).describe() == "l1=0.01");
  CHECK(makeReg(0.01, 0.0).describe() == "l1=0.01, box [0, inf]");
  CHECK(makeReg(0.0, -1.0, 1.0).describe() == "box [-1, 1]");
}

// ---- The composite central solver ------------------------------------------------------------

std::vector<double> gradientOf(const ProblemSpec& spec, const Dataset& data,
                               const std::vector<double>& x) {
  std::vector<double> g(x.size());
  GlobalObjective(spec, data).gradient(x, g);
  return g;
}

// 0 in grad_k F + l1 d|x_k| + N_[lo, hi](x_k) for every k, to `tol`. Returns how many coordinates
// sit at 0 or at a bound (the active ones), so callers can check the test is not vacuous.
int checkOptimality(const RegularizerSpec& r, const std::vector<double>& x,
                    const std::vector<double>& g, double tol) {
  int active = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    INFO("k = " << k << ", x_k = " << x[k] << ", grad_k = " << g[k]);
    REQUIRE(x[k] >= r.lower);
    REQUIRE(x[k] <= r.upper);
    // The subdifferential of l1 |x| at x_k is [l1 sLo, l1 sHi].
    const double sLo = x[k] > 0 ? 1.0 : -1.0;
    const double sHi = x[k] < 0 ? -1.0 : 1.0;
    const double lo = g[k] + r.l1 * sLo, hi = g[k] + r.l1 * sHi;
    if (x[k] == r.lower) {
      CHECK(hi >= -tol);  // the normal cone at a lower bound is (-inf, 0]
      ++active;
    } else if (x[k] == r.upper) {
      CHECK(lo <= tol);
      ++active;
    } else {
      CHECK(lo <= tol);
      CHECK(hi >= -tol);
      if (x[k] == 0.0) ++active;
    }
  }
  return active;
}

TEST_CASE("Composite solver: l1 solutions satisfy the subgradient conditions", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const double density = GENERATE(1.0, 0.3);
  const double l2 = GENERATE(0.0, 0.01);
  const double scale = loss == LossKind::kLeastSquares ? 1.0 : 0.1;  // |grad F(0)| per coordinate
  const double l1 = GENERATE(0.05, 0.3) * scale;
  const Dataset data = randomDataset(400, 12, density, 71);
  ProblemSpec spec{loss, l2};
  spec.regularizer = makeReg(l1);
  const auto x = solveCentral(spec, data);
  REQUIRE(x.isOk());
  const auto g = gradientOf(spec, data, *x);
  for (size_t k = 0; k < x->size(); ++k) {
    INFO("k = " << k << ", x_k = " << x->at(k) << ", grad_k = " << g[k]);
    if (x->at(k) != 0.0) {
      CHECK(std::abs(g[k] + l1 * (x->at(k) > 0 ? 1.0 : -1.0)) <= 1e-9);
    } else {
      CHECK(std::abs(g[k]) <= l1 + 1e-9);
    }
  }
  const int zeros = checkOptimality(spec.regularizer, *x, g, 1e-9);
  CHECK(zeros < static_cast<int>(x->size()));  // not the trivial x = 0
}

TEST_CASE("Composite solver: some l1 coordinates are exactly zero", "[optim][unit]") {
  const Dataset data = randomDataset(400, 12, 1.0, 71);
  ProblemSpec spec{LossKind::kLeastSquares, 0.0};
  spec.regularizer = makeReg(0.5);
  const auto x = solveCentral(spec, data);
  REQUIRE(x.isOk());
  const int zeros = checkOptimality(spec.regularizer, *x, gradientOf(spec, data, *x), 1e-9);
  CHECK(zeros > 0);
  CHECK(zeros < 12);
  SECTION("and l1 >= ||grad F(0)||_inf gives exactly x* = 0") {
    const auto g0 = gradientOf(spec, data, std::vector<double>(12, 0.0));
    double gmax = 0.0;
    for (double v : g0) gmax = std::max(gmax, std::abs(v));
    spec.regularizer = makeReg(gmax * 1.0001);
    const auto zero = solveCentral(spec, data);
    REQUIRE(zero.isOk());
    CHECK(*zero == std::vector<double>(12, 0.0));
  }
}

// Solves h y = rhs by Gaussian elimination with partial pivoting (h small and well conditioned).
std::vector<double> denseSolve(std::vector<std::vector<double>> h, std::vector<double> rhs) {
  const size_t n = rhs.size();
  for (size_t c = 0; c < n; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < n; ++r) {
      if (std::abs(h[r][c]) > std::abs(h[piv][c])) piv = r;
    }
    std::swap(h[c], h[piv]);
    std::swap(rhs[c], rhs[piv]);
    for (size_t r = c + 1; r < n; ++r) {
      const double f = h[r][c] / h[c][c];
      for (size_t k = c; k < n; ++k) h[r][k] -= f * h[c][k];
      rhs[r] -= f * rhs[c];
    }
  }
  std::vector<double> y(n);
  for (size_t c = n; c-- > 0;) {
    double v = rhs[c];
    for (size_t k = c + 1; k < n; ++k) v -= h[c][k] * y[k];
    y[c] = v / h[c][c];
  }
  return y;
}

TEST_CASE("Composite solver: l1 least squares matches the solution on its support to 1e-12",
          "[optim][unit]") {
  // On the support S with signs s, x*_S solves (A_S^T A_S / m + l2 I) x_S = A_S^T b / m - l1 s_S:
  // an independent dense solve once the solver has found S and s.
  const double density = GENERATE(1.0, 0.3);
  const double l2 = GENERATE(0.0, 0.1);
  const double l1 = 0.2;
  const Dataset data = randomDataset(400, 12, density, 23);
  ProblemSpec spec{LossKind::kLeastSquares, l2};
  spec.regularizer = makeReg(l1);
  const auto x = solveCentral(spec, data);
  REQUIRE(x.isOk());
  const int d = data.features;
  std::vector<int> slot(d, -1), support;
  for (int k = 0; k < d; ++k) {
    if (x->at(k) != 0.0) {
      slot[k] = static_cast<int>(support.size());
      support.push_back(k);
    }
  }
  REQUIRE(!support.empty());
  CHECK(support.size() < static_cast<size_t>(d));
  const size_t ns = support.size();
  const double m = static_cast<double>(data.samples());
  std::vector<std::vector<double>> h(ns, std::vector<double>(ns, 0.0));
  std::vector<double> rhs(ns, 0.0);
  for (size_t j = 0; j < data.samples(); ++j) {
    for (int64_t p = data.rowPtr[j]; p < data.rowPtr[j + 1]; ++p) {
      const int u = slot[data.colIdx[p]];
      if (u < 0) continue;
      rhs[u] += data.values[p] * data.labels[j] / m;
      for (int64_t q = data.rowPtr[j]; q < data.rowPtr[j + 1]; ++q) {
        const int v = slot[data.colIdx[q]];
        if (v >= 0) h[u][v] += data.values[p] * data.values[q] / m;
      }
    }
  }
  for (size_t i = 0; i < ns; ++i) {
    h[i][i] += l2;
    rhs[i] -= l1 * (x->at(support[i]) > 0 ? 1.0 : -1.0);
  }
  const auto xs = denseSolve(h, rhs);
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ns; ++i) {
    num += (xs[i] - x->at(support[i])) * (xs[i] - x->at(support[i]));
    den += xs[i] * xs[i];
  }
  INFO("support " << ns << " of " << d << ", relative error " << std::sqrt(num / den));
  CHECK(std::sqrt(num / den) <= 1e-12);
}

TEST_CASE("Composite solver: box and nonneg solutions are projected-gradient stationary",
          "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const double l2 = GENERATE(0.0, 0.01);
  const Dataset data = randomDataset(400, 12, 0.5, 37);
  // Smooth solution first, to pick boxes that are certain to bind.
  const auto smooth = solveCentral(ProblemSpec{loss, l2}, data);
  REQUIRE(smooth.isOk());
  double maxAbs = 0.0;
  for (double v : *smooth) maxAbs = std::max(maxAbs, std::abs(v));
  const double l1 = loss == LossKind::kLeastSquares ? 0.1 : 0.01;
  const RegularizerSpec regs[] = {makeReg(0.0, -0.5 * maxAbs, 0.5 * maxAbs), makeReg(0.0, 0.0),
                                  makeReg(l1, 0.0), makeReg(l1, -0.25 * maxAbs, 0.25 * maxAbs),
                                  makeReg(0.0, 0.1 * maxAbs, 0.2 * maxAbs)};
  for (const auto& r : regs) {
    INFO("regularizer " << r.describe());
    ProblemSpec spec{loss, l2};
    spec.regularizer = r;
    const auto x = solveCentral(spec, data);
    REQUIRE(x.isOk());
    const auto g = gradientOf(spec, data, *x);
    // Projected gradient: x = clamp(x - g) when r is a pure box; in general the conditions below.
    const int active = checkOptimality(r, *x, g, 1e-9);
    CHECK(active > 0);
    CHECK(std::isfinite(GlobalObjective(spec, data).value(*x)));
    if (r.l1 == 0.0) {
      for (size_t k = 0; k < x->size(); ++k) {
        CHECK(std::abs(std::clamp(x->at(k) - g[k], r.lower, r.upper) - x->at(k)) <= 1e-9);
      }
    }
  }
}

TEST_CASE("Composite solver agrees with the smooth solvers when r is inactive", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const double density = GENERATE(1.0, 0.2);
  const double l2 = GENERATE(0.0, 1e-3, 0.1);
  const Dataset data = randomDataset(400, 12, density, 61);
  const auto exact = solveCentral(ProblemSpec{loss, l2}, data);
  REQUIRE(exact.isOk());
  ProblemSpec spec{loss, l2};
  spec.regularizer = makeReg(0.0, -100.0, 100.0);  // a box far from x*
  const auto x = solveCentral(spec, data);
  REQUIRE(x.isOk());
  double num = 0.0, den = 0.0;
  for (size_t k = 0; k < x->size(); ++k) {
    num += (x->at(k) - exact->at(k)) * (x->at(k) - exact->at(k));
    den += exact->at(k) * exact->at(k);
  }
  INFO("loss " << static_cast<int>(loss) << ", density " << density << ", l2 " << l2
               << ": relative difference " << std::sqrt(num / den));
  CHECK(std::sqrt(num / den) <= 1e-12);
}

TEST_CASE("GlobalObjective::value adds r", "[optim][unit]") {
  const Dataset data = randomDataset(50, 4, 1.0, 3);
  ProblemSpec spec{LossKind::kLogistic, 0.1};
  const std::vector<double> x{0.5, -0.25, 0.0, 1.0};
  const double f = GlobalObjective(spec, data).value(x);
  spec.regularizer = makeReg(0.2, -1.0, 1.0);
  const GlobalObjective composite(spec, data);
  CHECK(composite.smoothValue(x) == f);
  CHECK(composite.value(x) == Approx(f + 0.2 * 1.75).epsilon(1e-15));
  spec.regularizer = makeReg(0.2, -0.5, 0.5);
  CHECK(GlobalObjective(spec, data).value(x) == kInf);
}

TEST_CASE("Composite solver rejects malformed regularizers", "[optim][unit]") {
  const Dataset data = randomDataset(50, 4, 1.0, 3);
  for (const auto& r : {makeReg(-0.1), makeReg(0.1, 1.0, 1.0), makeReg(kInf),
                        makeReg(0.0, 2.0, 1.0), makeReg(NAN)}) {
    ProblemSpec spec{LossKind::kLeastSquares, 0.1};
    spec.regularizer = r;
    const auto x = solveCentral(spec, data);
    REQUIRE_FALSE(x.isOk());
    CHECK(x.status().code() == core::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace starling::optim

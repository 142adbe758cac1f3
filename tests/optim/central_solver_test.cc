#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "optim/problem.h"
#include "tests/optim/random_data.h"

namespace starling::optim {
namespace {

using testing::randomDataset;

Dataset denseDataset(const std::vector<std::vector<double>>& rows,
                     const std::vector<double>& labels) {
  Dataset d;
  d.features = static_cast<int>(rows[0].size());
  std::vector<int32_t> cols;
  std::vector<double> vals;
  for (size_t j = 0; j < rows.size(); ++j) {
    cols.clear();
    vals.clear();
    for (size_t k = 0; k < rows[j].size(); ++k) {
      if (rows[j][k] != 0.0) {
        cols.push_back(static_cast<int32_t>(k));
        vals.push_back(rows[j][k]);
      }
    }
    d.addRow(labels[j], cols, vals);
  }
  return d;
}

double gradNorm(const ProblemSpec& spec, const Dataset& data, const std::vector<double>& x) {
  std::vector<double> g(x.size());
  GlobalObjective(spec, data).gradient(x, g);
  double s = 0.0;
  for (double v : g) s += v * v;
  return std::sqrt(s);
}

TEST_CASE("Least squares matches a hand-solved 3x2 problem", "[optim][unit]") {
  // A = [1 0; 0 1; 1 1], b = (1, 2, 4).  A^T A = [2 1; 1 2], A^T b = (5, 6).
  const Dataset d = denseDataset({{1, 0}, {0, 1}, {1, 1}}, {1, 2, 4});
  SECTION("l2 = 0: x = [2 1; 1 2]^-1 (5, 6) = (4/3, 7/3)") {
    const auto x = solveCentral({LossKind::kLeastSquares, 0.0, {}}, d);
    REQUIRE(x.isOk());
    CHECK(x->at(0) == Approx(4.0 / 3.0).epsilon(1e-13));
    CHECK(x->at(1) == Approx(7.0 / 3.0).epsilon(1e-13));
  }
  SECTION("l2 = 0.5: H = A^T A / 3 + 0.5 I, g = A^T b / 3, 2x2 inverse by Cramer") {
    const double l2 = 0.5;
    const double h00 = 2.0 / 3 + l2, h01 = 1.0 / 3, h11 = 2.0 / 3 + l2;
    const double g0 = 5.0 / 3, g1 = 6.0 / 3;
    const double det = h00 * h11 - h01 * h01;
    const auto x = solveCentral({LossKind::kLeastSquares, l2, {}}, d);
    REQUIRE(x.isOk());
    CHECK(x->at(0) == Approx((h11 * g0 - h01 * g1) / det).epsilon(1e-13));
    CHECK(x->at(1) == Approx((h00 * g1 - h01 * g0) / det).epsilon(1e-13));
    CHECK(x->at(0) == Approx(46.0 / 45.0).epsilon(1e-13));  // worked by hand
    CHECK(x->at(1) == Approx(64.0 / 45.0).epsilon(1e-13));
  }
}

TEST_CASE("Logistic matches a one-dimensional closed form", "[optim][unit]") {
  // Two samples a = 1 labelled +1, one labelled -1: F'(x) = (-2 s(-x) + s(x)) / 3 = 0 at
  // s(x) = 2/3, i.e. x* = ln 2.
  const Dataset d = denseDataset({{1}, {1}, {1}}, {1, 1, -1});
  const auto x = solveCentral({LossKind::kLogistic, 0.0, {}}, d);
  REQUIRE(x.isOk());
  CHECK(x->at(0) == Approx(std::log(2.0)).epsilon(1e-13));
}

TEST_CASE("Central solutions are stationary points of F", "[optim][unit]") {
  const LossKind loss = GENERATE(LossKind::kLeastSquares, LossKind::kLogistic);
  const double density = GENERATE(1.0, 0.2);
  const double l2 = GENERATE(0.0, 1e-3, 0.1);
  const Dataset data = randomDataset(400, 12, density, 61);
  const ProblemSpec spec{loss, l2, {}};
  const auto x = solveCentral(spec, data);
  REQUIRE(x.isOk());
  CHECK(gradNorm(spec, data, *x) < 1e-10);
  // And not trivially: x = 0 is not stationary.
  CHECK(gradNorm(spec, data, std::vector<double>(12, 0.0)) > 1e-2);
}

TEST_CASE("Least squares without l2 on rank-deficient data is rejected", "[optim][unit]") {
  SECTION("duplicate column") {
    const Dataset d = denseDataset({{1, 1}, {2, 2}, {-1, -1}, {3, 3}}, {1, 2, 3, 4});
    const auto x = solveCentral({LossKind::kLeastSquares, 0.0, {}}, d);
    REQUIRE_FALSE(x.isOk());
    CHECK(x.status().code() == core::StatusCode::kInvalidArgument);
    CHECK_THAT(x.status().message(), Catch::Contains("l2"));
    CHECK_THAT(x.status().message(), Catch::Contains("rank deficient"));
    const ProblemSpec fixed{LossKind::kLeastSquares, 0.1, {}};
    const auto y = solveCentral(fixed, d);
    REQUIRE(y.isOk());
    CHECK(gradNorm(fixed, d, *y) < 1e-12);
    CHECK(y->at(0) == Approx(y->at(1)).epsilon(1e-12));  // symmetric columns, symmetric solution
  }
  SECTION("a column that is 0.1 times another: singular only up to rounding") {
    // (Eigen's LDL^T leaves a pivot of about 3e-17 here, not an exact zero.)
    const Dataset d = denseDataset({{1, 0.1}, {2, 0.2}, {3, 0.3}, {7, 0.7}}, {1, 2, 3, 4});
    const auto x = solveCentral({LossKind::kLeastSquares, 0.0, {}}, d);
    REQUIRE_FALSE(x.isOk());
    CHECK(x.status().code() == core::StatusCode::kInvalidArgument);
  }
  SECTION("a feature no sample uses") {
    const Dataset d = denseDataset({{1, 0, 2}, {3, 0, 1}, {1, 0, 1}}, {1, 2, 3});
    const auto x = solveCentral({LossKind::kLeastSquares, 0.0, {}}, d);
    REQUIRE_FALSE(x.isOk());
    CHECK(x.status().code() == core::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("Logistic without l2 on separable data is rejected", "[optim][unit]") {
  const Dataset d = denseDataset({{1}, {2}, {-1}, {-3}}, {1, 1, -1, -1});
  const auto x = solveCentral({LossKind::kLogistic, 0.0, {}}, d);
  REQUIRE_FALSE(x.isOk());
  CHECK(x.status().code() == core::StatusCode::kInvalidArgument);
  CHECK_THAT(x.status().message(), Catch::Contains("l2"));
  const ProblemSpec fixed{LossKind::kLogistic, 0.01, {}};
  const auto y = solveCentral(fixed, d);
  REQUIRE(y.isOk());
  CHECK(gradNorm(fixed, d, *y) < 1e-10);
}

}  // namespace
}  // namespace starling::optim

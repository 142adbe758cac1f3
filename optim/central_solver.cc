// The reference solution x*. Written against Eigen in double and deliberately sharing no code with
// LocalObjective/GlobalObjective, so that tests comparing the two check something.
#include <Eigen/Core>
#include <Eigen/SparseCholesky>
#include <Eigen/SparseCore>
#include <cmath>
#include <string>

#include "optim/problem.h"

namespace starling::optim {
namespace {

using Vec = Eigen::VectorXd;
using SpMat = Eigen::SparseMatrix<double>;  // column-major: what SimplicialLDLT wants

constexpr double kPivotRatio = 1e-12;  // below this, H is treated as singular
constexpr double kGradTolerance = 1e-13;
constexpr int kMaxNewton = 100;
constexpr int kMaxHalvings = 60;
constexpr double kArmijo = 1e-4;
constexpr double kEscapeStep = 1e-3;  // a Newton step longer than this (relative) is not converged

SpMat dataMatrix(const Dataset& d) {
  std::vector<Eigen::Triplet<double>> t;
  t.reserve(d.nonZeros());
  for (size_t j = 0; j < d.samples(); ++j) {
    for (int64_t k = d.rowPtr[j]; k < d.rowPtr[j + 1]; ++k) {
      t.emplace_back(static_cast<int>(j), d.colIdx[k], d.values[k]);
    }
  }
  SpMat a(static_cast<Eigen::Index>(d.samples()), d.features);
  a.setFromTriplets(t.begin(), t.end());
  return a;
}

SpMat identity(Eigen::Index n) {
  SpMat id(n, n);
  id.setIdentity();
  return id;
}

// Factorises h; an error when it is (numerically) singular.
core::Status factorise(Eigen::SimplicialLDLT<SpMat>& ldlt, const SpMat& h, double l2) {
  ldlt.compute(h);
  bool singular = ldlt.info() != Eigen::Success;
  if (!singular) {
    const Vec& d = ldlt.vectorD();
    const double maxPivot = d.cwiseAbs().maxCoeff();
    singular = !(d.minCoeff() > kPivotRatio * maxPivot);  // also catches NaN and negative pivots
  }
  if (!singular) return core::Status::ok();
  if (l2 == 0.0) {
    return core::invalidArgument(
        "least squares with l2 = 0 has no unique solution: the data matrix is rank deficient; "
        "set problem/l2 > 0");
  }
  return core::invalidArgument("the normal equations are numerically singular (min/max pivot < " +
                               std::to_string(kPivotRatio) + "); increase problem/l2");
}

core::Result<std::vector<double>> solveLeastSquares(const SpMat& a, const Vec& b, double l2) {
  const double invM = 1.0 / static_cast<double>(a.rows());
  SpMat h = SpMat(a.transpose() * a) * invM + l2 * identity(a.cols());
  const Vec g = a.transpose() * b * invM;
  Eigen::SimplicialLDLT<SpMat> ldlt;
  STARLING_RETURN_IF_ERROR(factorise(ldlt, h, l2));
  const Vec x = ldlt.solve(g);
  if (!x.allFinite()) return core::internalError("least squares solve produced non-finite values");
  return std::vector<double>(x.data(), x.data() + x.size());
}

// Stable log(1 + exp(-t)) and 1 / (1 + exp(-u)).
double softplusNeg(double t) {
  return t > 0.0 ? std::log1p(std::exp(-t)) : -t + std::log1p(std::exp(t));
}
double sigma(double u) {
  if (u >= 0.0) return 1.0 / (1.0 + std::exp(-u));
  const double e = std::exp(u);
  return e / (1.0 + e);
}

struct Logistic {
  const SpMat& a;
  const Vec& b;  // +-1
  double l2;
  double invM = 1.0 / static_cast<double>(a.rows());

  double value(const Vec& x) const {
    const Vec t = b.cwiseProduct(a * x);
    double s = 0.0;
    for (Eigen::Index j = 0; j < t.size(); ++j) s += softplusNeg(t[j]);
    return s * invM + 0.5 * l2 * x.squaredNorm();
  }
  Vec gradient(const Vec& x) const {
    const Vec z = a * x;
    Vec r(z.size());
    for (Eigen::Index j = 0; j < z.size(); ++j) r[j] = -b[j] * sigma(-b[j] * z[j]);
    return Vec(a.transpose() * r) * invM + l2 * x;
  }
  SpMat hessian(const Vec& x) const {
    const Vec z = a * x;
    Vec w(z.size());
    for (Eigen::Index j = 0; j < z.size(); ++j) w[j] = sigma(z[j]) * sigma(-z[j]) * invM;
    return SpMat(a.transpose() * w.asDiagonal() * a) + l2 * identity(a.cols());
  }
};

// With l2 = 0 and separable data the gradient vanishes as ||x|| grows without bound, so a small
// gradient alone does not prove a minimiser. Near a true one the Newton step shrinks quadratically;
// on the way to infinity each step keeps moving the margins by O(1).
bool hasFiniteMinimiser(const Logistic& f, Eigen::SimplicialLDLT<SpMat>& ldlt, const Vec& x,
                        const Vec& g) {
  ldlt.compute(f.hessian(x));
  if (ldlt.info() != Eigen::Success) return false;
  const Vec p = ldlt.solve(-g);
  return p.allFinite() && p.norm() <= kEscapeStep * std::max(1.0, x.norm());
}

core::Result<std::vector<double>> solveLogistic(const SpMat& a, const Vec& b, double l2) {
  const Logistic f{a, b, l2};
  Vec x = Vec::Zero(a.cols());
  Vec g = f.gradient(x);
  const double tol = kGradTolerance * std::max(1.0, g.norm());
  double fx = f.value(x);
  Eigen::SimplicialLDLT<SpMat> ldlt;
  std::string why = "did not converge in " + std::to_string(kMaxNewton) + " Newton iterations";
  for (int it = 0; it < kMaxNewton; ++it) {
    if (g.norm() <= tol) break;
    ldlt.compute(f.hessian(x));
    const Vec p = ldlt.info() == Eigen::Success ? Vec(ldlt.solve(-g)) : Vec();
    const double slope = p.size() == g.size() ? g.dot(p) : 0.0;
    if (!p.allFinite() || !(slope < 0.0)) {
      why = "the Newton system became singular at iteration " + std::to_string(it);
      break;
    }
    bool accepted = false;
    double t = 1.0;
    for (int h = 0; h < kMaxHalvings && !accepted; ++h, t *= 0.5) {
      const Vec xn = x + t * p;
      const double fn = f.value(xn);
      if (fn <= fx + kArmijo * t * slope) {
        accepted = true;
      } else if (std::abs(fn - fx) <= 1e-14 * std::max(1.0, std::abs(fx))) {
        // Near the optimum F changes below its rounding error; judge the step by the gradient.
        accepted = f.gradient(xn).norm() < g.norm();
      }
      if (accepted) {
        x = xn;
        fx = fn;
      }
    }
    if (!accepted) {
      why = "the line search failed at iteration " + std::to_string(it);
      break;
    }
    g = f.gradient(x);
  }
  if (g.norm() <= tol) {
    if (l2 > 0.0 || hasFiniteMinimiser(f, ldlt, x, g)) {
      return std::vector<double>(x.data(), x.data() + x.size());
    }
    why = "reached a vanishing gradient only by running off to infinity";
  }
  if (l2 == 0.0) {
    return core::invalidArgument("logistic regression with l2 = 0 " + why +
                                 " (the data may be separable, so no finite minimiser exists); "
                                 "set problem/l2 > 0");
  }
  return core::internalError("logistic Newton solver " + why +
                             ": ||grad F|| = " + std::to_string(g.norm()));
}

}  // namespace

core::Result<std::vector<double>> solveCentral(const ProblemSpec& spec, const Dataset& all) {
  if (all.samples() == 0 || all.features <= 0) {
    return core::invalidArgument("solveCentral: the dataset has no samples or no features");
  }
  if (!(spec.l2 >= 0.0) || !std::isfinite(spec.l2)) {
    return core::invalidArgument("problem/l2: must be finite and >= 0, got " +
                                 std::to_string(spec.l2));
  }
  const SpMat a = dataMatrix(all);
  Vec b(static_cast<Eigen::Index>(all.samples()));
  for (size_t j = 0; j < all.samples(); ++j) {
    const double y = all.labels[j];
    b[static_cast<Eigen::Index>(j)] =
        spec.loss == LossKind::kLeastSquares ? y : (y > 0.0 ? 1.0 : -1.0);
  }
  if (spec.loss == LossKind::kLeastSquares) return solveLeastSquares(a, b, spec.l2);
  return solveLogistic(a, b, spec.l2);
}

}  // namespace starling::optim

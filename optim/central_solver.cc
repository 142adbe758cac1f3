// The reference solution x*. Written against Eigen in double and deliberately sharing no code with
// LocalObjective/GlobalObjective, so that tests comparing the two check something.
#include <Eigen/Core>
#include <Eigen/SparseCholesky>
#include <Eigen/SparseCore>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "optim/problem.h"
#include "core/rng.h"

namespace starling::optim {
namespace {

using DenseVec = Eigen::VectorXd;
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
    const DenseVec& d = ldlt.vectorD();
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

core::Result<std::vector<double>> solveLeastSquares(const SpMat& a, const DenseVec& b, double l2) {
  const double invM = 1.0 / static_cast<double>(a.rows());
  SpMat h = SpMat(a.transpose() * a) * invM + l2 * identity(a.cols());
  const DenseVec g = a.transpose() * b * invM;
  Eigen::SimplicialLDLT<SpMat> ldlt;
  STARLING_RETURN_IF_ERROR(factorise(ldlt, h, l2));
  const DenseVec x = ldlt.solve(g);
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
  const DenseVec& b;  // +-1
  double l2;
  double invM = 1.0 / static_cast<double>(a.rows());

  double value(const DenseVec& x) const {
    const DenseVec t = b.cwiseProduct(a * x);
    double s = 0.0;
    for (Eigen::Index j = 0; j < t.size(); ++j) s += softplusNeg(t[j]);
    return s * invM + 0.5 * l2 * x.squaredNorm();
  }
  DenseVec gradient(const DenseVec& x) const {
    const DenseVec z = a * x;
    DenseVec r(z.size());
    for (Eigen::Index j = 0; j < z.size(); ++j) r[j] = -b[j] * sigma(-b[j] * z[j]);
    return DenseVec(a.transpose() * r) * invM + l2 * x;
  }
  SpMat hessian(const DenseVec& x) const {
    const DenseVec z = a * x;
    DenseVec w(z.size());
    for (Eigen::Index j = 0; j < z.size(); ++j) w[j] = sigma(z[j]) * sigma(-z[j]) * invM;
    return SpMat(a.transpose() * w.asDiagonal() * a) + l2 * identity(a.cols());
  }
};

// With l2 = 0 and separable data the gradient vanishes as ||x|| grows without bound, so a small
// gradient alone does not prove a minimiser. Near a true one the Newton step shrinks quadratically;
// on the way to infinity each step keeps moving the margins by O(1).
bool hasFiniteMinimiser(const Logistic& f, Eigen::SimplicialLDLT<SpMat>& ldlt, const DenseVec& x,
                        const DenseVec& g) {
  ldlt.compute(f.hessian(x));
  if (ldlt.info() != Eigen::Success) return false;
  const DenseVec p = ldlt.solve(-g);
  return p.allFinite() && p.norm() <= kEscapeStep * std::max(1.0, x.norm());
}

core::Result<std::vector<double>> solveLogistic(const SpMat& a, const DenseVec& b, double l2) {
  const Logistic f{a, b, l2};
  DenseVec x = DenseVec::Zero(a.cols());
  DenseVec g = f.gradient(x);
  const double tol = kGradTolerance * std::max(1.0, g.norm());
  double fx = f.value(x);
  Eigen::SimplicialLDLT<SpMat> ldlt;
  std::string why = "did not converge in " + std::to_string(kMaxNewton) + " Newton iterations";
  for (int it = 0; it < kMaxNewton; ++it) {
    if (g.norm() <= tol) break;
    ldlt.compute(f.hessian(x));
    const DenseVec p = ldlt.info() == Eigen::Success ? DenseVec(ldlt.solve(-g)) : DenseVec();
    const double slope = p.size() == g.size() ? g.dot(p) : 0.0;
    if (!p.allFinite() || !(slope < 0.0)) {
      why = "the Newton system became singular at iteration " + std::to_string(it);
      break;
    }
    bool accepted = false;
    double t = 1.0;
    for (int h = 0; h < kMaxHalvings && !accepted; ++h, t *= 0.5) {
      const DenseVec xn = x + t * p;
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
      // The loop stops as soon as ||grad F|| crosses the tolerance, which on an ill-conditioned
      // problem can leave x off by tol / mu. One more full Newton step, quadratically convergent
      // from here, takes x to rounding; it is kept only if it lowers ||grad F||.
      ldlt.compute(f.hessian(x));
      if (ldlt.info() == Eigen::Success) {
        const DenseVec xn = x + DenseVec(ldlt.solve(-g));
        if (xn.allFinite() && f.gradient(xn).norm() < g.norm()) x = xn;
      }
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

// ---- Composite problems: min F(x) + r(x) by FISTA with adaptive restart ----------------------
//
// Step t = 1/L with L an upper bound on the curvature of F: F'' <= s A^T A / m + l2 I with s = 1
// (least squares) or 1/4 (logistic, since sigmoid' <= 1/4). The largest eigenvalue of A^T A / m
// comes from a power iteration (a lower estimate), widened by kCurvatureMargin; every step long
// enough to measure reliably then checks delta^T (s A^T A / m + l2 I) delta <= L ||delta||^2 (no
// cancellation: A delta is formed directly) and doubles L if not, so an underestimate cannot make
// FISTA diverge.
//
// Stopping rule: the gradient mapping G_t(x) = (x - prox_{tr}(x - t grad F(x))) / t is zero exactly
// at the minimiser; we stop at a proximal point x (not an extrapolated one, so x is feasible) with
// ||G_t(x)|| <= kGradTolerance * max(1, ||grad F(0)||), the rule the Newton solver uses for ||grad
// F||. G_t is evaluated coordinate-wise without cancellation: where the prox neither thresholds to
// 0 nor clamps, (x_k - p_k) / t equals grad_k F + l1 sign(u_k) exactly, and that is what we
// compute. For mu-strongly convex F, ||x - x*|| <= 2 ||G_t(x)|| / mu. That x is then polished by
// Newton's method on its free coordinates (see polish), which brings it to rounding accuracy
// whenever the active set is settled, as it is at a nondegenerate minimiser.

constexpr double kCurvatureMargin = 1.05;
constexpr int kMaxPowerIterations = 1000;
constexpr double kPowerTolerance = 1e-9;
constexpr int kMaxProxIterations = 100000;
constexpr double kMeasurableStep =
    1e-8;  // relative ||delta|| above which the L check is exact enough
constexpr uint64_t kPowerSeed = 0x706f776572;
constexpr int kMaxPolishSteps = 8;

// Largest eigenvalue of A^T A / m (from below: ||M v|| for the final unit v).
double largestEigenvalue(const SpMat& a) {
  const double invM = 1.0 / static_cast<double>(a.rows());
  core::Rng rng(kPowerSeed);
  DenseVec v(a.cols());
  for (Eigen::Index k = 0; k < v.size(); ++k) v[k] = rng.normal();
  v.normalize();
  double lambda = 0.0;
  for (int it = 0; it < kMaxPowerIterations; ++it) {
    const DenseVec w = DenseVec(a.transpose() * (a * v)) * invM;
    const double next = w.norm();
    if (next == 0.0) return 0.0;
    v = w / next;
    const bool settled = std::abs(next - lambda) <= kPowerTolerance * next;
    lambda = next;
    if (it >= 10 && settled) break;
  }
  return lambda;
}

struct Smooth {
  LossKind loss;
  const SpMat& a;
  const DenseVec& b;
  double l2;
  double invM = 1.0 / static_cast<double>(a.rows());

  // grad F at x, given z = A x.
  DenseVec gradient(const DenseVec& x, const DenseVec& z) const {
    DenseVec r(z.size());
    for (Eigen::Index j = 0; j < z.size(); ++j) {
      r[j] = loss == LossKind::kLeastSquares ? z[j] - b[j] : -b[j] * sigma(-b[j] * z[j]);
    }
    return DenseVec(a.transpose() * r) * invM + l2 * x;
  }
};

// p = prox_{t r}(y - t g) and the gradient mapping (y - p) / t, coordinate by coordinate.
double proxStep(const RegularizerSpec& r, double t, const DenseVec& y, const DenseVec& g, DenseVec& p) {
  double sq = 0.0;
  for (Eigen::Index k = 0; k < y.size(); ++k) {
    const double u = y[k] - t * g[k];
    const double threshold = t * r.l1;
    double v = 0.0;
    double sign = 0.0;
    if (u > threshold) {
      v = u - threshold;
      sign = 1.0;
    } else if (u < -threshold) {
      v = u + threshold;
      sign = -1.0;
    }
    const double clamped = std::clamp(v, r.lower, r.upper);
    double mapping;
    if (sign != 0.0 && clamped == v) {
      mapping = g[k] + r.l1 * sign;  // = (y_k - p_k) / t, without the cancellation
    } else {
      mapping = (y[k] - clamped) / t;
    }
    p[k] = clamped;
    sq += mapping * mapping;
  }
  return std::sqrt(sq);
}

// FISTA stops where ||G|| crosses the tolerance, so x is only as accurate as 2 ||G|| / mu allows.
// Near x* the active set is known: coordinates at 0 (under l1) or at a bound stay there, the others
// keep their sign, and on those F + l1 s^T x is smooth. Newton's method on the free coordinates
// then reaches x* to rounding (one step for least squares). The result is kept only if it stays
// feasible with the same signs and its ||G|| is no larger, so this can only improve x.
std::vector<double> polish(const ProblemSpec& spec, const Smooth& f, double t, const DenseVec& x0,
                           double residual0) {
  const RegularizerSpec& r = spec.regularizer;
  const auto keep = [&] { return std::vector<double>(x0.data(), x0.data() + x0.size()); };
  std::vector<Eigen::Index> free;
  for (Eigen::Index k = 0; k < x0.size(); ++k) {
    if (x0[k] != r.lower && x0[k] != r.upper && !(r.l1 > 0.0 && x0[k] == 0.0)) free.push_back(k);
  }
  if (free.empty()) return keep();
  const auto nf = static_cast<Eigen::Index>(free.size());
  std::vector<Eigen::Triplet<double>> sel;
  for (Eigen::Index i = 0; i < nf; ++i) sel.emplace_back(free[i], i, 1.0);
  SpMat select(x0.size(), nf);
  select.setFromTriplets(sel.begin(), sel.end());
  DenseVec sign(nf);
  for (Eigen::Index i = 0; i < nf; ++i) sign[i] = x0[free[i]] > 0.0 ? 1.0 : -1.0;

  const Logistic logistic{f.a, f.b, spec.l2};
  const bool quadratic = spec.loss == LossKind::kLeastSquares;
  SpMat h;
  if (quadratic) h = SpMat(f.a.transpose() * f.a) * f.invM + spec.l2 * identity(x0.size());
  Eigen::SimplicialLDLT<SpMat> ldlt;
  DenseVec x = x0;
  double lastStep = std::numeric_limits<double>::infinity();
  for (int it = 0; it < kMaxPolishSteps; ++it) {
    const DenseVec g = f.gradient(x, f.a * x);
    const DenseVec gFree = DenseVec(select.transpose() * g) + r.l1 * sign;
    if (!quadratic) h = logistic.hessian(x);
    ldlt.compute(SpMat(select.transpose() * h * select));
    if (ldlt.info() != Eigen::Success) return keep();
    const DenseVec step = ldlt.solve(-gFree);
    if (!step.allFinite()) return keep();
    for (Eigen::Index i = 0; i < nf; ++i) x[free[i]] += step[i];
    const double norm = step.norm();
    if (norm <= 1e-15 * x.norm() || norm >= 0.5 * lastStep) break;  // converged, or at rounding
    lastStep = norm;
  }
  for (Eigen::Index i = 0; i < nf; ++i) {
    const double v = x[free[i]];
    if (!(v > r.lower && v < r.upper) || (r.l1 > 0.0 && !(v * sign[i] > 0.0))) return keep();
  }
  DenseVec p(x.size());
  const double residual = proxStep(r, t, x, f.gradient(x, f.a * x), p);
  return residual <= residual0 ? std::vector<double>(x.data(), x.data() + x.size()) : keep();
}

core::Result<std::vector<double>> solveComposite(const ProblemSpec& spec, const SpMat& a,
                                                 const DenseVec& b) {
  const RegularizerSpec& r = spec.regularizer;
  const Smooth f{spec.loss, a, b, spec.l2};
  const double s = spec.loss == LossKind::kLeastSquares ? 1.0 : 0.25;
  double lipschitz = kCurvatureMargin * s * largestEigenvalue(a) + spec.l2;
  if (!(lipschitz > 0.0)) lipschitz = 1.0;  // A = 0 and l2 = 0: F is constant, any step works
  double t = 1.0 / lipschitz;

  const Eigen::Index d = a.cols();
  const double tol =
      kGradTolerance * std::max(1.0, f.gradient(DenseVec::Zero(d), DenseVec::Zero(a.rows())).norm());
  DenseVec x = DenseVec::Zero(d).cwiseMax(r.lower).cwiseMin(r.upper);  // prox(0): a feasible start
  DenseVec ax = a * x;
  DenseVec xPrev = x, axPrev = ax;
  DenseVec y = x, ay = ax;
  DenseVec p(d);
  bool yIsProxPoint = true;
  double theta = 1.0;
  double residual = std::numeric_limits<double>::infinity();
  for (int it = 0; it < kMaxProxIterations; ++it) {
    const DenseVec g = f.gradient(y, ay);
    if (!g.allFinite()) return core::internalError("proximal solver: non-finite gradient");
    residual = proxStep(r, t, y, g, p);
    if (residual <= tol && yIsProxPoint) return polish(spec, f, t, y, residual);

    DenseVec ap = a * p;
    const DenseVec delta = p - y;
    const double dn2 = delta.squaredNorm();
    if (dn2 > kMeasurableStep * kMeasurableStep * std::max(y.squaredNorm(), 1e-300)) {
      const double curvature = s * (ap - ay).squaredNorm() * f.invM + spec.l2 * dn2;
      if (curvature > lipschitz * dn2) {
        lipschitz = std::max(2.0 * lipschitz, curvature / dn2);
        t = 1.0 / lipschitz;
        y = x;  // restart from the last proximal point with the shorter step
        ay = ax;
        yIsProxPoint = true;
        theta = 1.0;
        continue;
      }
    }
    // O'Donoghue & Candes' gradient restart: drop the momentum when it points uphill. Near the
    // tolerance also drop it, so that the next gradient is taken at a proximal point to stop at.
    double thetaNext = 0.5 * (1.0 + std::sqrt(1.0 + 4.0 * theta * theta));
    double beta = (theta - 1.0) / thetaNext;
    if ((y - p).dot(p - x) > 0.0 || residual <= tol) {
      thetaNext = 1.0;
      beta = 0.0;
    }
    xPrev.swap(x);
    axPrev.swap(ax);
    x = p;
    ax = std::move(ap);
    if (beta == 0.0) {
      y = x;
      ay = ax;
    } else {
      y = x + beta * (x - xPrev);
      ay = ax + beta * (ax - axPrev);
    }
    yIsProxPoint = beta == 0.0;
    theta = thetaNext;
  }
  const std::string why =
      "proximal gradient solver (FISTA) did not reach ||G(x)|| <= " + std::to_string(tol) + " in " +
      std::to_string(kMaxProxIterations) + " iterations (last " + std::to_string(residual) + ")";
  if (spec.l2 == 0.0) {
    return core::invalidArgument(why +
                                 "; with l2 = 0 the problem may be ill-conditioned or have "
                                 "no unique minimiser; set problem/l2 > 0");
  }
  return core::internalError(why);
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
  DenseVec b(static_cast<Eigen::Index>(all.samples()));
  for (size_t j = 0; j < all.samples(); ++j) {
    const double y = all.labels[j];
    b[static_cast<Eigen::Index>(j)] =
        spec.loss == LossKind::kLeastSquares ? y : (y > 0.0 ? 1.0 : -1.0);
  }
  const RegularizerSpec& r = spec.regularizer;
  if (!(r.l1 >= 0.0) || !std::isfinite(r.l1) || !(r.lower < r.upper) || std::isnan(r.lower) ||
      std::isnan(r.upper) || r.lower == std::numeric_limits<double>::infinity() ||
      r.upper == -std::numeric_limits<double>::infinity()) {
    return core::invalidArgument(
        "problem/regularizer: needs a finite l1 >= 0 and lower < upper, got " + r.describe());
  }
  if (!r.none()) return solveComposite(spec, a, b);
  if (spec.loss == LossKind::kLeastSquares) return solveLeastSquares(a, b, spec.l2);
  return solveLogistic(a, b, spec.l2);
}

}  // namespace starling::optim

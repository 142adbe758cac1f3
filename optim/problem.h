// The built-in learning problems: L2-regularised least squares and logistic regression.
//
// Global objective over all m samples:  F(x) = (1/m) sum_j loss_j(x) + (l2/2) ||x||^2, with
//   least squares: loss_j = 1/2 (a_j^T x - b_j)^2
//   logistic:      loss_j = log(1 + exp(-b_j a_j^T x)),  b_j = +1 if label > 0 else -1.
// Node i holds the samples S_i (m_i of them) and the local objective
//   f_i(x) = (n/m) sum_{j in S_i} loss_j(x) + (l2/2) ||x||^2,
// so that (1/n) sum_i f_i = F exactly. LocalObjective<T> computes f_i and its gradients in
// precision T (float or double); GlobalObjective evaluates F in double for metrics.
// A composite problem adds a non-smooth, separable r(x) (ProblemSpec::regularizer, see
// optim/regularizer.h) to F: the goal is min_x F(x) + r(x). LocalObjective is the smooth f_i only
// (algorithms apply r through its proximal operator); GlobalObjective::value includes r.
// Thread-safety: const methods are safe to call concurrently; the Rng passed in is not.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "optim/dataset.h"
#include "optim/objective.h"
#include "optim/regularizer.h"
#include "core/rng.h"
#include "core/status.h"

namespace starling::optim {

enum class LossKind { kLeastSquares, kLogistic };

struct ProblemSpec {
  LossKind loss = LossKind::kLeastSquares;
  double l2 = 0.0;
  RegularizerSpec regularizer;  // non-smooth term r(x); none by default

  // Spelled out so that ProblemSpec{loss, l2} (a smooth problem) needs no third initializer.
  ProblemSpec() = default;
  ProblemSpec(LossKind lossKind, double l2Weight, RegularizerSpec r = {})
      : loss(lossKind), l2(l2Weight), regularizer(r) {}
};

// The linear problems' f_i: one parameter per feature (dim() == features).
// The shard is held in precision T, dense (row-major) when every sample stores all features and as
// CSR with 32-bit column indices otherwise; both add every sum in the same order as a walk over the
// CSR rows, so the layout never changes a result (docs/benchmarks.md, "bench-simulate").
template <typename T>
class LocalObjective final : public Objective<T> {
 public:
  // `shard` is node i's samples; `totalSamples` is m and `nodes` is n (the scale is n/m).
  static std::unique_ptr<LocalObjective<T>> create(const ProblemSpec& spec, const Dataset& shard,
                                                   size_t totalSamples, int nodes);
  ~LocalObjective() override;

  int dim() const override;
  size_t samples() const override;
  // out = grad f_i(x). x.size() == out.size() == dim().
  void gradient(std::span<const T> x, std::span<T> out) const override;
  // An unbiased estimate of grad f_i(x) from `batch` samples drawn uniformly with replacement.
  void stochasticGradient(std::span<const T> x, std::span<T> out, size_t batch,
                          core::Rng& rng) const override;
  double stochasticGradientWithLoss(std::span<const T> x, std::span<T> out, size_t batch,
                                    core::Rng& rng) const override;
  double value(std::span<const T> x) const override;
  // Blocks of gradient(): l2 x and the data term of each row added in row order, as there. None
  // for a sparse shard with so many rows that a pass over them per block of 4,096 coordinates
  // would cost more than its entries.
  std::unique_ptr<GradientBlocks<T>> gradientBlocks() const override;

  // Per-sample access, for variance-reduced estimators (optim/oracle.h). With z_j = a_j^T x,
  //   grad f_i(x) = scale() sum_{j < samples()} lossDerivative(j, x) a_j + l2() x,
  // where j indexes the node's own samples in shard order and scale() = n/m.
  T scale() const;
  T l2() const;
  // d loss / dz at z = a_j^T x (least squares: z - b_j; logistic: -b_j sigmoid(-b_j z)).
  T lossDerivative(size_t j, std::span<const T> x) const;
  // out += coefficient * a_j.
  void addSample(size_t j, T coefficient, std::span<T> out) const;
  // out[k] += coefficient * double(a_jk) over sample j's stored entries, in double (SAGA's
  // running average). out.size() == dim().
  void accumulateSample(size_t j, double coefficient, std::span<double> out) const;

  // How the shard is held (see the class comment in problem.cc): true when every sample stores
  // all dim() entries (dense synthetic data), held as a dense row-major matrix; false for CSR
  // with 32-bit column indices.
  bool dense() const;

 private:
  struct Impl;
  explicit LocalObjective(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// F + r over the whole dataset, in double. Used for the `objective` metric and by tests.
// `all` is borrowed and must outlive the object.
class GlobalObjective {
 public:
  GlobalObjective(const ProblemSpec& spec, const Dataset& all);
  // F(x) + r(x): +infinity when x is outside r's box.
  double value(std::span<const double> x) const;
  // F(x) alone.
  double smoothValue(std::span<const double> x) const;
  // grad F(x): the smooth part only (r need not be differentiable).
  void gradient(std::span<const double> x, std::span<double> out) const;

 private:
  ProblemSpec spec_;
  const Dataset& data_;
};

// x* = argmin F + r, computed centrally and independently of the decentralized code.
// Without a regularizer: normal equations with a Cholesky (LDL^T) factorisation for least squares,
// Newton's method with backtracking line search for logistic (until
// ||grad F|| <= 1e-13 * max(1, ||grad F(0)||)).
// With one (composite problems): FISTA with adaptive (gradient) restart, step 1/L with L from a
// power iteration on A^T A / m safeguarded by a curvature check on every step, run until the
// gradient mapping G(x) = (x - prox_{r/L}(x - grad F(x) / L)) L at a proximal point x satisfies
// ||G(x)|| <= 1e-13 * max(1, ||grad F(0)||); x is then feasible, and for mu-strongly convex F
// (mu >= l2) ||x - x*|| <= 2 ||G(x)|| / mu. At most 100000 iterations. Then Newton's method on the
// free coordinates (the active set and the signs fixed) refines x to rounding; the refined point
// replaces x only if it is feasible, keeps the active set and signs, and has no larger ||G||.
// Errors: kInvalidArgument when F has no unique minimiser (singular normal equations with l2 = 0,
// logistic with l2 = 0 that does not converge, a composite problem with l2 = 0 that does not
// converge) or the regularizer is malformed; kInternal if Newton or FISTA fails to converge.
core::Result<std::vector<double>> solveCentral(const ProblemSpec& spec, const Dataset& all);

}  // namespace starling::optim

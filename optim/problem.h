// The built-in learning problems: L2-regularised least squares and logistic regression.
//
// Global objective over all m samples:  F(x) = (1/m) sum_j loss_j(x) + (l2/2) ||x||^2, with
//   least squares: loss_j = 1/2 (a_j^T x - b_j)^2
//   logistic:      loss_j = log(1 + exp(-b_j a_j^T x)),  b_j = +1 if label > 0 else -1.
// Node i holds the samples S_i (m_i of them) and the local objective
//   f_i(x) = (n/m) sum_{j in S_i} loss_j(x) + (l2/2) ||x||^2,
// so that (1/n) sum_i f_i = F exactly. LocalObjective<T> computes f_i and its gradients in
// precision T (float or double); GlobalObjective evaluates F in double for metrics.
// Thread-safety: const methods are safe to call concurrently; the Rng passed in is not.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "optim/dataset.h"
#include "runtime/core/rng.h"
#include "runtime/core/status.h"

namespace starling::optim {

enum class LossKind { kLeastSquares, kLogistic };

struct ProblemSpec {
  LossKind loss = LossKind::kLeastSquares;
  double l2 = 0.0;
};

template <typename T>
class LocalObjective {
 public:
  // `shard` is node i's samples; `totalSamples` is m and `nodes` is n (the scale is n/m).
  static std::unique_ptr<LocalObjective<T>> create(const ProblemSpec& spec, const Dataset& shard,
                                                   size_t totalSamples, int nodes);
  ~LocalObjective();

  int dim() const;
  size_t samples() const;
  // out = grad f_i(x). x.size() == out.size() == dim().
  void gradient(std::span<const T> x, std::span<T> out) const;
  // An unbiased estimate of grad f_i(x) from `batch` samples drawn uniformly with replacement.
  void stochasticGradient(std::span<const T> x, std::span<T> out, size_t batch,
                          core::Rng& rng) const;
  double value(std::span<const T> x) const;

 private:
  struct Impl;
  explicit LocalObjective(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// F over the whole dataset, in double. Used for the `objective` metric and by the central solver.
class GlobalObjective {
 public:
  GlobalObjective(const ProblemSpec& spec, const Dataset& all);
  double value(std::span<const double> x) const;
  void gradient(std::span<const double> x, std::span<double> out) const;

 private:
  ProblemSpec spec_;
  const Dataset& data_;
};

// x* = argmin F, computed centrally and independently of the decentralized code: normal
// equations with a Cholesky (LDL^T) factorisation for least squares, Newton's method with
// backtracking line search for logistic (until ||grad F|| <= 1e-13 * max(1, ||grad F(0)||)).
// Errors: kInvalidArgument when F has no unique minimiser (singular normal equations with l2 = 0,
// logistic with l2 = 0 that does not converge); kInternal if Newton fails to converge.
core::Result<std::vector<double>> solveCentral(const ProblemSpec& spec, const Dataset& all);

}  // namespace starling::optim

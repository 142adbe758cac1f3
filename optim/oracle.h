// Gradient oracles: where a node's algorithm gets its estimate G of grad f_i(x)
// (docs/algorithms.md §9).
//
// Node i holds m_i samples; f_i(x) = s sum_j loss_j(x) + (l2/2)||x||^2 with s = n/m (problem.h).
// Write f_{i,j}(x) = s m_i loss_j(x) + (l2/2)||x||^2, so that f_i = (1/m_i) sum_j f_{i,j}. A batch
// J holds B indices drawn uniformly with replacement, and grad f_{i,J} is the mean of the
// grad f_{i,j} over J.
//   full:  G = grad f_i(x).
//   sgd:   G = grad f_{i,J}(x).
//   lsvrg: G = grad f_{i,J}(x) - grad f_{i,J}(w) + grad f_i(w); afterwards, with probability p,
//          w <- x and grad f_i(w) is recomputed (one full pass). w starts at the first x.
//   saga:  a table phi_j = loss_j'(a_j^T y_j), y_j the point where sample j was last drawn, and
//          the running average gbar = s sum_j phi_j a_j (kept in double);
//          G = l2 x + gbar + s (m_i / B) sum_{j in J} (loss_j'(a_j^T x) - phi_j) a_j,
//          then phi_j <- loss_j'(a_j^T x) for j in J. The table starts full at the first x.
// Every estimator is unbiased: E[G | state] = grad f_i(x) exactly. lsvrg and saga have variance
// that vanishes as x approaches w (resp. the table's points): at the first call, and for lsvrg
// whenever x = w, G equals the full gradient.
// Randomness comes from the node's own seeded Rng, so runs are reproducible.
// Thread-safety: none; one oracle belongs to one node and is driven by its thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "optim/algorithm.h"
#include "optim/problem.h"
#include "core/rng.h"

namespace starling::optim {

struct EstimatorSpec {
  enum class Kind { kFull, kSgd, kLsvrg, kSaga };
  Kind kind = Kind::kFull;
  size_t batch = 1;  // B >= 1 for sgd, lsvrg and saga; unused by full
  double p = 0.0;    // lsvrg: refresh probability in (0, 1]; 0 means min(1, B / m_i)
};

const char* estimatorKindName(EstimatorSpec::Kind kind);

// full (batch 0) or sgd (batch > 0), header-only because it keeps no state beyond the Rng. Works
// for any Objective (linear problems and the MLP).
template <typename T>
class ObjectiveOracle final : public GradientOracle<T> {
 public:
  // `objective` is borrowed and must outlive the oracle.
  ObjectiveOracle(const Objective<T>& objective, size_t batch, uint64_t seed)
      : objective_(objective), batch_(batch), rng_(seed) {}

  void gradient(std::span<const T> x, std::span<T> out) override {
    if (batch_ == 0) {
      objective_.gradient(x, out);
    } else {
      loss_ = objective_.stochasticGradientWithLoss(x, out, batch_, rng_);
    }
  }
  // The minibatch's mean loss; NaN for full gradients (a pass of its own would cost as much as
  // the gradient).
  double lastLoss() const override { return loss_; }
  // Full gradients only: a minibatch draws from the Rng.
  std::unique_ptr<GradientBlocks<T>> gradientBlocks() override {
    return batch_ == 0 ? objective_.gradientBlocks() : nullptr;
  }

  void visitState(core::StateVisitor& v) override {
    core::StateVisitor::Scope scope(v, "rng");
    rng_.visitState(v);
  }

 private:
  const Objective<T>& objective_;
  const size_t batch_;
  core::Rng rng_;
  double loss_ = std::numeric_limits<double>::quiet_NaN();
};

template <typename T>
class LsvrgOracle final : public GradientOracle<T> {
 public:
  // `objective` is borrowed and must outlive the oracle. batch >= 1; p in [0, 1] (0: B / m_i).
  LsvrgOracle(const LocalObjective<T>& objective, size_t batch, double p, uint64_t seed);

  void gradient(std::span<const T> x, std::span<T> out) override;
  void visitState(core::StateVisitor& v) override;

  // The reference point w (empty before the first call) and how many full passes were made.
  std::span<const T> reference() const { return w_; }
  uint64_t refreshes() const { return refreshes_; }

 private:
  const LocalObjective<T>& objective_;
  const size_t batch_;
  const double p_;
  core::Rng rng_;
  std::vector<T> w_;
  std::vector<T> gradW_;  // grad f_i(w)
  uint64_t refreshes_ = 0;
};

template <typename T>
class SagaOracle final : public GradientOracle<T> {
 public:
  // `objective` is borrowed and must outlive the oracle. batch >= 1.
  SagaOracle(const LocalObjective<T>& objective, size_t batch, uint64_t seed);

  void gradient(std::span<const T> x, std::span<T> out) override;
  void visitState(core::StateVisitor& v) override;

 private:
  const LocalObjective<T>& objective_;
  const size_t batch_;
  core::Rng rng_;
  std::vector<T> table_;         // phi_j, one per local sample
  std::vector<double> average_;  // gbar = s sum_j phi_j a_j; double keeps its drift negligible
  std::vector<size_t> drawn_;    // scratch: this call's batch
  std::vector<T> derivative_;    // scratch: loss_j'(a_j^T x) for the batch
};

// The oracle `spec` describes for `objective` (borrowed; must outlive the oracle), seeded by
// `seed`. The spec is validated by the scenario parser; here batch == 0 for kSgd is a bug
// (asserted). lsvrg and saga use the per-sample structure of the linear problems: for them
// `objective` must be a LocalObjective (asserted; the parser refuses them for the MLP).
template <typename T>
std::unique_ptr<GradientOracle<T>> createOracle(const EstimatorSpec& spec,
                                                const Objective<T>& objective, uint64_t seed);

}  // namespace starling::optim

// AdaScale on gossip, without an all-reduce (`"adascale": {...}`, docs/algorithms.md §22).
//
// AdaScaleOracle: a node's gradient as the mean of k >= 2 micro-batch gradients from the oracle
// it wraps (each over b samples), with their AdaScaleSample (sigma^2 rescaled from a micro-batch
// to the base batch b0 by b / b0) as lastAdaScaleSample(). The gradient costs what one batch of
// k b samples costs; only k d values of memory are added.
//
// AdaScaleGossip: DSGD whose message carries two more values, the node's estimate e_i of the
// network's mean AdaScaleSample, kept by dynamic average consensus (gradient tracking on two
// scalars):
//   e_i^0 = s_i^0;   e_i^t = sum_j w'_ij e_j^{t-1} + s_i^t - s_i^{t-1},   W' = I + gamma (W - I)
// With W' doubly stochastic, sum_i e_i^t = sum_i s_i^t every round, and each e_i follows the
// mean of the s_i with a lag of a few mixing times. One round at node i:
//   g_i, s_i = oracle at x_i;  e_i as above;  (r_i, eta_i) = AdaScale_i.step(e_i, schedule)
//   psi_i = x_i - eta_i g_i;   send [psi_i, e_i]  (d + 2 values)
//   x_i = psi_i + gamma sum_j w_ij (psi_j - psi_i);  remember sum_j w'_ij e_j for the next round
// The schedule (the algorithm's step_size, the base run's) is evaluated at floor(tau_i), AdaScale's
// scale-invariant counter, never at the round. Each node keeps its own AdaScale; their gains
// agree as far as their estimates do.
// Thread-safety: none (one node's state).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "optim/algorithm.h"

namespace starling::optim {

template <typename T>
class AdaScaleOracle final : public GradientOracle<T> {
 public:
  // `inner` (borrowed) gives one micro-batch gradient per call; microBatches >= 2;
  // varianceFactor = b / b0 (micro-batch over base batch).
  AdaScaleOracle(GradientOracle<T>& inner, size_t microBatches, double varianceFactor);

  void gradient(std::span<const T> x, std::span<T> out) override;
  // The mean of the micro-batches' losses.
  double lastLoss() const override { return loss_; }
  std::optional<AdaScaleSample> lastAdaScaleSample() const override { return sample_; }
  void visitState(core::StateVisitor& v) override { inner_.visitState(v); }

 private:
  GradientOracle<T>& inner_;
  const double varianceFactor_;
  std::vector<std::vector<T>> micro_;
  double loss_;
  std::optional<AdaScaleSample> sample_;
};

// DSGD with AdaScale (spec.adascale set, spec.kind dsgd). The oracle should report
// lastAdaScaleSample(); without one, every sample is 0 and the gain stays 1.
template <typename T>
std::unique_ptr<Algorithm<T>> createAdaScaleGossip(const AlgorithmSpec& spec,
                                                   std::span<const T> x0,
                                                   GradientOracle<T>& oracle);

}  // namespace starling::optim

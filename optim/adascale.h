// AdaScale: the gain r in [1, S] that scales the step size at a batch S times the base batch, and
// the scale-invariant iteration counter tau that drives the schedule (docs/algorithms.md §22).
//
// With sigma^2 the variance of one base-batch gradient (E ||g - grad F||^2), mu^2 = ||grad F||^2:
//   r = (sigma^2 + mu^2) / (sigma^2 / S + mu^2)        (1 when sigma^2 = 0; clamped to [1, S])
//   x <- x - r * lr(floor(tau)) * gbar;   tau <- tau + r
// sigma^2 and mu^2 are estimated from k >= 2 gradients g_1..g_k, each over an independent base
// batch, at the same point:
//   gbar = (1/k) sum_c g_c;   sigma^2^ = (1/(k-1)) sum_c ||g_c - gbar||^2;
//   mu^2^ = ||gbar||^2 - sigma^2^/k
// Both are unbiased (E sigma^2^ = sigma^2, E mu^2^ = mu^2), and both are linear in the moments
// A = (1/k) sum_c ||g_c||^2 and B = ||gbar||^2:
//   sigma^2^ = k (A - B) / (k - 1),   mu^2^ = (k B - A) / (k - 1).
// The estimates are smoothed across steps by a debiased exponential average with factor theta
// (default max(1 - S/1000, 0), as in the reference code), and clamped at 0 only when the gain is
// formed, so that the smoothing (and an average over nodes) stays linear and unbiased.
//
// How it is meant to be driven, decentralized (no all-reduce): every node i computes its
// gradient as the mean of k >= 2 micro-batch gradients, each over a base batch, and forms its own
// AdaScaleSample s_i = (sigma_i^2^, mu_i^2^) with adascaleSample. The runtime averages the two
// scalars over the nodes by gossip (any average consensus on 2 numbers per round; a value a few
// rounds old is fine, the smoothing spans ~1/(1 - theta) steps) and each node feeds the average
// to its AdaScale::step, which returns r and the step size. Because the estimators are linear,
// the average of the s_i is an unbiased estimate of
//   (1/n) sum_i sigma_i^2            (the within-node variance of a base-batch gradient), and
//   (1/n) sum_i ||grad f_i(x_i)||^2  = ||grad F||^2 + zeta^2 with models in consensus,
// zeta^2 = (1/n) sum_i ||grad f_i - grad F||^2 the heterogeneity across nodes. With identically
// distributed data zeta^2 = 0 and the estimator is AdaScale's; otherwise mu^2 is overestimated
// and r comes out smaller (closer to 1): the step is conservative, never larger than AdaScale's.
// S is the scale of the network's step: with n nodes of k micro-batches of the base batch, the
// average model moves by the mean of n k base-batch gradients, so S = n k. (Micro-batches of b
// samples against a base batch b0: multiply sigma^2^ by b / b0 and use S = n k b / b0.)
// A node that has the moments instead (A and B over any k gradients, e.g. one per node after an
// all-reduce) uses adascaleSampleFromMoments.
// Thread-safety: AdaScale belongs to one node and is driven by one thread; the functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/state.h"
#include "core/status.h"
#include "optim/step_size.h"

namespace starling::optim {

// One step's estimates (one node's, or their average over the nodes).
struct AdaScaleSample {
  double variance = 0.0;     // sigma^2^: variance of one base-batch gradient
  double squaredMean = 0.0;  // mu^2^: squared norm of the expected gradient
};

// From k >= 2 gradients at the same point, each over an independent base batch (all the same
// size): sigma^2^ = (1/(k-1)) sum_c ||g_c - gbar||^2 (Welford's running update, in double: no
// cancellation, and exactly 0 for identical gradients), mu^2^ = ||gbar||^2 - sigma^2^/k.
template <typename T>
AdaScaleSample adascaleSample(std::span<const std::span<const T>> gradients);

// The same from the moments A = (1/k) sum_c ||g_c||^2 and B = ||(1/k) sum_c g_c||^2, k >= 2.
AdaScaleSample adascaleSampleFromMoments(double meanSquaredNorm, double squaredNormOfMean,
                                         double k);

// r = (v + m) / (v / S + m) with v = max(variance, 0), m = max(squaredMean, 0); 1 when v = 0;
// clamped to [1, S]. scale S >= 1.
double adascaleGain(const AdaScaleSample& estimate, double scale);

struct AdaScaleSpec {
  double scale = 1.0;               // S >= 1
  std::optional<double> smoothing;  // theta in [0, 1); unset: max(1 - S/1000, 0)
  // How the runtime drives it (`"adascale"` in a scenario): each node's batch B is split into
  // microBatches k >= 2 of B/k samples; baseBatch b0 is the base run's batch (unset: one
  // micro-batch, B/k), and then S = n B / b0. AdaScale itself reads only scale and smoothing.
  size_t microBatches = 2;
  std::optional<double> baseBatch;
};

core::Status checkAdaScaleSpec(const AdaScaleSpec& spec);

class AdaScale {
 public:
  static core::Result<AdaScale> create(const AdaScaleSpec& spec);

  struct Step {
    double gain = 1.0;      // r_t
    double stepSize = 0.0;  // r_t * schedule.at(floor(tau_t))
    double tau = 0.0;       // tau_t, before this step added r_t
  };
  // One optimizer step: folds `sample` (non-finite values are ignored: the smoothed estimates
  // stay as they were) into the smoothed estimates, forms r_t from them, evaluates the schedule
  // at floor(tau_t), then tau <- tau + r_t.
  Step step(const AdaScaleSample& sample, const StepSizeSchedule& schedule);

  double scale() const { return scale_; }
  double smoothing() const { return theta_; }
  double tau() const { return tau_; }
  double gain() const { return gain_; }  // the last step's r (1 before the first)
  uint64_t steps() const { return steps_; }
  // The debiased smoothed estimates (0 before the first sample).
  AdaScaleSample smoothed() const;

  void reset();
  void visitState(core::StateVisitor& v);

 private:
  AdaScale(double scale, double theta) : scale_(scale), theta_(theta) {}

  double scale_, theta_;
  double emaVariance_ = 0.0, emaSquaredMean_ = 0.0, emaWeight_ = 0.0;
  double tau_ = 0.0, gain_ = 1.0;
  uint64_t steps_ = 0;
};

}  // namespace starling::optim

// Local optimizers with layer structure: SGD, momentum (heavy ball or Nesterov), Adam and LAMB,
// each turning a node's local gradient into an update direction (docs/algorithms.md §20).
//
// Every optimizer maps (x, g) to a direction u, and the caller steps x <- x - lr * u with its own
// step size lr (the algorithm's schedule). The optimizer keeps its moments and its step counter
// t (t = 1 at the first call), written here with g the gradient, lambda the weight decay:
//   sgd:       u = g + lambda x
//   momentum:  b <- mu b + g (b starts at 0);  u = b + lambda x,
//              or with Nesterov u = g + mu b + lambda x
//   adam:      m <- beta1 m + (1 - beta1) g;  v <- beta2 v + (1 - beta2) g^2  (m, v start at 0)
//              bias correction: m^ = m / (1 - beta1^t), v^ = v / (1 - beta2^t); else m^ = m, v^ = v
//              u = m^ / (sqrt(v^) + eps) + lambda x
//   lamb:      r = adam's u (the same m^, v^, eps and decay), then for each tensor l of the layout
//              u_l = (||x_l|| / ||r_l||) r_l, with the trust ratio 1 if ||x_l|| = 0 or ||r_l|| = 0
// The weight decay is decoupled (as in AdamW and LAMB): lambda x is added to the direction after
// the optimizer's transform and never enters a momentum or moment estimate. For plain SGD this is
// the same as an l2 term in the loss; for the others it is not. The built-in problems may already
// put an l2 term into the gradient (ProblemSpec / MlpSpec l2): use one or the other.
// Bias correction: on by default, as in Adam and LAMB's Algorithm 2 in the paper; false gives the
// variant without debiasing that some LAMB code uses (docs/algorithms.md §20 says more).
// LAMB's scaling function phi is the identity (no clip of ||x_l||).
//
// How it is meant to be driven: build a LocalOptimizer for one node from its spec and the model's
// ParameterLayout (the sizes of its tensors in the flat buffer, e.g. mlpLayout for the built-in
// MLP), and either call direction() from a trainer's own loop, or wrap the node's GradientOracle in
// a LocalOptimizerOracle so that any algorithm (createAlgorithm) receives the direction where it
// asked for a gradient. The algorithm's step size is then the optimizer's learning rate.
// The wrapper suits DSGD, CHOCO and plain gossip-with-local-steps. Exact diffusion, gradient
// tracking, NIDS, LEAD and Prox-LEAD converge to the exact optimum because every node's
// correction term is built from gradients of a fixed function; a stateful, nonlinear transform
// (momentum, Adam, LAMB, or any weight decay added here) breaks that: their fixed point is then no
// longer the optimum of (1/n) sum_i f_i. Refusing those combinations (or allowing only kSgd with
// weightDecay 0, which is the identity) is the caller's decision; this file does not check it.
//
// Thread-safety: none; one optimizer belongs to one node and is driven by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/state.h"
#include "core/status.h"
#include "optim/algorithm.h"
#include "optim/local_optimizer_spec.h"

namespace starling::optim {

// The tensors of a model in its flat parameter buffer: tensor l occupies the sizes[l] elements
// after those of tensors 0..l-1. Every size is >= 1 and they sum to the model's dimension.
struct ParameterLayout {
  std::vector<size_t> sizes;

  size_t dim() const;
  // One tensor holding all d parameters (what a model without layer structure has).
  static ParameterLayout single(size_t d);
};

// The built-in MLP's layout (optim/mlp.h): for each layer l = 1..L, W_l (d_l x d_{l-1}) then b_l
// (d_l), as two tensors. `layers` as in MlpSpec; checkMlpLayers is the caller's.
ParameterLayout mlpLayout(const std::vector<int>& layers);

// kInvalidArgument unless the layout has at least one tensor, no empty tensor, and its sizes sum
// to `dim`.
core::Status checkParameterLayout(const ParameterLayout& layout, size_t dim);

template <typename T>
class LocalOptimizer {
 public:
  // Checks the spec, and the layout against the model's dimension `dim`.
  static core::Result<LocalOptimizer<T>> create(const LocalOptimizerSpec& spec,
                                                ParameterLayout layout, size_t dim);

  // Writes the direction u for the gradient `grad` at the model `x` (all three of size dim()) and
  // advances the step counter and the moments. `out` may be `grad` itself (the same span), not a
  // partial overlap. The caller then steps x <- x - lr * u.
  void direction(std::span<const T> x, std::span<const T> grad, std::span<T> out);

  // Forgets the moments and the step counter (a fresh start, e.g. after a restart of the
  // algorithm).
  void reset();

  // The moments and the step counter, for checkpoints (core/state.h); the kind is saved as text
  // and a load into an optimizer of another kind fails.
  void visitState(core::StateVisitor& v);

  size_t dim() const { return dim_; }
  uint64_t steps() const { return step_; }
  const LocalOptimizerSpec& spec() const { return spec_; }
  const ParameterLayout& layout() const { return layout_; }
  // LAMB: the trust ratio each tensor got in the last call (1 for the other kinds), for metrics.
  std::span<const double> lastTrustRatios() const { return trust_; }

 private:
  LocalOptimizer(const LocalOptimizerSpec& spec, ParameterLayout layout);

  LocalOptimizerSpec spec_;
  ParameterLayout layout_;
  size_t dim_ = 0;
  uint64_t step_ = 0;
  std::vector<T> m_, v_;  // momentum: m_ is the buffer b; adam, lamb: the two moments
  std::vector<double> trust_;
};

// A GradientOracle that hands out the optimizer's direction instead of the gradient: it asks
// `inner` for the gradient at x and transforms it in place. Every call is one optimizer step, so
// the algorithm must ask once per round (Algorithm::model() says every built-in one does). See
// the head of this file for the algorithms this combination suits. `inner` is borrowed and must
// outlive the wrapper.
template <typename T>
class LocalOptimizerOracle final : public GradientOracle<T> {
 public:
  LocalOptimizerOracle(GradientOracle<T>& inner, LocalOptimizer<T> optimizer)
      : inner_(inner), optimizer_(std::move(optimizer)) {}

  void gradient(std::span<const T> x, std::span<T> out) override {
    inner_.gradient(x, out);
    optimizer_.direction(x, out, out);
  }

  // The inner oracle's state under "inner/", then the optimizer's under "local_optimizer/".
  void visitState(core::StateVisitor& v) override {
    {
      core::StateVisitor::Scope scope(v, "inner");
      inner_.visitState(v);
    }
    core::StateVisitor::Scope scope(v, "local_optimizer");
    optimizer_.visitState(v);
  }

  double lastLoss() const override { return inner_.lastLoss(); }
  std::optional<AdaScaleSample> lastAdaScaleSample() const override {
    return inner_.lastAdaScaleSample();
  }

  LocalOptimizer<T>& optimizer() { return optimizer_; }
  const LocalOptimizer<T>& optimizer() const { return optimizer_; }

 private:
  GradientOracle<T>& inner_;
  LocalOptimizer<T> optimizer_;
};

}  // namespace starling::optim

// The seam between a node's model and everything that trains it: a local objective f_i over a flat
// parameter vector of dim() elements.
//
// The linear problems (optim/problem.h: least squares, logistic regression) have one parameter
// per feature; the built-in neural network (optim/mlp.h) has one per weight and bias. Algorithms,
// gradient oracles and the Node see only this interface, so they train either without knowing
// which. Every objective follows the same scaling: node i holds m_i of the m samples and
//   f_i(x) = (n/m) sum_{j in S_i} loss_j(x) + (l2/2) ||x||^2,
// so that (1/n) sum_i f_i = F, the global objective.
// Thread-safety: const methods are safe to call concurrently; the Rng passed in is not.
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <span>

#include "core/rng.h"

namespace starling::optim {

// The full gradient written a block of coordinates at a time, for an algorithm that fuses it into
// its own pass over the vector (exact diffusion, DSGD): the gradient is then never written out
// whole and read back. start(x) once, then fill() for consecutive blocks from offset 0 upwards
// (each starting where the last ended); every block equals the same coordinates of
// gradient(x), bit for bit. x must stay unchanged until the last fill. One object serves one
// caller; start() begins again.
template <typename T>
class GradientBlocks {
 public:
  virtual ~GradientBlocks() = default;
  virtual void start(std::span<const T> x) = 0;
  // Writes coordinates [offset, offset + out.size()) of the gradient at start's x.
  virtual void fill(size_t offset, std::span<T> out) = 0;
};

template <typename T>
class Objective {
 public:
  virtual ~Objective() = default;

  // Number of parameters (the length of x and of every gradient).
  virtual int dim() const = 0;
  // Samples this node holds (m_i).
  virtual size_t samples() const = 0;
  // out = grad f_i(x). x.size() == out.size() == dim().
  virtual void gradient(std::span<const T> x, std::span<T> out) const = 0;
  // An unbiased estimate of grad f_i(x) from `batch` samples drawn uniformly with replacement.
  virtual void stochasticGradient(std::span<const T> x, std::span<T> out, size_t batch,
                                  core::Rng& rng) const = 0;
  // The same estimate (the same draws from `rng`, the same `out`), also returning the mean loss
  // of the drawn samples without the l2 term: what a node's running training loss is made of
  // (Leader SGD, docs/algorithms.md §24). NaN from an objective that does not compute it.
  virtual double stochasticGradientWithLoss(std::span<const T> x, std::span<T> out, size_t batch,
                                            core::Rng& rng) const {
    stochasticGradient(x, out, batch, rng);
    return std::numeric_limits<double>::quiet_NaN();
  }
  // f_i(x).
  virtual double value(std::span<const T> x) const = 0;
  // gradient() a block at a time (GradientBlocks), or nullptr where the objective has no such
  // form or it would cost more than gradient() (its default).
  virtual std::unique_ptr<GradientBlocks<T>> gradientBlocks() const { return nullptr; }
};

}  // namespace starling::optim

// The gradient oracle a node's algorithm calls: full local gradients (batch 0) or minibatch
// estimates drawn with the node's own seeded Rng, so that runs are reproducible.
#pragma once

#include <cstdint>

#include "optim/algorithm.h"
#include "optim/problem.h"
#include "runtime/core/rng.h"

namespace starling::optim {

template <typename T>
class ObjectiveOracle final : public GradientOracle<T> {
 public:
  // `objective` is borrowed and must outlive the oracle.
  ObjectiveOracle(const LocalObjective<T>& objective, size_t batch, uint64_t seed)
      : objective_(objective), batch_(batch), rng_(seed) {}

  void gradient(std::span<const T> x, std::span<T> out) override {
    if (batch_ == 0) {
      objective_.gradient(x, out);
    } else {
      objective_.stochasticGradient(x, out, batch_, rng_);
    }
  }

 private:
  const LocalObjective<T>& objective_;
  const size_t batch_;
  core::Rng rng_;
};

}  // namespace starling::optim

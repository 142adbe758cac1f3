// Codistillation over gossip (`"algorithm": {"kind": "dsgd", "codistillation": {...}}`,
// docs/algorithms.md §25). Models are never averaged: each peer trains its own, and is pulled
// towards its neighbours only through their predictions on its own batches. One round at node i:
//
//   x_i <- x_i - eta u_i(x_i)     u: the gradient of f_i + alpha D(own, neighbours' copies),
//                                 or a local optimizer's direction for it (docs/algorithms.md §20)
//   round r % tau == 0:           send x_i (d values); keep the neighbours' x_j as the new copies
//   other rounds:                 send nothing (Algorithm::exchangesIn)
//
// The copies are stale by up to tau rounds. They live in a NeighborModels that the algorithm
// writes and the gradient oracle reads: for the built-in MLP, MlpDistillationOracle (below) adds
// the term's gradient through the network; a trainer's own oracle (the public Peer) reads them
// to compute the term in its framework. The term is on in rounds >= burn_in once copies exist.
// Thread-safety: none (one node's state).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/rng.h"
#include "optim/algorithm.h"
#include "optim/codistillation.h"
#include "optim/mlp.h"

namespace starling::optim {

// The neighbours' stale models, shared by a node's algorithm (which refreshes them) and its
// gradient oracle (which reads them). Owned by whoever builds the node; both borrow it.
template <typename T>
struct NeighborModels {
  std::vector<int> peers;              // sorted, as the messages came
  std::vector<std::vector<T>> models;  // models[k] is peers[k]'s, as of `refreshed`
  uint64_t refreshed = 0;              // the round the copies were taken in
  bool active = false;                 // this round's gradient carries the term

  // Views of the models, for codistillationLossAveraged and the MLP.
  std::vector<std::span<const T>> views() const {
    return std::vector<std::span<const T>>(models.begin(), models.end());
  }
};

// The algorithm, starting from x0 (copied). `oracle` and `neighbors` are borrowed and must
// outlive it. spec.codistillation must be set (its period >= 1).
template <typename T>
std::unique_ptr<Algorithm<T>> createCodistillationGossip(const AlgorithmSpec& spec,
                                                         std::span<const T> x0,
                                                         GradientOracle<T>& oracle,
                                                         NeighborModels<T>& neighbors);

// The `sgd` estimator of the built-in MLP with the codistillation term: while neighbors.active,
// MlpObjective::stochasticGradientWithDistillation against the copies, otherwise
// stochasticGradient; both draw the batch from the same stream, so its checkpoint state is
// ObjectiveOracle's ("rng"). `objective` and `neighbors` are borrowed. batch >= 1.
template <typename T>
class MlpDistillationOracle final : public GradientOracle<T> {
 public:
  MlpDistillationOracle(const MlpObjective<T>& objective, size_t batch, uint64_t seed,
                        const CodistillationSpec& spec, const NeighborModels<T>& neighbors)
      : objective_(objective), batch_(batch), rng_(seed), spec_(spec), neighbors_(neighbors) {}

  void gradient(std::span<const T> x, std::span<T> out) override {
    if (neighbors_.active && !neighbors_.models.empty()) {
      const auto views = neighbors_.views();
      objective_.stochasticGradientWithDistillation(x, views, spec_, out, batch_, rng_);
    } else {
      objective_.stochasticGradient(x, out, batch_, rng_);
    }
  }

  void visitState(core::StateVisitor& v) override {
    core::StateVisitor::Scope scope(v, "rng");
    rng_.visitState(v);
  }

 private:
  const MlpObjective<T>& objective_;
  const size_t batch_;
  core::Rng rng_;
  const CodistillationSpec spec_;
  const NeighborModels<T>& neighbors_;
};

}  // namespace starling::optim

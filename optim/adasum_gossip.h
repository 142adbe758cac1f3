// DSGD with Adasum in place of the weighted average of updates (`"combine": "adasum"`,
// docs/algorithms.md §23). One round at node i, with u_i the oracle's direction (a gradient, or a
// local optimizer's step):
//
//   Δ_i = −η u_i(x_i)                                   the local update
//   send [x_i, Δ_i]                                      2d values
//   Δ̃_i = Adasum(Δ_j for j ∈ {i} ∪ N_i, in peer-id order, tensor by tensor)
//   x_i ← Σ_j w_ij x_j + Δ̃_i                             gossip on the model, Adasum on the update
//
// The models mix with W, so the network keeps consensus as DSGD does (the average moves by the
// average Δ̃); the updates are combined by Adasum, which adds orthogonal updates and averages
// parallel ones. On a complete graph every node combines the same updates in the same order and
// the run is centralized Adasum exactly.
// Thread-safety: none (one node's state).
#pragma once

#include <memory>
#include <span>

#include "optim/algorithm.h"

namespace starling::optim {

template <typename T>
std::unique_ptr<Algorithm<T>> createAdasumGossip(const AlgorithmSpec& spec, std::span<const T> x0,
                                                 GradientOracle<T>& oracle);

}  // namespace starling::optim

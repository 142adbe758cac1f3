// CHOCO-SGD (Koloskova, Stich, Jaggi 2019; docs/algorithms.md §7): decentralized SGD that
// converges with any contractive compressor, because every message is a compressed difference
// against a reference point x-hat that the sender and all its neighbours track identically.
#pragma once

#include <memory>
#include <span>

#include "optim/algorithm.h"

namespace starling::optim {

// Memory-efficient form, in the order of the reference implementation:
//   x <- x - eta g(x);  x <- x + gamma (s - x_hat);  send q = C(x - x_hat);
//   x_hat <- x_hat + q;  s <- s + w_ii q + sum_j w_ij q_j        (s = sum_j w_ij x_hat_j)
// prepare() writes the uncompressed difference x - x_hat; the engine compresses it and hands
// absorb() the decoded q of this node and of its neighbours. s assumes the same W every round;
// with spec.timeVarying the algorithm instead tracks every neighbour's x_hat_j (memory: one
// vector per neighbour of the schedule's support graph) and gossips with each round's W.
template <typename T>
std::unique_ptr<Algorithm<T>> createChoco(const AlgorithmSpec& spec, std::span<const T> x0,
                                          GradientOracle<T>& oracle);

}  // namespace starling::optim

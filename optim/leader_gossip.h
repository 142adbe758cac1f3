// Leader SGD on gossip (`"leader": {...}`, docs/algorithms.md §24): DSGD whose nodes also pull
// toward the best-performing node they know, with no server.
//
// Message of node i in round t (2d + 3 values):
//   [psi_i (d) | L_i | candidate loss | candidate rank | candidate model (d)]
// L_i is the node's running training loss (optim::RunningLoss over its last batches). One round:
//   1. g = the oracle's direction at x (gradient or local optimizer step); L_i <- running loss.
//      If t % tau_G == 0 a global election starts: candidate = (L_i, i, x_i).
//   2. psi = x - eta (g + lambda_L (x - x~_L) + lambda_G (x - x~_G))   (leaderDirection; a term
//      is left out while that leader is unknown or is the node itself)
//   3. x = psi + gamma sum_j w_ij (psi_j - psi)                        (DSGD's combine)
//   4. max-consensus: the best candidate among the node's and its neighbours' (lowest loss, ties
//      to the lowest rank, NaN never) replaces the node's, model included. After D rounds
//      (D = the graph's diameter; an election ends at t + 1 - start == D) every node holds the
//      global leader's model as it was when the election started: x~_G = it, and
//      x <- x + c_G (x~_G - x)  (nothing when the node leads itself).
//   5. every tau_L rounds ((t + 1) % tau_L == 0): the local leader is the best of the node and its
//      neighbours by L; x~_L = that neighbour's psi of this round, and x <- x + c_L (x~_L - x).
// Losses travel as T values (a node without one sends T's largest value, which reads back as
// none: messages must be finite) and every comparison is between values rounded to T, so all nodes
// compare the same numbers and elect the same leader. tau_G >= D is required (else an election
// would restart before it ends); the runtime fills spec.diameter from the graph.
// Thread-safety: none (one node's state).
#pragma once

#include <memory>
#include <span>

#include "optim/algorithm.h"

namespace starling::optim {

// spec.leader must be set and spec.kind dsgd; the oracle should report lastLoss() (a node
// whose losses are NaN never leads).
template <typename T>
std::unique_ptr<Algorithm<T>> createLeaderGossip(const AlgorithmSpec& spec, std::span<const T> x0,
                                                 GradientOracle<T>& oracle);

}  // namespace starling::optim

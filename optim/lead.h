// NIDS and LEAD / Prox-LEAD (docs/algorithms.md §6 and §8): bias-corrected primal-dual methods that
// converge to the exact optimum, LEAD and Prox-LEAD through compressed links.
//
// NIDS (Li, Shi, Yan 2019), uniform step eta, W~ = (I + W)/2, proximal step for r:
//   z^1 = x^0 - eta grad(x^0);  x^1 = prox(z^1)
//   xbar^k = 2x^k - x^{k-1} - eta (grad(x^k) - grad(x^{k-1}))          (sent, d values)
//   z^{k+1} = z^k - x^k + W~ xbar^k;  x^{k+1} = prox(z^{k+1})
//
// Prox-LEAD (Li, Liu, Tang, Yan, Yuan 2021); LEAD (Liu et al. 2021) is the case r = 0, Z = X:
//   init: Z^1 = X^0 - eta G^0; X^1 = prox(Z^1); D^1 = 0; H^1 = 0; H_w^1 = 0
//   Y = 2X - Z - eta G - eta D;  q = C(Y - H) sent;
//   Yhat = H + q;  Yhat_w = H_w + W q;  H <- (1-a) H + a Yhat;  H_w <- (1-a) H_w + a Yhat_w
//   D <- D + (gamma / (2 eta)) (Yhat - Yhat_w);  Z <- X - eta G - eta D;  X <- prox(Z)
// Without compression and with gamma = 1, Prox-LEAD's iterates are NIDS's (a test checks it).
// H_w = W H assumes the same W every round; with spec.timeVarying the node instead tracks every
// neighbour's h_j (Algorithm::tracksNeighbors) and forms Yhat_w = sum_j w_ij(t) yhat_j each round.
#pragma once

#include <memory>
#include <span>

#include "optim/algorithm.h"

namespace starling::optim {

template <typename T>
std::unique_ptr<Algorithm<T>> createNids(const AlgorithmSpec& spec, std::span<const T> x0,
                                         GradientOracle<T>& oracle);

// kLead and kProxLead (the latter with spec.regularizer).
template <typename T>
std::unique_ptr<Algorithm<T>> createLead(const AlgorithmSpec& spec, std::span<const T> x0,
                                         GradientOracle<T>& oracle);

}  // namespace starling::optim

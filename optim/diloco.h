// DiLoCo-class training over gossip: H local steps per round, then one exchange and an outer
// step (docs/algorithms.md §29).
//
// Node i keeps its outer model theta_i. Each round (one outer round) it copies theta_i into its
// local model x_i, takes H steps x_i <- x_i - alpha g_i(x_i) (g_i from the node's oracle, so the
// scenario's local optimizer, "inner", shapes it as for DSGD), and sends x_i (d values). With
// xbar_i = sum_j w_ij x_j the mixed local models and D_i = theta_i - xbar_i its pseudo-gradient
// (on the complete graph, with the outer models equal, D_i is the mean of every node's
// theta - x_j, all-reduce DiLoCo's averaged pseudo-gradient):
//   sgd:        theta_i <- xbar_i + (D_i - lr D_i)            (= theta_i - lr D_i)
//   nesterov:   m_i <- mu m_i + D_i;  theta_i <- xbar_i + (D_i - lr (D_i + mu m_i))
//   exact_diffusion: the inner steps are x <- x - alpha (g_i(x) + y_i), and after the mix
//               y_i <- y_i + (x_i - xbar_i) / (2 alpha H);  theta_i <- xbar_i + (D_i - lr D_i).
// theta_i - lr D_i moves each outer model towards its neighbours' mixed models, so the replicas'
// disagreement contracts every round (the models themselves are mixed, not only the pseudo-
// gradients). Written as xbar_i + (D_i - lr u) rather than theta_i - lr u, outer sgd with lr 1
// leaves exactly xbar_i: with H = 1 that is DSGD, bit for bit. The exact_diffusion outer keeps
// sum_i y_i = 0 (W doubly stochastic), and at a fixed point every x_i equals theta_i (the dual
// stops moving only at consensus), so each node's corrected local steps stand still there:
// grad f_i(theta) + y_i = 0, whose sum over i is the optimality condition of (1/n) sum_i f_i.
// It needs the plain sgd inner step for that (the scenario refuses another).
//   noloco:     sends [theta_i, x_i]; with theta-bar_i, x-bar_i their mixes,
//               m_i <- mu m_i - lr (theta-bar_i - x-bar_i) - pull (theta_i - theta-bar_i);
//               theta_i += m_i.
// Also in §29: compressed differences against reference points (a lossy codec without error
// feedback: the message is x_i - x-hat_i), fragments (one slice of the model exchanged a round,
// H / F inner steps each, the local model of the others kept) and overlap (the next round's
// inner steps during the exchange, the outer step landing on top of them).
//
// The algorithm asks its oracle H times a round, at its local model rather than at model() (the
// outer model), so a trainer's one gradient per step() cannot drive it (the public Peer refuses).
#pragma once

#include <memory>
#include <span>

#include "optim/algorithm.h"
#include "optim/diloco_spec.h"

namespace starling::optim {

template <typename T>
std::unique_ptr<Algorithm<T>> createDiloco(const DilocoSpec& spec, std::span<const T> x0,
                                           GradientOracle<T>& oracle);

}  // namespace starling::optim

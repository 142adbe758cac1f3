// Sketched momentum and error feedback for gossip (`"sketch": {...}` under dsgd,
// docs/algorithms.md §27): FetchSGD's sketch-space momentum and error accumulation, where what
// travels is the Count-Sketch of the node's model, never the model.
//
// Every node sketches with the same r x c hashes for the whole run (compression/sketch_hash.h,
// seeded from the scenario's shared seed), so sums of sketches from different nodes and from
// different rounds all mean the sketch of the sum. Node i keeps its model x_i (d values) and
// three r x c tables: S_x = S(x_i) (kept in step with x), the momentum sketch S_u and the error
// sketch S_e. One round, with this round's row of W (w_ii + sum_j w_ij = 1):
//   send S_x;                           mix = w_ii S_x + sum_j w_ij S_x,j  (= S(sum_j w_ij x_j))
//   S_u <- rho S_u + eta_t S(g_i)       (g_i: the oracle's gradient at x_i)
//   S_e <- S_e + S_u + gamma (S_x - mix)
//   Delta = top-k of U(S_e)             (U: the lower median over rows; ties to the lower index)
//   S_e <- S_e - S(Delta);  x_i <- x_i - Delta;  S_x <- S_x - S(Delta)
// The message is r c values whatever d; the neighbours' sketches are summed first and unsketched
// once. absorb depends on the neighbours only through mix: the CombinedAbsorption capability.
// Thread-safety: none (one node's state).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <span>

#include "optim/algorithm.h"

namespace starling::optim {

// DSGD in sketch space (spec.sketch set, spec.kind dsgd). The gradient oracle's output is used as
// is (the local optimizer must be plain sgd: the momentum is the sketch's).
template <typename T>
std::unique_ptr<Algorithm<T>> createSketchGossip(const AlgorithmSpec& spec, std::span<const T> x0,
                                                 GradientOracle<T>& oracle);

// The number of coordinates a round applies: spec.k, or ceil(ratio d), clamped to 1..d.
uint64_t sketchKept(const SketchGossipSpec& spec, uint64_t d);

// Why a sketch does not fit a model of d values, and the key of /algorithm/sketch at fault: more
// columns than d (a sketch larger than the model it stands for), k larger than d, or d of 2^32
// or more (key empty). Unset when it fits.
struct SketchMisfit {
  std::string key;
  std::string why;
};
std::optional<SketchMisfit> sketchMisfit(const SketchGossipSpec& spec, uint64_t d);

}  // namespace starling::optim

// Mixing (gossip) weights: one row of W per node, computed from degrees only.
//
// Every rule yields a symmetric, doubly stochastic, non-negative W with w_ij > 0 exactly on the
// edges and the diagonal (metropolis: w_ij = 1/(1 + max(deg_i, deg_j)); max_degree:
// w_ij = 1/(1 + max_k deg_k); uniform: w_ij = 1/(1 + deg_i), valid only where every edge joins two
// nodes of equal degree). Thread-safety: values.
#pragma once

#include <vector>

#include "core/status.h"
#include "topology/graph.h"
#include "topology/spec.h"

namespace starling::topology {

struct MixingEntry {
  int peer;
  double weight;
};

// Row i of W: the self weight and the off-diagonal entries sorted by peer id.
struct MixingRow {
  double self = 1.0;
  std::vector<MixingEntry> peers;
};

// The whole sparse W for one round's graph. rows[i] belongs to node i.
struct MixingMatrix {
  std::vector<MixingRow> rows;
  int nodes() const { return static_cast<int>(rows.size()); }
  // Dense n x n copy (diagnostics and tests).
  std::vector<std::vector<double>> dense() const;
};

// Weights of `rule` on graph g. kInvalidArgument for kUniform on a graph with an edge between
// nodes of different degree.
core::Result<MixingMatrix> mixingWeights(const Graph& g, WeightRule rule);

// Spectral gap 1 - max(|lambda_2|, |lambda_n|) of a symmetric W (dense eigen-solve, O(n^3)).
double spectralGap(const MixingMatrix& w);

}  // namespace starling::topology

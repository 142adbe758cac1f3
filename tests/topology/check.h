// Shared assertions for the topology tests.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>

#include "topology/graph.h"
#include "topology/mixing.h"

namespace starling::topology::testing {

// W is symmetric, doubly stochastic (1e-12), non-negative, positive exactly on g's edges and zero
// elsewhere off the diagonal, and its sparse rows list g's neighbours in order.
inline void checkMixing(const Graph& g, const MixingMatrix& w) {
  REQUIRE(w.nodes() == g.nodes());
  const int n = g.nodes();
  const auto d = w.dense();
  double worstRow = 0.0, worstCol = 0.0, minEntry = 1.0;
  bool symmetric = true, supportMatches = true, rowsMatchGraph = true;
  for (int i = 0; i < n; ++i) {
    double row = 0.0, col = 0.0;
    for (int j = 0; j < n; ++j) {
      row += d[i][j];
      col += d[j][i];
      minEntry = std::min(minEntry, d[i][j]);
      if (d[i][j] != d[j][i]) symmetric = false;
      if (i != j && g.hasEdge(i, j) != (d[i][j] > 0.0)) supportMatches = false;
    }
    worstRow = std::max(worstRow, std::abs(row - 1.0));
    worstCol = std::max(worstCol, std::abs(col - 1.0));
    const auto& peers = w.rows[i].peers;
    if (peers.size() != g.neighbors(i).size()) {
      rowsMatchGraph = false;
    } else {
      for (size_t k = 0; k < peers.size(); ++k) {
        if (peers[k].peer != g.neighbors(i)[k]) rowsMatchGraph = false;
      }
    }
  }
  CHECK(worstRow <= 1e-12);
  CHECK(worstCol <= 1e-12);
  CHECK(minEntry >= 0.0);
  CHECK(symmetric);
  CHECK(supportMatches);
  CHECK(rowsMatchGraph);
}

inline GraphSpec graphSpec(GraphKind kind, WeightRule rule = WeightRule::kMetropolis) {
  GraphSpec s;
  s.kind = kind;
  s.weights = rule;
  return s;
}

// A grid spec that fits n nodes: the most square factorisation rows <= cols.
inline GraphSpec gridFor(int n, bool torus = false) {
  GraphSpec s = graphSpec(GraphKind::kGrid);
  int rows = 1;
  for (int r = 1; r * r <= n; ++r) {
    if (n % r == 0) rows = r;
  }
  s.rows = rows;
  s.cols = n / rows;
  s.torus = torus;
  return s;
}

inline Graph mustBuild(const GraphSpec& spec, int n, uint64_t seed = 1) {
  core::Result<Graph> g = buildGraph(spec, n, seed);
  INFO(g.status().toString());
  REQUIRE(g.isOk());
  return *g;
}

}  // namespace starling::topology::testing

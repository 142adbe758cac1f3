// Undirected simple graphs as immutable values, and the generators for the built-in kinds.
//
// A Graph stores sorted adjacency lists (no self loops, no multi-edges). It is cheap to share by
// const reference or std::shared_ptr<const Graph>. Thread-safety: immutable, safe to read from any
// thread. Boost.Graph is used inside the .cc files only (connectivity, diameter).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/core/status.h"
#include "topology/spec.h"

namespace starling::topology {

class Graph {
 public:
  Graph() = default;
  // Builds a graph with `nodes` vertices from an edge list; self loops and duplicate edges (in
  // either orientation) are dropped. Endpoints must be < nodes (asserted: a bug, not input).
  static Graph fromEdges(int nodes, const std::vector<std::pair<int, int>>& edges);

  int nodes() const { return static_cast<int>(adj_.size()); }
  // Neighbours of i, sorted ascending.
  const std::vector<int>& neighbors(int i) const { return adj_[i]; }
  int degree(int i) const { return static_cast<int>(adj_[i].size()); }
  int maxDegree() const;
  bool hasEdge(int i, int j) const;
  // Every edge once as (i, j) with i < j, sorted.
  std::vector<std::pair<int, int>> edges() const;
  size_t edgeCount() const;

  friend bool operator==(const Graph&, const Graph&) = default;

 private:
  std::vector<std::vector<int>> adj_;
};

// Builds the graph described by `spec` for `nodes` vertices. `seed` feeds the random kinds; the
// result is a pure function of (spec, nodes, seed). Errors (kInvalidArgument): sizes that do not
// fit the kind (grid rows*cols != nodes, ...), p out of range, or a random graph that stayed
// disconnected after 1000 draws.
core::Result<Graph> buildGraph(const GraphSpec& spec, int nodes, uint64_t seed);

// Connectivity and diameter (Boost.Graph inside). diameter() of a disconnected graph is -1.
bool isConnected(const Graph& g);
int diameter(const Graph& g);

}  // namespace starling::topology

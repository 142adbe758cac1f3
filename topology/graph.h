// Undirected simple graphs as immutable values, and the generators for the built-in kinds.
//
// A Graph stores sorted adjacency lists (no self loops, no multi-edges). It is cheap to share by
// const reference or std::shared_ptr<const Graph>. Thread-safety: immutable, safe to read from any
// thread. Boost.Graph is used inside the .cc files only (connectivity, diameter).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "topology/spec.h"

namespace starling::topology {

// A number as an ostream writes it ("0.5", "1e-05"), for error messages.
std::string formatDouble(double x);

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
// fit the kind (grid rows*cols != nodes, ...), p out of range, a random graph that
// checkRandomGraph() refuses, or one that stayed disconnected after randomGraphDraws() draws.
core::Result<Graph> buildGraph(const GraphSpec& spec, int nodes, uint64_t seed);

// Random graphs are drawn as Erdős–Rényi G(n, p) until a draw is connected. Each draw costs a
// coin flip per pair (n <= kPairwiseMaxNodes: the sampler seeded graphs have always come from)
// or, for larger n, about n + 4 p n(n-1)/2 steps (geometric skips between edges). All draws of
// one graph together are held to kRandomGraphWork such steps (about 2 s) and kMaxRandomDraws.
inline constexpr uint64_t kRandomGraphWork = uint64_t{1} << 28;
inline constexpr int kMaxRandomDraws = 1000;
inline constexpr int kPairwiseMaxNodes = 4096;
// The chance, estimated by the limit below, that every allowed draw of an accepted p fails.
inline constexpr double kRandomGraphFailure = 1e-3;

// How many draws of G(n, p) fit the work budget (at most kMaxRandomDraws; 0 when one draw alone
// does not fit).
int randomGraphDraws(int n, double p);

// The smallest p for which the allowed draws on n nodes find a connected graph with probability
// about 1 - kRandomGraphFailure or more, from the Erdős–Rényi limit: the isolated nodes of
// G(n, p) are about Poisson with mean mu = n (1 - p)^(n - 1), and a draw without isolated nodes is
// connected with probability tending to 1, so a draw is connected with probability about
// exp(-mu). This puts the minimum near ln(n)/n (mu = 1 there): 0.0019 for 4096 nodes, where the
// budget allows 32 draws. 0 when every p works, as it does for very small n (where the limit is
// no guide and the draw limit alone decides).
double minRandomGraphP(int n);

// Expected number of isolated nodes of G(n, p): n (1 - p)^(n - 1).
double isolatedNodes(int n, double p);

// kInvalidArgument, without a field prefix and saying the minimum p, when drawing a connected
// G(n, p) is hopeless within the budget: p < minRandomGraphP(n), or one draw alone exceeds it.
core::Status checkRandomGraph(double p, int n);

// Connectivity (a breadth-first search) and diameter (Boost.Graph inside). diameter() of a
// disconnected graph is -1.
bool isConnected(const Graph& g);
int diameter(const Graph& g);

}  // namespace starling::topology

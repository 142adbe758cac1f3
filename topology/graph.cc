#include "topology/graph.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/connected_components.hpp>
#include <cassert>
#include <sstream>
#include <string>

#include "runtime/core/rng.h"

namespace starling::topology {
namespace {

// Names the random stream of Erdős–Rényi draws so it never coincides with other uses of the seed.
constexpr uint64_t kRandomGraphSalt = 0x746f706f2d657200ULL;  // "topo-er"
constexpr int kMaxRandomDraws = 1000;

using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS>;

BoostGraph toBoost(const Graph& g) {
  BoostGraph bg(g.nodes());
  for (const auto& [i, j] : g.edges()) boost::add_edge(i, j, bg);
  return bg;
}

std::string formatDouble(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

std::vector<std::pair<int, int>> ringEdges(int n) {
  std::vector<std::pair<int, int>> e;
  for (int i = 0; i < n; ++i) e.emplace_back(i, (i + 1) % n);
  return e;  // n = 2 yields (0,1),(1,0): deduplicated; n = 1 yields a self loop: dropped.
}

std::vector<std::pair<int, int>> lineEdges(int n) {
  std::vector<std::pair<int, int>> e;
  for (int i = 0; i + 1 < n; ++i) e.emplace_back(i, i + 1);
  return e;
}

std::vector<std::pair<int, int>> gridEdges(int rows, int cols, bool torus) {
  std::vector<std::pair<int, int>> e;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const int id = r * cols + c;
      if (c + 1 < cols) {
        e.emplace_back(id, id + 1);
      } else if (torus) {
        e.emplace_back(id, r * cols);
      }
      if (r + 1 < rows) {
        e.emplace_back(id, id + cols);
      } else if (torus) {
        e.emplace_back(id, c);
      }
    }
  }
  return e;
}

std::vector<std::pair<int, int>> exponentialEdges(int n) {
  std::vector<std::pair<int, int>> e;
  for (int64_t step = 1; step < n; step *= 2) {
    for (int i = 0; i < n; ++i) e.emplace_back(i, static_cast<int>((i + step) % n));
  }
  return e;
}

std::vector<std::pair<int, int>> completeEdges(int n) {
  std::vector<std::pair<int, int>> e;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) e.emplace_back(i, j);
  }
  return e;
}

std::vector<std::pair<int, int>> starEdges(int n) {
  std::vector<std::pair<int, int>> e;
  for (int i = 1; i < n; ++i) e.emplace_back(0, i);
  return e;
}

core::Result<Graph> randomGraph(double p, int n, uint64_t seed) {
  if (!(p > 0.0 && p <= 1.0)) {
    return core::invalidArgument("p: must be in (0, 1] for a random graph, got " + formatDouble(p));
  }
  for (int attempt = 0; attempt < kMaxRandomDraws; ++attempt) {
    core::Rng rng(core::deriveSeed(seed, kRandomGraphSalt, static_cast<uint64_t>(attempt)));
    std::vector<std::pair<int, int>> e;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        if (rng.bernoulli(p)) e.emplace_back(i, j);
      }
    }
    Graph g = Graph::fromEdges(n, e);
    if (isConnected(g)) return g;
  }
  return core::invalidArgument("p: random graph with p=" + formatDouble(p) + " on " +
                               std::to_string(n) + " nodes stayed disconnected after " +
                               std::to_string(kMaxRandomDraws) + " draws; raise p");
}

}  // namespace

Graph Graph::fromEdges(int nodes, const std::vector<std::pair<int, int>>& edges) {
  assert(nodes >= 0);
  Graph g;
  g.adj_.resize(static_cast<size_t>(nodes));
  for (const auto& [i, j] : edges) {
    assert(i >= 0 && i < nodes && j >= 0 && j < nodes);
    if (i == j) continue;
    g.adj_[i].push_back(j);
    g.adj_[j].push_back(i);
  }
  for (auto& list : g.adj_) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  return g;
}

int Graph::maxDegree() const {
  int best = 0;
  for (int i = 0; i < nodes(); ++i) best = std::max(best, degree(i));
  return best;
}

bool Graph::hasEdge(int i, int j) const {
  if (i < 0 || j < 0 || i >= nodes() || j >= nodes()) return false;
  return std::binary_search(adj_[i].begin(), adj_[i].end(), j);
}

std::vector<std::pair<int, int>> Graph::edges() const {
  std::vector<std::pair<int, int>> out;
  out.reserve(edgeCount());
  for (int i = 0; i < nodes(); ++i) {
    for (int j : adj_[i]) {
      if (i < j) out.emplace_back(i, j);
    }
  }
  return out;
}

size_t Graph::edgeCount() const {
  size_t twice = 0;
  for (const auto& list : adj_) twice += list.size();
  return twice / 2;
}

core::Result<Graph> buildGraph(const GraphSpec& spec, int nodes, uint64_t seed) {
  if (nodes < 1) return core::invalidArgument("nodes: must be >= 1, got " + std::to_string(nodes));
  switch (spec.kind) {
    case GraphKind::kRing:
      return Graph::fromEdges(nodes, ringEdges(nodes));
    case GraphKind::kLine:
      return Graph::fromEdges(nodes, lineEdges(nodes));
    case GraphKind::kGrid:
      if (spec.rows < 1 || spec.cols < 1 ||
          static_cast<int64_t>(spec.rows) * spec.cols != static_cast<int64_t>(nodes)) {
        return core::invalidArgument(
            "rows/cols: grid needs rows >= 1, cols >= 1 and rows * cols == nodes, got rows=" +
            std::to_string(spec.rows) + ", cols=" + std::to_string(spec.cols) +
            ", nodes=" + std::to_string(nodes));
      }
      return Graph::fromEdges(nodes, gridEdges(spec.rows, spec.cols, spec.torus));
    case GraphKind::kRandom:
      return randomGraph(spec.p, nodes, seed);
    case GraphKind::kExponential:
      return Graph::fromEdges(nodes, exponentialEdges(nodes));
    case GraphKind::kComplete:
      return Graph::fromEdges(nodes, completeEdges(nodes));
    case GraphKind::kStar:
      return Graph::fromEdges(nodes, starEdges(nodes));
  }
  return core::invalidArgument("kind: unknown graph kind " +
                               std::to_string(static_cast<int>(spec.kind)));
}

bool isConnected(const Graph& g) {
  if (g.nodes() <= 1) return true;
  const BoostGraph bg = toBoost(g);
  std::vector<int> component(static_cast<size_t>(g.nodes()));
  return boost::connected_components(bg, component.data()) == 1;
}

int diameter(const Graph& g) {
  if (g.nodes() <= 1) return 0;
  if (!isConnected(g)) return -1;
  const BoostGraph bg = toBoost(g);
  std::vector<int> dist(static_cast<size_t>(g.nodes()));
  int best = 0;
  for (int s = 0; s < g.nodes(); ++s) {
    std::fill(dist.begin(), dist.end(), 0);
    boost::breadth_first_search(bg, boost::vertex(s, bg),
                                boost::visitor(boost::make_bfs_visitor(
                                    boost::record_distances(dist.data(), boost::on_tree_edge()))));
    best = std::max(best, *std::max_element(dist.begin(), dist.end()));
  }
  return best;
}

}  // namespace starling::topology

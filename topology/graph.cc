#include "topology/graph.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "core/rng.h"

namespace starling::topology {
namespace {

// Names the random stream of Erdős–Rényi draws so it never coincides with other uses of the seed.
constexpr uint64_t kRandomGraphSalt = 0x746f706f2d657200ULL;  // "topo-er"

using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS>;

BoostGraph toBoost(const Graph& g) {
  BoostGraph bg(g.nodes());
  for (const auto& [i, j] : g.edges()) boost::add_edge(i, j, bg);
  return bg;
}


// Three significant digits, for sizes and probabilities in messages; whole numbers from 1000.
std::string threeDigits(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, x >= 1000.0 && x < 1e15 ? "%.0f" : "%.3g", x);
  return buf;
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

// Union-find over the nodes: tells whether a draw is connected while its edges are generated,
// without building a Graph (and Boost's copy of it) for every draw that is thrown away.
class Components {
 public:
  explicit Components(int n) : parent_(static_cast<size_t>(n)), count_(n) {
    for (int i = 0; i < n; ++i) parent_[i] = i;
  }
  void join(int a, int b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    parent_[std::max(a, b)] = std::min(a, b);
    --count_;
  }
  int count() const { return count_; }

 private:
  int find(int a) {
    while (parent_[a] != a) {
      parent_[a] = parent_[parent_[a]];  // path halving
      a = parent_[a];
    }
    return a;
  }
  std::vector<int> parent_;
  int count_;
};

double pairsOf(int n) { return static_cast<double>(n) * (n - 1) / 2.0; }

// Work of one draw, in the units of kRandomGraphWork: a coin flip per pair for the pairwise
// sampler; a step per node and kSkipEdgeWork per edge for the skipping one (each edge costs a
// logarithm and a union-find join, several times a coin flip).
constexpr double kSkipEdgeWork = 4.0;
double drawWork(int n, double p) {
  if (n <= kPairwiseMaxNodes) return pairsOf(n);
  return n + kSkipEdgeWork * p * pairsOf(n);
}

// One draw of G(n, p); returns whether it is connected. n <= kPairwiseMaxNodes: a coin flip per
// pair (i < j) in order, the sampler every seeded graph so far was drawn with. Larger n: geometric
// skips over the same ordered pairs (Batagelj & Brandes, "Efficient generation of large random
// networks", 2005): the gap to the next edge is Geometric(p), so a draw costs O(n + edges)
// instead of O(n^2). Both give every pair an edge independently with probability p.
bool drawRandomGraph(int n, double p, uint64_t seed, std::vector<std::pair<int, int>>& e) {
  core::Rng rng(seed);
  e.clear();
  Components comp(n);
  if (n <= kPairwiseMaxNodes) {
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        if (rng.bernoulli(p)) {
          e.emplace_back(i, j);
          comp.join(i, j);
        }
      }
    }
    return comp.count() == 1;
  }
  // Pairs (w, v) with w < v, v = 1..n-1; `w` runs past v - 1 into the next rows.
  const double logKeep = std::log1p(-p);  // -inf for p = 1: every gap is 0
  int64_t v = 1, w = -1;
  while (v < n) {
    const double u = 1.0 - rng.uniform();  // in (0, 1]
    // Capped at the number of pairs, which ends the draw, so the cast cannot overflow.
    const double gap = p >= 1.0 ? 0.0 : std::floor(std::log(u) / logKeep);
    w += 1 + static_cast<int64_t>(std::min(gap, pairsOf(n)));
    while (w >= v && v < n) {
      w -= v;
      ++v;
    }
    if (v < n) {
      e.emplace_back(static_cast<int>(w), static_cast<int>(v));
      comp.join(static_cast<int>(w), static_cast<int>(v));
    }
  }
  return comp.count() == 1;
}

core::Result<Graph> randomGraph(double p, int n, uint64_t seed) {
  if (!(p > 0.0 && p <= 1.0)) {
    return core::invalidArgument("p: must be in (0, 1] for a random graph, got " + formatDouble(p));
  }
  if (auto st = checkRandomGraph(p, n); !st.isOk()) {
    return core::invalidArgument("p: " + st.message());
  }
  const int draws = randomGraphDraws(n, p);
  std::vector<std::pair<int, int>> e;
  for (int attempt = 0; attempt < draws; ++attempt) {
    const uint64_t drawSeed =
        core::deriveSeed(seed, kRandomGraphSalt, static_cast<uint64_t>(attempt));
    if (drawRandomGraph(n, p, drawSeed, e)) return Graph::fromEdges(n, e);
  }
  return core::invalidArgument("p: random graph with p=" + formatDouble(p) + " on " +
                               std::to_string(n) + " nodes stayed disconnected after " +
                               std::to_string(draws) + " draws; raise p");
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

int randomGraphDraws(int n, double p) {
  if (n <= 1) return 1;
  const double draws = std::floor(static_cast<double>(kRandomGraphWork) / drawWork(n, p));
  return static_cast<int>(std::min<double>(kMaxRandomDraws, draws));
}

double isolatedNodes(int n, double p) {
  if (n <= 1) return 0.0;
  return n * std::exp((n - 1) * std::log1p(-std::min(p, 1.0)));
}

double minRandomGraphP(int n) {
  if (n <= 1) return 0.0;
  // The draws allowed near the threshold ln(n)/n, where a draw is cheapest among useful p.
  const double threshold = std::min(1.0, std::log(static_cast<double>(n)) / (n - 1));
  const int draws = randomGraphDraws(n, threshold);
  if (draws < 1) return 1.0;
  // P(one draw is connected) ~ exp(-mu); all `draws` fail with probability (1 - exp(-mu))^draws.
  // The largest mu that keeps that below kRandomGraphFailure:
  const double muMax = -std::log(-std::expm1(std::log(kRandomGraphFailure) / draws));
  if (muMax >= n) return 0.0;
  // n (1 - p)^(n - 1) = muMax.
  return -std::expm1(std::log(muMax / n) / (n - 1));
}

core::Status checkRandomGraph(double p, int n) {
  if (n <= 1) return core::Status::ok();
  if (randomGraphDraws(n, p) < 1) {
    return core::invalidArgument(
        "a random graph with p=" + formatDouble(p) + " on " + std::to_string(n) +
        " nodes has about " + threeDigits(p * pairsOf(n)) + " edges, more than the " +
        std::to_string(static_cast<uint64_t>(kRandomGraphWork / kSkipEdgeWork)) +
        " one may have; lower p");
  }
  const double minP = minRandomGraphP(n);
  if (p < minP) {
    // Rounded up, so that the p the message offers is accepted.
    const double scale = std::pow(10.0, std::floor(std::log10(minP)) - 2);
    return core::invalidArgument(
        "p=" + formatDouble(p) + " is too small for a connected random graph on " +
        std::to_string(n) + " nodes: a draw would leave about " +
        threeDigits(isolatedNodes(n, p)) + " nodes without any edge (expected degree " +
        threeDigits(p * (n - 1)) + "; connectivity needs about ln(n) = " +
        threeDigits(std::log(static_cast<double>(n))) + "); use p >= " +
        threeDigits(std::ceil(minP / scale) * scale));
  }
  return core::Status::ok();
}

bool isConnected(const Graph& g) {
  // A breadth-first search over the adjacency lists: Boost's connected_components needs a copy
  // of the graph first, which took 3 s for a random graph of 2^20 nodes.
  if (g.nodes() <= 1) return true;
  std::vector<char> seen(static_cast<size_t>(g.nodes()), 0);
  std::vector<int> queue = {0};
  seen[0] = 1;
  for (size_t head = 0; head < queue.size(); ++head) {
    for (int j : g.neighbors(queue[head])) {
      if (!seen[j]) {
        seen[j] = 1;
        queue.push_back(j);
      }
    }
  }
  return static_cast<int>(queue.size()) == g.nodes();
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

std::string formatDouble(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

}  // namespace starling::topology

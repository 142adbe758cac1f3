#include "topology/graph.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"

#include "tests/topology/check.h"
#include "topology/spec.h"

namespace starling::topology {
namespace {

using testing::graphSpec;
using testing::mustBuild;

// Every edge listed once as (i < j), sorted, and consistent with the adjacency lists.
void checkWellFormed(const Graph& g) {
  const auto edges = g.edges();
  REQUIRE(edges.size() == g.edgeCount());
  size_t degreeSum = 0;
  for (int i = 0; i < g.nodes(); ++i) {
    degreeSum += static_cast<size_t>(g.degree(i));
    for (int j : g.neighbors(i)) {
      CHECK(j != i);
      CHECK(g.hasEdge(j, i));
    }
  }
  CHECK(degreeSum == 2 * edges.size());
  for (size_t k = 0; k < edges.size(); ++k) {
    CHECK(edges[k].first < edges[k].second);
    if (k > 0) CHECK(edges[k - 1] < edges[k]);
  }
}

TEST_CASE("fromEdges drops self loops and duplicate edges in either orientation", "[unit]") {
  const Graph g = Graph::fromEdges(4, {{0, 1}, {1, 0}, {2, 2}, {3, 1}, {1, 3}, {0, 1}});
  CHECK(g.nodes() == 4);
  CHECK(g.edgeCount() == 2);
  CHECK(g.edges() == std::vector<std::pair<int, int>>{{0, 1}, {1, 3}});
  CHECK(g.neighbors(1) == std::vector<int>{0, 3});
  CHECK(g.degree(2) == 0);
  CHECK(g.maxDegree() == 2);
  CHECK(g.hasEdge(3, 1));
  CHECK_FALSE(g.hasEdge(0, 3));
  CHECK_FALSE(g.hasEdge(2, 2));
}

TEST_CASE("isConnected and diameter on hand-built graphs", "[unit]") {
  const Graph split = Graph::fromEdges(4, {{0, 1}, {2, 3}});
  CHECK_FALSE(isConnected(split));
  CHECK(diameter(split) == -1);
  const Graph isolated = Graph::fromEdges(3, {{0, 1}});
  CHECK_FALSE(isConnected(isolated));
  CHECK(diameter(isolated) == -1);
  const Graph single = Graph::fromEdges(1, {});
  CHECK(isConnected(single));
  CHECK(diameter(single) == 0);
  // A path 0-1-2 with a pendant 3 on 1: eccentricity of 0 is 2.
  const Graph tree = Graph::fromEdges(4, {{0, 1}, {1, 2}, {1, 3}});
  CHECK(isConnected(tree));
  CHECK(diameter(tree) == 2);
}

TEST_CASE("ring: n edges, degree 2, diameter floor(n/2)", "[unit]") {
  const int n = GENERATE(3, 4, 5, 8, 16, 17, 31);
  const Graph g = mustBuild(graphSpec(GraphKind::kRing), n);
  checkWellFormed(g);
  CHECK(g.edgeCount() == static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    CHECK(g.degree(i) == 2);
    CHECK(g.hasEdge(i, (i + 1) % n));
  }
  CHECK(isConnected(g));
  CHECK(diameter(g) == n / 2);
}

TEST_CASE("ring of 2 is a single edge, ring of 1 has none", "[unit]") {
  const Graph two = mustBuild(graphSpec(GraphKind::kRing), 2);
  CHECK(two.edgeCount() == 1);
  CHECK(diameter(two) == 1);
  const Graph one = mustBuild(graphSpec(GraphKind::kRing), 1);
  CHECK(one.edgeCount() == 0);
  CHECK(diameter(one) == 0);
  CHECK(isConnected(one));
}

TEST_CASE("line: n-1 edges, diameter n-1", "[unit]") {
  const int n = GENERATE(1, 2, 3, 5, 16, 17);
  const Graph g = mustBuild(graphSpec(GraphKind::kLine), n);
  checkWellFormed(g);
  CHECK(g.edgeCount() == static_cast<size_t>(n - 1));
  CHECK(diameter(g) == n - 1);
  if (n >= 3) {
    CHECK(g.degree(0) == 1);
    CHECK(g.degree(n - 1) == 1);
    CHECK(g.degree(n / 2) == 2);
  }
}

TEST_CASE("grid: (r-1)c + r(c-1) edges, degrees 2/3/4, diameter (r-1)+(c-1)", "[unit]") {
  const auto [rows, cols] =
      GENERATE(table<int, int>({{1, 1}, {1, 5}, {2, 2}, {3, 4}, {4, 4}, {5, 3}, {2, 7}}));
  GraphSpec spec = graphSpec(GraphKind::kGrid);
  spec.rows = rows;
  spec.cols = cols;
  const Graph g = mustBuild(spec, rows * cols);
  checkWellFormed(g);
  CHECK(g.edgeCount() == static_cast<size_t>((rows - 1) * cols + rows * (cols - 1)));
  CHECK(diameter(g) == (rows - 1) + (cols - 1));
  if (rows >= 3 && cols >= 3) {
    CHECK(g.degree(0) == 2);                   // corner
    CHECK(g.degree(1) == 3);                   // top border
    CHECK(g.degree(cols + 1) == 4);            // interior
    CHECK(g.hasEdge(cols + 1, 2 * cols + 1));  // vertical neighbour: id + cols
    CHECK_FALSE(g.hasEdge(cols - 1, cols));    // row ends do not wrap
  }
}

TEST_CASE("torus: 2rc edges and degree 4 for r, c >= 3; wrap edges deduplicated", "[unit]") {
  const auto [rows, cols] = GENERATE(table<int, int>({{3, 3}, {3, 5}, {4, 4}, {5, 6}}));
  GraphSpec spec = graphSpec(GraphKind::kGrid);
  spec.rows = rows;
  spec.cols = cols;
  spec.torus = true;
  const Graph g = mustBuild(spec, rows * cols);
  checkWellFormed(g);
  CHECK(g.edgeCount() == static_cast<size_t>(2 * rows * cols));
  for (int i = 0; i < rows * cols; ++i) CHECK(g.degree(i) == 4);
  CHECK(g.hasEdge(0, cols - 1));
  CHECK(g.hasEdge(0, (rows - 1) * cols));
  CHECK(diameter(g) == rows / 2 + cols / 2);

  // 2 x c torus: the vertical wrap duplicates the vertical edge, leaving a cylinder-like graph.
  GraphSpec thin = spec;
  thin.rows = 2;
  thin.cols = 4;
  const Graph t = mustBuild(thin, 8);
  CHECK(t.edgeCount() == 4 + 2 * 4);
  for (int i = 0; i < 8; ++i) CHECK(t.degree(i) == 3);
}

TEST_CASE("grid sizes that do not fit are rejected naming rows, cols and nodes", "[unit]") {
  GraphSpec spec = graphSpec(GraphKind::kGrid);
  spec.rows = 3;
  spec.cols = 5;
  const auto r = buildGraph(spec, 16, 1);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == core::StatusCode::kInvalidArgument);
  const std::string& m = r.status().message();
  CHECK(m.find("rows=3") != std::string::npos);
  CHECK(m.find("cols=5") != std::string::npos);
  CHECK(m.find("nodes=16") != std::string::npos);

  spec.rows = -4;
  spec.cols = -4;
  CHECK_FALSE(buildGraph(spec, 16, 1).isOk());
}

TEST_CASE("complete: n(n-1)/2 edges, diameter 1", "[unit]") {
  const int n = GENERATE(2, 3, 5, 16, 17);
  const Graph g = mustBuild(graphSpec(GraphKind::kComplete), n);
  checkWellFormed(g);
  CHECK(g.edgeCount() == static_cast<size_t>(n * (n - 1) / 2));
  for (int i = 0; i < n; ++i) CHECK(g.degree(i) == n - 1);
  CHECK(diameter(g) == 1);
}

TEST_CASE("star: n-1 edges at centre 0, diameter 2", "[unit]") {
  const int n = GENERATE(3, 5, 16, 17);
  const Graph g = mustBuild(graphSpec(GraphKind::kStar), n);
  checkWellFormed(g);
  CHECK(g.edgeCount() == static_cast<size_t>(n - 1));
  CHECK(g.degree(0) == n - 1);
  for (int i = 1; i < n; ++i) CHECK(g.degree(i) == 1);
  CHECK(diameter(g) == 2);
}

TEST_CASE("exponential: i ~ i + 2^k (mod n); degrees against hand-counted offsets", "[unit]") {
  // Powers of two: offsets +-2^k for 2^k < n, with +n/2 == -n/2, so degree 2 log2(n) - 1.
  for (int logN = 1; logN <= 6; ++logN) {
    const int n = 1 << logN;
    const Graph g = mustBuild(graphSpec(GraphKind::kExponential), n);
    checkWellFormed(g);
    for (int i = 0; i < n; ++i) CHECK(g.degree(i) == 2 * logN - 1);
    CHECK(g.edgeCount() == static_cast<size_t>(n * (2 * logN - 1) / 2));
  }
  // n = 5: offsets {1,4,2,3,4,1} cover everything: K5. n = 6: {1,5,2,4}. n = 12: {1,11,2,10,4,8}.
  // n = 17: {1,16,2,15,4,13,8,9,16,1} -> 8 distinct.
  const auto [n, degree] = GENERATE(table<int, int>({{5, 4}, {6, 4}, {12, 6}, {17, 8}}));
  const Graph g = mustBuild(graphSpec(GraphKind::kExponential), n);
  checkWellFormed(g);
  for (int i = 0; i < n; ++i) CHECK(g.degree(i) == degree);
  CHECK(g.edgeCount() == static_cast<size_t>(n * degree / 2));
  CHECK(g.hasEdge(0, 4 % n));
  CHECK(isConnected(g));
}

TEST_CASE("random: connected, deterministic in the seed, p = 1 is complete", "[unit]") {
  GraphSpec spec = graphSpec(GraphKind::kRandom);
  spec.p = 0.3;
  const Graph a = mustBuild(spec, 16, 7);
  const Graph b = mustBuild(spec, 16, 7);
  const Graph c = mustBuild(spec, 16, 8);
  checkWellFormed(a);
  CHECK(isConnected(a));
  CHECK(a == b);
  CHECK_FALSE(a == c);

  spec.p = 1.0;
  CHECK(mustBuild(spec, 9, 3).edgeCount() == 36);
  CHECK(mustBuild(spec, 1, 3).edgeCount() == 0);
}

TEST_CASE("random: mean edge count matches p (fixed seeds, 4 sigma)", "[unit]") {
  // n = 30, p = 0.5: disconnected draws have probability < 1e-7, so conditioning is negligible.
  GraphSpec spec = graphSpec(GraphKind::kRandom);
  spec.p = 0.5;
  const int n = 30, seeds = 200;
  const double pairs = n * (n - 1) / 2.0;
  double total = 0.0;
  for (int s = 0; s < seeds; ++s) total += static_cast<double>(mustBuild(spec, n, s).edgeCount());
  const double mean = total / seeds;
  const double sigma = std::sqrt(pairs * 0.25 / seeds);
  CHECK(std::abs(mean - pairs * 0.5) < 4 * sigma);
}

TEST_CASE("random: bad p and hopeless p are rejected with a clear message", "[unit]") {
  GraphSpec spec = graphSpec(GraphKind::kRandom);
  for (double p : {0.0, -0.5, 1.5, std::nan("")}) {
    spec.p = p;
    const auto r = buildGraph(spec, 8, 1);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == core::StatusCode::kInvalidArgument);
    CHECK(r.status().message().rfind("p: ", 0) == 0);
  }
  // Hopeless: refused before any draw, with the smallest p that works.
  spec.p = 0.01;
  const auto r = buildGraph(spec, 16, 1);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().message().find("p: p=0.01 is too small for a connected random graph on 16 "
                                  "nodes: a draw would leave about 13.8 nodes without any edge") !=
        std::string::npos);
  CHECK(r.status().message().find("use p >= 0.0749") != std::string::npos);
  // Small graphs, where the limit says nothing, still stop after 1000 draws.
  spec.p = 0.001;
  const auto tiny = buildGraph(spec, 4, 1);
  REQUIRE_FALSE(tiny.isOk());
  CHECK(tiny.status().message() ==
        "p: random graph with p=0.001 on 4 nodes stayed disconnected after 1000 draws; raise p");
}

TEST_CASE("random: the draws are held to a work budget, and hopeless p is known at once",
          "[unit]") {
  // A draw flips a coin per pair up to kPairwiseMaxNodes: 1000 draws of 16 nodes, 32 of 4096.
  CHECK(randomGraphDraws(16, 0.5) == kMaxRandomDraws);
  CHECK(randomGraphDraws(4096, 0.5) == 32);
  CHECK(static_cast<double>(randomGraphDraws(4096, 0.5)) * 4096 * 4095 / 2 <=
        static_cast<double>(kRandomGraphWork));
  // Above, a draw costs its edges: 2^20 nodes near the connectivity threshold get a few draws,
  // and a p whose single draw has more edges than the budget is refused.
  CHECK(randomGraphDraws(1 << 20, 2e-5) >= 4);
  const auto dense = checkRandomGraph(0.01, 1 << 20);
  REQUIRE_FALSE(dense.isOk());
  CHECK(dense.message().find("has about 5497552896 edges, more than the 67108864 one may have; "
                             "lower p") != std::string::npos);

  // The minimum p sits at the Erdős–Rényi connectivity threshold ln(n)/n, within a factor
  // set by the allowed draws (expected isolated nodes between about 0.5 and 5).
  for (int n : {64, 1000, 4096, 5000, 1 << 20}) {
    INFO(n);
    const double minP = minRandomGraphP(n);
    const double threshold = std::log(n) / n;
    CHECK(minP > 0.6 * threshold);
    CHECK(minP < 1.4 * threshold);
    CHECK(isolatedNodes(n, minP) > 0.5);
    CHECK(isolatedNodes(n, minP) < 5.0);
    CHECK(checkRandomGraph(minP * 1.001, n).isOk());
    const auto below = checkRandomGraph(minP * 0.99, n);
    REQUIRE_FALSE(below.isOk());
    CHECK(below.message().find("is too small for a connected random graph") != std::string::npos);
  }
  // Tiny graphs: the limit does not apply; any p may be tried (and the draws decide).
  CHECK(minRandomGraphP(1) == 0.0);
  CHECK(minRandomGraphP(3) == 0.0);
  CHECK(checkRandomGraph(1e-9, 3).isOk());

  // p = 1e-9 on 4096 nodes used to take 1000 draws (52 s) to give up.
  GraphSpec spec = graphSpec(GraphKind::kRandom);
  spec.p = 1e-9;
  const auto r = buildGraph(spec, 4096, 1);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().message().find("use p >= 0.0019") != std::string::npos);
}

TEST_CASE("random: at the minimum p, draws on 4096 nodes connect", "[unit]") {
  GraphSpec spec = graphSpec(GraphKind::kRandom);
  spec.p = minRandomGraphP(4096);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const auto g = buildGraph(spec, 4096, seed);
    INFO(seed << ": " << g.status().toString());
    REQUIRE(g.isOk());
    CHECK(isConnected(*g));
  }
}

TEST_CASE("random: up to kPairwiseMaxNodes, a draw is a coin flip per pair as it always was",
          "[unit]") {
  // Seeded graphs must not change: draw k is Rng(deriveSeed(seed, "topo-er", k)) flipping a coin
  // for each pair (i < j) in order; the first connected draw is the graph.
  constexpr uint64_t kSalt = 0x746f706f2d657200ULL;
  const auto reference = [](double p, int n, uint64_t seed) {
    for (uint64_t k = 0;; ++k) {
      core::Rng rng(core::deriveSeed(seed, kSalt, k));
      std::vector<std::pair<int, int>> e;
      for (int i = 0; i < n; ++i) {
        for (int j = i + 1; j < n; ++j) {
          if (rng.bernoulli(p)) e.emplace_back(i, j);
        }
      }
      Graph g = Graph::fromEdges(n, e);
      if (isConnected(g)) return g;
    }
  };
  GraphSpec spec = graphSpec(GraphKind::kRandom);
  for (const auto& [p, n] : {std::pair{0.3, 16}, std::pair{0.2, 40}, std::pair{0.01, 1000}}) {
    spec.p = p;
    for (uint64_t seed : {1, 7, 99}) {
      INFO(p << " " << n << " " << seed);
      CHECK(mustBuild(spec, n, seed) == reference(p, n, seed));
    }
  }
}

TEST_CASE("random: above kPairwiseMaxNodes, skipping draws the same distribution", "[unit]") {
  // n = 5000, p = 0.004: 49,990 edges expected (sd 223), degrees ~ Binomial(4999, 0.004).
  GraphSpec spec = graphSpec(GraphKind::kRandom);
  spec.p = 0.004;
  const int n = 5000;
  const double pairs = n * (n - 1) / 2.0;
  const Graph a = mustBuild(spec, n, 11);
  CHECK(a == mustBuild(spec, n, 11));
  CHECK_FALSE(a == mustBuild(spec, n, 12));
  checkWellFormed(a);
  CHECK(isConnected(a));
  double total = 0, low = 0, lowPairs = 0;
  const int seeds = 8;
  for (int s = 0; s < seeds; ++s) {
    const Graph g = mustBuild(spec, n, static_cast<uint64_t>(s));
    total += static_cast<double>(g.edgeCount());
    // Edges among the first 100 nodes: the skips cross row boundaries correctly.
    for (const auto& [i, j] : g.edges()) low += (j < 100) ? 1 : 0;
  }
  lowPairs = 100 * 99 / 2.0;
  const double mean = total / seeds;
  CHECK(std::abs(mean - pairs * spec.p) < 5 * std::sqrt(pairs * spec.p / seeds));
  CHECK(std::abs(low / seeds - lowPairs * spec.p) < 5 * std::sqrt(lowPairs * spec.p / seeds));
  // p = 1 skips nothing: the complete graph.
  spec.p = 1.0;
  CHECK(mustBuild(spec, 5000, 1).edgeCount() == static_cast<size_t>(pairs));
}

TEST_CASE("nodes must be >= 1", "[unit]") {
  for (int n : {0, -3}) {
    const auto r = buildGraph(graphSpec(GraphKind::kRing), n, 1);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().message().find("nodes") != std::string::npos);
  }
}

TEST_CASE("kind names", "[unit]") {
  CHECK(std::string(graphKindName(GraphKind::kRing)) == "ring");
  CHECK(std::string(graphKindName(GraphKind::kLine)) == "line");
  CHECK(std::string(graphKindName(GraphKind::kGrid)) == "grid");
  CHECK(std::string(graphKindName(GraphKind::kRandom)) == "random");
  CHECK(std::string(graphKindName(GraphKind::kExponential)) == "exponential");
  CHECK(std::string(graphKindName(GraphKind::kComplete)) == "complete");
  CHECK(std::string(graphKindName(GraphKind::kStar)) == "star");
  CHECK(std::string(weightRuleName(WeightRule::kMetropolis)) == "metropolis");
  CHECK(std::string(weightRuleName(WeightRule::kMaxDegree)) == "max_degree");
  CHECK(std::string(weightRuleName(WeightRule::kUniform)) == "uniform");
  CHECK(std::string(scheduleKindName(ScheduleKind::kStatic)) == "static");
  CHECK(std::string(scheduleKindName(ScheduleKind::kCycle)) == "cycle");
  CHECK(std::string(scheduleKindName(ScheduleKind::kOnePeerExponential)) == "one_peer_exponential");
  CHECK(std::string(scheduleKindName(ScheduleKind::kRandomMatching)) == "random_matching");
  CHECK(std::string(scheduleKindName(ScheduleKind::kEdgeDropout)) == "edge_dropout");
}

}  // namespace
}  // namespace starling::topology

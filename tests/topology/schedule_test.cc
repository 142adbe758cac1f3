#include "topology/schedule.h"

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "tests/topology/check.h"

namespace starling::topology {
namespace {

using testing::checkMixing;
using testing::graphSpec;
using testing::gridFor;
using testing::mustBuild;

TopologySpec topo(int n, ScheduleKind kind, GraphSpec base = graphSpec(GraphKind::kRing),
                  uint64_t seed = 42) {
  TopologySpec s;
  s.nodes = n;
  s.seed = seed;
  s.base = base;
  s.schedule.kind = kind;
  if (kind == ScheduleKind::kCycle) {
    s.schedule.cycle = {graphSpec(GraphKind::kRing), graphSpec(GraphKind::kStar)};
  }
  if (kind == ScheduleKind::kEdgeDropout) s.schedule.p = 0.3;
  return s;
}

std::unique_ptr<Schedule> mustCreate(const TopologySpec& spec) {
  auto s = Schedule::create(spec);
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  return std::move(s).value();
}

// The error's message, requiring that create failed with kInvalidArgument.
std::string createError(const TopologySpec& spec) {
  auto s = Schedule::create(spec);
  REQUIRE_FALSE(s.isOk());
  CHECK(s.status().code() == core::StatusCode::kInvalidArgument);
  return s.status().message();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST_CASE("every schedule kind yields valid weights for 200 rounds", "[unit]") {
  const int n = GENERATE(2, 5, 16, 17);
  const ScheduleKind kind =
      GENERATE(ScheduleKind::kStatic, ScheduleKind::kCycle, ScheduleKind::kOnePeerExponential,
               ScheduleKind::kRandomMatching, ScheduleKind::kEdgeDropout);
  GraphSpec random = graphSpec(GraphKind::kRandom);
  random.p = 0.5;
  const GraphSpec base =
      GENERATE_COPY(graphSpec(GraphKind::kRing), graphSpec(GraphKind::kStar),
                    graphSpec(GraphKind::kExponential, WeightRule::kMaxDegree),
                    graphSpec(GraphKind::kComplete, WeightRule::kUniform), gridFor(n), random);
  INFO("kind " << scheduleKindName(kind) << " base " << graphKindName(base.kind) << " n " << n);
  const auto s = mustCreate(topo(n, kind, base));
  const Graph baseGraph = mustBuild(base, n, 42);
  for (uint64_t r = 0; r < 200; ++r) {
    const auto rt = s->at(r);
    REQUIRE(rt != nullptr);
    REQUIRE(rt->graph.nodes() == n);
    checkMixing(rt->graph, rt->weights);
    if (kind == ScheduleKind::kOnePeerExponential || kind == ScheduleKind::kRandomMatching) {
      CHECK(rt->graph.maxDegree() <= 1);
    }
    if (kind == ScheduleKind::kRandomMatching || kind == ScheduleKind::kEdgeDropout) {
      bool subgraph = true;
      for (const auto& [i, j] : rt->graph.edges()) subgraph = subgraph && baseGraph.hasEdge(i, j);
      CHECK(subgraph);
    }
    if (kind != ScheduleKind::kStatic && kind != ScheduleKind::kCycle) CHECK(rt->round == r);
  }
}

TEST_CASE("static schedule returns the base graph, the same object every round", "[unit]") {
  const auto s = mustCreate(topo(8, ScheduleKind::kStatic, graphSpec(GraphKind::kExponential)));
  CHECK(s->isStatic());
  CHECK(s->nodes() == 8);
  const auto r0 = s->at(0);
  CHECK(r0->graph == mustBuild(graphSpec(GraphKind::kExponential), 8));
  CHECK(s->at(12345).get() == r0.get());
}

TEST_CASE("cycle schedule uses cycle[r % size] and caches the rounds", "[unit]") {
  const auto s = mustCreate(topo(6, ScheduleKind::kCycle));
  CHECK_FALSE(s->isStatic());
  const Graph ring = mustBuild(graphSpec(GraphKind::kRing), 6);
  const Graph star = mustBuild(graphSpec(GraphKind::kStar), 6);
  for (uint64_t r = 0; r < 10; ++r) CHECK(s->at(r)->graph == (r % 2 == 0 ? ring : star));
  CHECK(s->at(0).get() == s->at(4).get());
  CHECK(s->at(1).get() == s->at(7).get());
}

TEST_CASE("cycle entries with random graphs get distinct seeds and union connectivity", "[unit]") {
  TopologySpec spec = topo(16, ScheduleKind::kCycle);
  GraphSpec er = graphSpec(GraphKind::kRandom);
  er.p = 0.3;
  spec.schedule.cycle = {er, er, graphSpec(GraphKind::kLine)};
  const auto s = mustCreate(spec);
  CHECK(isConnected(s->at(0)->graph));
  CHECK_FALSE(s->at(0)->graph == s->at(1)->graph);
  CHECK(s->at(3)->graph == s->at(0)->graph);
  // Same spec, same graphs; another seed, other graphs.
  CHECK(mustCreate(spec)->at(1)->graph == s->at(1)->graph);
  spec.seed += 1;
  CHECK_FALSE(mustCreate(spec)->at(0)->graph == s->at(0)->graph);
}

TEST_CASE("schedules are pure functions of (spec, seed, round)", "[unit]") {
  const ScheduleKind kind =
      GENERATE(ScheduleKind::kStatic, ScheduleKind::kCycle, ScheduleKind::kOnePeerExponential,
               ScheduleKind::kRandomMatching, ScheduleKind::kEdgeDropout);
  GraphSpec base = graphSpec(GraphKind::kRandom);
  base.p = 0.4;
  const TopologySpec spec = topo(17, kind, base);
  const auto a = mustCreate(spec);
  const auto b = mustCreate(spec);
  std::vector<std::shared_ptr<const RoundTopology>> backwards(101);
  for (int r = 100; r >= 0; --r) backwards[r] = b->at(static_cast<uint64_t>(r));
  for (uint64_t r = 0; r <= 100; ++r) {
    const auto x = a->at(r);
    CHECK(x->graph == backwards[r]->graph);
    CHECK(x->weights.dense() == backwards[r]->weights.dense());
    CHECK(x->graph == a->at(r)->graph);  // asking twice changes nothing
  }
}

TEST_CASE("different seeds give different random schedules", "[unit]") {
  const ScheduleKind kind =
      GENERATE(ScheduleKind::kStatic, ScheduleKind::kRandomMatching, ScheduleKind::kEdgeDropout);
  GraphSpec base = graphSpec(GraphKind::kRandom);
  base.p = 0.4;
  const auto a = mustCreate(topo(16, kind, base, 1));
  const auto b = mustCreate(topo(16, kind, base, 2));
  int differing = 0;
  for (uint64_t r = 0; r <= 100; ++r) differing += a->at(r)->graph == b->at(r)->graph ? 0 : 1;
  CHECK(differing > 90);
  // Within one schedule, the random kinds change from round to round.
  if (kind != ScheduleKind::kStatic) CHECK_FALSE(a->at(0)->graph == a->at(1)->graph);
}

TEST_CASE("invalid specs are rejected naming the field", "[unit]") {
  GraphSpec grid = graphSpec(GraphKind::kGrid);
  grid.rows = 3;
  grid.cols = 5;
  std::string m = createError(topo(16, ScheduleKind::kStatic, grid));
  CHECK(contains(m, "topology/base/"));
  CHECK(contains(m, "rows"));
  CHECK(contains(m, "cols"));
  CHECK(contains(m, "nodes"));

  GraphSpec er = graphSpec(GraphKind::kRandom);
  for (double p : {0.0, 1.5}) {
    er.p = p;
    CHECK(contains(createError(topo(16, ScheduleKind::kStatic, er)), "topology/base/p: "));
    CHECK(contains(createError(topo(16, ScheduleKind::kRandomMatching, er)), "topology/base/p"));
  }
  er.p = 0.01;
  CHECK(contains(createError(topo(16, ScheduleKind::kStatic, er)),
                 "topology/base/p: p=0.01 is too small for a connected random graph"));
  er.p = 0.001;
  CHECK(contains(createError(topo(4, ScheduleKind::kStatic, er)),
                 "topology/base/p: random graph with p=0.001 on 4 nodes stayed disconnected"));

  for (double p : {1.0, 1.5, -0.1}) {
    TopologySpec drop = topo(16, ScheduleKind::kEdgeDropout);
    drop.schedule.p = p;
    CHECK(contains(createError(drop), "topology/schedule/p: must be in [0, 1)"));
  }
  TopologySpec drop = topo(16, ScheduleKind::kEdgeDropout);
  drop.schedule.p = 1.5;
  CHECK(createError(drop) == "topology/schedule/p: must be in [0, 1), got 1.5");

  const GraphSpec uniformStar = graphSpec(GraphKind::kStar, WeightRule::kUniform);
  CHECK(
      contains(createError(topo(6, ScheduleKind::kStatic, uniformStar)), "topology/base/weights"));
  CHECK(contains(createError(topo(6, ScheduleKind::kEdgeDropout, uniformStar)), "weights"));
  TopologySpec cyc = topo(6, ScheduleKind::kCycle);
  cyc.schedule.cycle = {graphSpec(GraphKind::kRing), uniformStar};
  CHECK(contains(createError(cyc), "topology/schedule/cycle[1]/weights"));
  cyc.schedule.cycle = {graphSpec(GraphKind::kRing), grid};
  CHECK(contains(createError(cyc), "topology/schedule/cycle[1]/rows"));
  cyc.schedule.cycle.clear();
  CHECK(contains(createError(cyc), "topology/schedule/cycle"));

  CHECK(contains(createError(topo(0, ScheduleKind::kStatic)), "topology/nodes"));
}

TEST_CASE("uniform weights on matchings are fine even when the base graph is irregular", "[unit]") {
  const auto s = mustCreate(
      topo(6, ScheduleKind::kRandomMatching, graphSpec(GraphKind::kStar, WeightRule::kUniform)));
  const auto rt = s->at(3);
  CHECK(rt->graph.edgeCount() == 1);
  checkMixing(rt->graph, rt->weights);
}

TEST_CASE("one_peer_exponential: matchings whose union over ceil(log2 n) rounds connects",
          "[unit]") {
  const int n = GENERATE(2, 5, 8, 16, 17);
  const auto s = mustCreate(topo(n, ScheduleKind::kOnePeerExponential));
  int period = 0;
  while ((1 << period) < n) ++period;
  std::vector<std::pair<int, int>> unionEdges;
  for (int r = 0; r < period; ++r) {
    const auto rt = s->at(static_cast<uint64_t>(r));
    CHECK(rt->graph.maxDegree() == 1);
    for (const auto& [i, j] : rt->graph.edges()) {
      CHECK((i ^ j) == (1 << r));
      CHECK(rt->weights.dense()[i][j] == 0.5);
      unionEdges.emplace_back(i, j);
    }
    CHECK(s->at(static_cast<uint64_t>(r + 3 * period))->graph == rt->graph);
  }
  CHECK(isConnected(Graph::fromEdges(n, unionEdges)));
  // One round fewer leaves the nodes >= 2^(period-1) cut off from the others.
  {
    unionEdges.clear();
    for (int r = 0; r + 1 < period; ++r) {
      for (const auto& e : s->at(static_cast<uint64_t>(r))->graph.edges()) unionEdges.push_back(e);
    }
    CHECK_FALSE(isConnected(Graph::fromEdges(n, unionEdges)));
  }
}

TEST_CASE("one_peer_exponential on 16 nodes is the 4-cube, one dimension per round", "[unit]") {
  const auto s = mustCreate(topo(16, ScheduleKind::kOnePeerExponential));
  std::vector<std::pair<int, int>> unionEdges;
  for (uint64_t r = 0; r < 4; ++r) {
    const auto rt = s->at(r);  // keep the round alive: at() may build a fresh one
    const Graph& g = rt->graph;
    CHECK(g.edgeCount() == 8);
    for (int i = 0; i < 16; ++i) CHECK(g.degree(i) == 1);
    for (const auto& e : g.edges()) unionEdges.push_back(e);
  }
  const Graph cube = Graph::fromEdges(16, unionEdges);
  CHECK(cube.edgeCount() == 32);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) CHECK(cube.hasEdge(i, j) == (std::popcount(unsigned(i ^ j)) == 1));
  }
  CHECK(diameter(cube) == 4);
}

TEST_CASE("one_peer_exponential on one node has no edges", "[unit]") {
  const auto s = mustCreate(topo(1, ScheduleKind::kOnePeerExponential));
  CHECK(s->at(5)->graph.edgeCount() == 0);
  CHECK(s->at(5)->weights.rows[0].self == 1.0);
}

TEST_CASE("random_matching: maximal matchings of the base graph", "[unit]") {
  const GraphSpec base = GENERATE(graphSpec(GraphKind::kRing), graphSpec(GraphKind::kComplete),
                                  graphSpec(GraphKind::kStar), gridFor(16, true));
  const auto s = mustCreate(topo(16, ScheduleKind::kRandomMatching, base));
  const Graph baseGraph = mustBuild(base, 16);
  std::vector<std::pair<int, int>> seen;
  for (uint64_t r = 0; r < 100; ++r) {
    const auto rt = s->at(r);  // keep the round alive: at() may build a fresh one
    const Graph& g = rt->graph;
    CHECK(g.maxDegree() == 1);
    // Maximal: every base edge touches a matched node.
    bool maximal = true;
    for (const auto& [i, j] : baseGraph.edges())
      maximal = maximal && (g.degree(i) + g.degree(j) > 0);
    CHECK(maximal);
    for (const auto& e : g.edges()) seen.push_back(e);
  }
  // Over 100 rounds every base edge is drawn at least once, so information reaches everyone.
  CHECK(Graph::fromEdges(16, seen) == baseGraph);
}

TEST_CASE("edge_dropout with p = 0 is the base graph with the base weights", "[unit]") {
  const GraphSpec base = GENERATE(graphSpec(GraphKind::kStar), gridFor(16),
                                  graphSpec(GraphKind::kExponential, WeightRule::kUniform));
  TopologySpec spec = topo(16, ScheduleKind::kEdgeDropout, base);
  spec.schedule.p = 0.0;
  const auto s = mustCreate(spec);
  const Graph g = mustBuild(base, 16);
  const auto w = mixingWeights(g, base.weights);
  REQUIRE(w.isOk());
  for (uint64_t r = 0; r < 50; ++r) {
    CHECK(s->at(r)->graph == g);
    CHECK(s->at(r)->weights.dense() == w->dense());
  }
}

TEST_CASE("edge_dropout moves each dropped edge's weight to both self weights", "[unit]") {
  const GraphSpec base = graphSpec(GraphKind::kStar);  // metropolis: every edge 1/16
  TopologySpec spec = topo(16, ScheduleKind::kEdgeDropout, base);
  spec.schedule.p = 0.5;
  const auto s = mustCreate(spec);
  const Graph g = mustBuild(base, 16);
  for (uint64_t r = 0; r < 20; ++r) {
    const auto rt = s->at(r);
    const auto d = rt->weights.dense();
    const int dropped = static_cast<int>(g.edgeCount() - rt->graph.edgeCount());
    CHECK(d[0][0] == Approx(1.0 / 16 + dropped / 16.0).margin(1e-14));
    for (int leaf = 1; leaf < 16; ++leaf) {
      const bool kept = rt->graph.hasEdge(0, leaf);
      CHECK(d[leaf][0] == (kept ? 1.0 / 16 : 0.0));
      CHECK(d[leaf][leaf] == Approx(kept ? 15.0 / 16 : 1.0).margin(1e-14));
    }
  }
}

TEST_CASE("edge_dropout keeps a fraction 1 - p of edges (4 sigma over 2000 rounds)", "[unit]") {
  const double p = GENERATE(0.5, 0.2);
  TopologySpec spec = topo(16, ScheduleKind::kEdgeDropout, graphSpec(GraphKind::kRing), 2024);
  spec.schedule.p = p;
  const auto s = mustCreate(spec);
  const int rounds = 2000;
  double kept = 0.0;
  for (uint64_t r = 0; r < rounds; ++r) kept += static_cast<double>(s->at(r)->graph.edgeCount());
  const double trials = 16.0 * rounds;
  const double sigma = std::sqrt(p * (1 - p) / trials);
  CHECK(std::abs(kept / trials - (1 - p)) < 4 * sigma);
}

}  // namespace
}  // namespace starling::topology

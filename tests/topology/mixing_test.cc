#include "topology/mixing.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>
#include <string>

#include "tests/topology/check.h"
#include "topology/graph.h"

namespace starling::topology {
namespace {

using testing::checkMixing;
using testing::graphSpec;
using testing::gridFor;
using testing::mustBuild;

bool everyEdgeJoinsEqualDegrees(const Graph& g) {
  for (const auto& [i, j] : g.edges()) {
    if (g.degree(i) != g.degree(j)) return false;
  }
  return true;
}

TEST_CASE("every graph kind x weight rule gives a valid W", "[unit]") {
  const int n = GENERATE(1, 2, 5, 12, 16, 17);
  const WeightRule rule =
      GENERATE(WeightRule::kMetropolis, WeightRule::kMaxDegree, WeightRule::kUniform);
  std::vector<GraphSpec> specs;
  for (GraphKind k : {GraphKind::kRing, GraphKind::kLine, GraphKind::kExponential,
                      GraphKind::kComplete, GraphKind::kStar}) {
    specs.push_back(graphSpec(k));
  }
  specs.push_back(gridFor(n));
  specs.push_back(gridFor(n, /*torus=*/true));
  GraphSpec random = graphSpec(GraphKind::kRandom);
  random.p = 0.4;
  specs.push_back(random);

  for (const GraphSpec& spec : specs) {
    for (uint64_t seed : {1, 2, 3}) {
      const Graph g = mustBuild(spec, n, seed);
      INFO("kind " << graphKindName(spec.kind) << " rule " << weightRuleName(rule) << " n " << n
                   << " seed " << seed);
      const auto w = mixingWeights(g, rule);
      if (rule == WeightRule::kUniform && !everyEdgeJoinsEqualDegrees(g)) {
        REQUIRE_FALSE(w.isOk());
        CHECK(w.status().code() == core::StatusCode::kInvalidArgument);
        CHECK(w.status().message().find("weights") != std::string::npos);
        continue;
      }
      REQUIRE(w.isOk());
      checkMixing(g, *w);
    }
  }
}

TEST_CASE("weight rules give the stated values", "[unit]") {
  // Star of 5: centre degree 4, leaves degree 1.
  const Graph star = mustBuild(graphSpec(GraphKind::kStar), 5);
  const auto metro = mixingWeights(star, WeightRule::kMetropolis);
  REQUIRE(metro.isOk());
  CHECK(metro->rows[0].self == Approx(0.2).margin(1e-15));
  CHECK(metro->rows[0].peers.size() == 4);
  for (const auto& e : metro->rows[0].peers) CHECK(e.weight == 0.2);
  CHECK(metro->rows[3].self == Approx(0.8).margin(1e-15));

  // Line of 4: degrees 1,2,2,1; max degree 2.
  const Graph line = mustBuild(graphSpec(GraphKind::kLine), 4);
  const auto maxDeg = mixingWeights(line, WeightRule::kMaxDegree);
  REQUIRE(maxDeg.isOk());
  const auto d = maxDeg->dense();
  CHECK(d[0][1] == 1.0 / 3);
  CHECK(d[1][2] == 1.0 / 3);
  CHECK(d[0][0] == Approx(2.0 / 3).margin(1e-15));
  CHECK(d[1][1] == Approx(1.0 / 3).margin(1e-15));
  CHECK(d[0][2] == 0.0);
  const auto lineMetro = mixingWeights(line, WeightRule::kMetropolis);
  REQUIRE(lineMetro.isOk());
  CHECK(lineMetro->dense()[0][1] == 1.0 / 3);  // 1 / (1 + max(1, 2))

  // Exponential of 16 is 7-regular: uniform gives 1/8 everywhere on the support.
  const Graph expo = mustBuild(graphSpec(GraphKind::kExponential), 16);
  const auto uni = mixingWeights(expo, WeightRule::kUniform);
  REQUIRE(uni.isOk());
  for (const auto& row : uni->rows) {
    CHECK(row.self == Approx(0.125).margin(1e-15));
    for (const auto& e : row.peers) CHECK(e.weight == 0.125);
  }
}

TEST_CASE("uniform weights are rejected on a star and accepted on a ring", "[unit]") {
  const auto star = mixingWeights(mustBuild(graphSpec(GraphKind::kStar), 6), WeightRule::kUniform);
  REQUIRE_FALSE(star.isOk());
  CHECK(star.status().code() == core::StatusCode::kInvalidArgument);
  CHECK(star.status().message().find("weights") != std::string::npos);
  CHECK(mixingWeights(mustBuild(graphSpec(GraphKind::kRing), 6), WeightRule::kUniform).isOk());
}

TEST_CASE("ring spectral gap with Metropolis weights matches the circulant eigenvalues", "[unit]") {
  const int n = GENERATE(3, 4, 5, 8, 16, 31);
  const Graph g = mustBuild(graphSpec(GraphKind::kRing), n);
  const auto w = mixingWeights(g, WeightRule::kMetropolis);
  REQUIRE(w.isOk());
  // W = I/3 + (S + S^T)/3 has eigenvalues 1/3 + (2/3) cos(2 pi k / n), k = 0..n-1.
  double worst = 0.0;
  for (int k = 1; k < n; ++k) {
    worst = std::max(worst, std::abs(1.0 / 3 + 2.0 / 3 * std::cos(2 * std::numbers::pi * k / n)));
  }
  const double gap = spectralGap(*w);
  CHECK(gap == Approx(1.0 - worst).margin(1e-10));
  if (n >= 5) {
    CHECK(gap ==
          Approx(1.0 - (1.0 / 3 + 2.0 / 3 * std::cos(2 * std::numbers::pi / n))).margin(1e-10));
  }
}

TEST_CASE("complete graph with Metropolis weights averages in one step", "[unit]") {
  const int n = GENERATE(2, 5, 16);
  const auto w =
      mixingWeights(mustBuild(graphSpec(GraphKind::kComplete), n), WeightRule::kMetropolis);
  REQUIRE(w.isOk());
  for (const auto& row : w->dense()) {
    for (double x : row) CHECK(x == Approx(1.0 / n).margin(1e-15));
  }
  CHECK(spectralGap(*w) == Approx(1.0).margin(1e-12));
}

TEST_CASE("spectral gap: disconnected graph has gap 0, star and line known values", "[unit]") {
  const auto split = mixingWeights(Graph::fromEdges(4, {{0, 1}, {2, 3}}), WeightRule::kMetropolis);
  REQUIRE(split.isOk());
  CHECK(spectralGap(*split) == Approx(0.0).margin(1e-12));

  // Line of 2 with one edge of weight 1/2: eigenvalues 1 and 0.
  const auto two =
      mixingWeights(mustBuild(graphSpec(GraphKind::kLine), 2), WeightRule::kMetropolis);
  REQUIRE(two.isOk());
  CHECK(spectralGap(*two) == Approx(1.0).margin(1e-12));

  // Star of n with Metropolis: W = I - L/n (L the star Laplacian, eigenvalues 0, 1 (x n-2), n),
  // so the eigenvalues are 1, 1 - 1/n (x n-2), 0 and the gap is 1/n.
  const auto star =
      mixingWeights(mustBuild(graphSpec(GraphKind::kStar), 7), WeightRule::kMetropolis);
  REQUIRE(star.isOk());
  CHECK(spectralGap(*star) == Approx(1.0 / 7).margin(1e-12));
}

}  // namespace
}  // namespace starling::topology

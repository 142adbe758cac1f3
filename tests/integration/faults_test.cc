// Peer loss in simulate (docs/algorithms.md §18): with faults.on_peer_loss "continue" the
// survivors finish every round, and the bias-corrected algorithms end at the optimum of the
// survivors' data. The reference is independent of the survivor bookkeeping: the sum of the
// surviving nodes' own local gradients (optim::LocalObjective, built here) at the final average
// model, which is zero exactly at the minimiser of sum_{i in A} f_i.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>

#include "optim/problem.h"
#include "run_helpers.h"
#include "topology/graph.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_faults_test {

using namespace starling;
using testing::experimentFrom;

namespace {

std::string faultScenario(const std::string& topology, const std::string& algorithm,
                          uint64_t rounds, const std::string& faults) {
  return R"({"schema_version": 1, "name": "faults", "nodes": 8, "seed": 5, "rounds": )" +
         std::to_string(rounds) + R"(, "log_every": 100, "topology": )" + topology +
         R"(, "problem": {"kind": "logistic", "l2": 0.05, "partition": "random",
         "data": {"synthetic": {"samples": 1203, "features": 12, "heterogeneity": 2.0}}},
         "algorithm": )" + algorithm + R"(, "faults": )" + faults + "}";
}

// ||sum_{i alive} grad f_i(x)|| / max(1, ||sum_{i alive} grad f_i(0)||).
double survivorsStationarity(const scenario::Experiment& e, const std::vector<bool>& alive,
                             const std::vector<double>& x) {
  const size_t d = x.size();
  std::vector<double> g(d, 0.0), g0(d, 0.0), gi(d), zero(d, 0.0);
  for (int i = 0; i < e.scenario.nodes; ++i) {
    if (!alive[i]) continue;
    auto f = optim::LocalObjective<double>::create(e.scenario.problem.spec,
                                                   e.data.subset(e.parts[i]), e.data.samples(),
                                                   e.scenario.nodes);
    f->gradient(x, gi);
    for (size_t k = 0; k < d; ++k) g[k] += gi[k];
    f->gradient(zero, gi);
    for (size_t k = 0; k < d; ++k) g0[k] += gi[k];
  }
  double n = 0, n0 = 0;
  for (size_t k = 0; k < d; ++k) {
    n += g[k] * g[k];
    n0 += g0[k] * g0[k];
  }
  return std::sqrt(n) / std::max(1.0, std::sqrt(n0));
}

// The error of a scenario that simulate must refuse to finish.
std::string simulateFailure(const std::string& json) {
  auto s = scenario::parseScenario(json, "t.json", ".");
  INFO(s.status().toString());
  REQUIRE(s.isOk());
  auto e = scenario::prepareExperiment(*s);
  REQUIRE(e.isOk());
  auto r = runtime::simulate(*e, {});
  REQUIRE_FALSE(r.isOk());
  return r.status().message();
}

std::vector<bool> aliveWithout(int n, std::vector<int> lost) {
  std::vector<bool> a(n, true);
  for (int r : lost) a[r] = false;
  return a;
}

}  // namespace

TEST_CASE("after a loss, exact algorithms reach the survivors' optimum", "[integration][faults]") {
  const char* kAlgorithms[] = {
      R"({"kind": "exact_diffusion", "step_size": 0.5})",
      R"({"kind": "gradient_tracking", "step_size": 0.3})",
      R"({"kind": "nids", "step_size": 0.5})",
      R"({"kind": "lead", "step_size": 0.5, "gamma": 1.0, "alpha": 0.5})",
  };
  const char* kTopologies[] = {R"({"kind": "ring"})", R"({"kind": "random", "p": 0.4})"};
  for (const char* topo : kTopologies) {
    for (const char* alg : kAlgorithms) {
      DYNAMIC_SECTION(topo << " " << alg) {
        const auto e = experimentFrom(faultScenario(
            topo, alg, 2500,
            R"({"on_peer_loss": "continue", "script": [{"kill": 3, "at_round": 150}]})"));
        const auto r = testing::run(e);
        REQUIRE(r.changes.size() == 1);
        CHECK(r.changes[0].left == std::vector<int>{3});
        CHECK(r.changes[0].round > 150);
        CHECK(r.models.size() == 7);  // the survivors
        CHECK(survivorsStationarity(e, aliveWithout(8, {3}), r.xMean) < 1e-8);
        // Not the optimum of all eight nodes' data: the lost node's data is gone.
        CHECK(survivorsStationarity(e, aliveWithout(8, {}), r.xMean) > 1e-4);
        CHECK(r.last.relError < 1e-8);  // against the survivors' x* (metrics.h)
        CHECK(r.last.consensusDistance < 1e-16);
      }
    }
  }
}

TEST_CASE("two losses at once, and a loss during a membership change", "[integration][faults]") {
  const char* alg = R"({"kind": "exact_diffusion", "step_size": 0.5})";
  SECTION("two at once") {
    const auto e = experimentFrom(faultScenario(R"({"kind": "ring"})", alg, 2500,
        R"({"on_peer_loss": "continue", "script": [{"kill": 2, "at_round": 100},
                                                   {"kill": 3, "at_round": 100}]})"));
    const auto r = testing::run(e);
    REQUIRE(r.changes.size() == 1);
    CHECK(r.changes[0].left == std::vector<int>{2, 3});
    CHECK(r.models.size() == 6);
    CHECK(survivorsStationarity(e, aliveWithout(8, {2, 3}), r.xMean) < 1e-8);
  }
  SECTION("the second before the first took effect") {
    const auto e = experimentFrom(faultScenario(R"({"kind": "ring"})", alg, 2500,
        R"({"on_peer_loss": "continue", "script": [{"kill": 1, "at_round": 100},
                                                   {"kill": 6, "at_round": 102}]})"));
    const auto r = testing::run(e);
    REQUIRE(r.changes.size() == 2);
    CHECK(r.changes[0].round < r.changes[1].round);
    CHECK(r.changes[0].left == std::vector<int>{1});
    CHECK(r.changes[1].left == std::vector<int>{6});
    CHECK(r.changes[1].epoch == 2);
    CHECK(survivorsStationarity(e, aliveWithout(8, {1, 6}), r.xMean) < 1e-8);
  }
}

TEST_CASE("a loss that disconnects the graph is reported; a ring closes over the gap",
          "[integration][faults]") {
  const char* alg = R"({"kind": "exact_diffusion", "step_size": 0.5})";
  SECTION("star without repair: the centre's loss leaves 7 parts") {
    CHECK_THAT(simulateFailure(faultScenario(R"({"kind": "star"})", alg, 300,
                                             R"({"on_peer_loss": "continue", "repair": "none",
                                                 "script": [{"kill": 0, "at_round": 10}]})")),
               Catch::Contains("disconnects the graph") &&
                                         Catch::Contains("7 parts") &&
                                         Catch::Contains("{1}, {2}"));
  }
  SECTION("star with repair: the leaves are joined in a path and train on") {
    const auto e = experimentFrom(faultScenario(R"({"kind": "star"})", alg, 4000,
        R"({"on_peer_loss": "continue", "script": [{"kill": 0, "at_round": 10}]})"));
    const auto r = testing::run(e);
    CHECK(survivorsStationarity(e, aliveWithout(8, {0}), r.xMean) < 1e-8);
  }
  SECTION("repairGraph: a ring of 8 without 3 and 4 is the ring 0-1-2-5-6-7") {
    const auto ring = topology::Graph::fromEdges(
        8, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 0}});
    auto g = engine::repairGraph(ring, aliveWithout(8, {3, 4}), engine::RepairKind::kReconnect);
    REQUIRE(g.isOk());
    CHECK(g->edges() ==
          std::vector<std::pair<int, int>>{{0, 1}, {0, 7}, {1, 2}, {2, 5}, {5, 6}, {6, 7}});
    CHECK(g->degree(3) == 0);
  }
}

TEST_CASE("with on_peer_loss \"stop\" a scripted kill stops the run, naming the rank",
          "[integration][faults]") {
  CHECK_THAT(simulateFailure(faultScenario(R"({"kind": "ring"})",
                                           R"({"kind": "dsgd", "step_size": 0.5})", 300,
                                           R"({"script": [{"kill": 5, "at_round": 40}]})")),
             Catch::Contains("rank 5") && Catch::Contains("before round 40"));
}

namespace {

// Every logged round's numbers (all but the wall time), for comparing two runs exactly.
std::vector<std::vector<double>> loggedRounds(const scenario::Experiment& e,
                                              runtime::SimulateResult* result = nullptr) {
  std::vector<std::vector<double>> rows;
  runtime::SimulateOptions opt;
  opt.onLog = [&](const runtime::RoundMetrics& m) {
    rows.push_back({static_cast<double>(m.round), m.objective, m.relError, m.consensusDistance,
                    m.meanSquareDeviation, static_cast<double>(m.bytesSent),
                    static_cast<double>(m.corruptMessages), m.compressionError});
  };
  auto r = testing::run(e, opt);
  if (result) *result = std::move(r);
  return rows;
}

const char* kExact = R"({"kind": "exact_diffusion", "step_size": 0.5})";

}  // namespace

TEST_CASE("duplicated and reordered messages change nothing", "[integration][faults]") {
  const auto clean = loggedRounds(experimentFrom(faultScenario(R"({"kind": "ring"})", kExact, 600,
                                                               "{}")));
  for (const std::string script :
       {R"([{"duplicate": 0.3}, {"reorder": 0.3}])",
        R"([{"duplicate": 1}, {"reorder": 1, "link": [2, 3], "from_round": 10}])",
        R"([{"corrupt": 0.2}, {"duplicate": 0.5}, {"reorder": 0.5}])"}) {
    DYNAMIC_SECTION(script) {
      auto faulty = loggedRounds(experimentFrom(faultScenario(
          R"({"kind": "ring"})", kExact, 600, R"({"script": )" + script + "}")));
      REQUIRE(faulty.size() == clean.size());
      for (size_t k = 0; k < faulty.size(); ++k) {
        auto row = faulty[k];
        if (script.find("corrupt") != std::string::npos) row[6] = clean[k][6];  // counted apart
        CHECK(row == clean[k]);
      }
    }
  }
}

TEST_CASE("a dropped message: with \"continue\" its sender leaves and the others reach their "
          "optimum", "[integration][faults]") {
  SECTION("one way: rank 3's message to rank 2 in round 61") {
    // (The coins of this seed drop 3 -> 2 and not 2 -> 3 in round 61.)
    const auto e = experimentFrom(faultScenario(R"({"kind": "ring"})", kExact, 2500,
        R"({"on_peer_loss": "continue", "script": [{"drop": 0.5, "link": [2, 3],
                                                    "from_round": 61, "to_round": 62}]})"));
    const auto r = testing::run(e);
    REQUIRE(r.changes.size() == 1);
    CHECK(r.changes[0].left == std::vector<int>{3});
    CHECK(r.changes[0].round > 61);
    CHECK(r.models.size() == 7);
    CHECK(survivorsStationarity(e, aliveWithout(8, {3}), r.xMean) < 1e-8);
    CHECK(survivorsStationarity(e, aliveWithout(8, {}), r.xMean) > 1e-4);
    CHECK(r.last.relError < 1e-8);
  }
  SECTION("both ways, on a random graph: both leave") {
    const auto e = experimentFrom(faultScenario(R"({"kind": "random", "p": 0.4})", kExact, 2500,
        R"({"on_peer_loss": "continue", "script": [{"drop": 1, "link": [0, 5],
                                                    "from_round": 40, "to_round": 41}]})"));
    const auto& support = e.schedule->support();
    REQUIRE(support.hasEdge(0, 5));
    const auto r = testing::run(e);
    // (One change or two: each loss takes effect after the diameter of the graph without it.)
    std::vector<int> left;
    for (const auto& c : r.changes) left.insert(left.end(), c.left.begin(), c.left.end());
    std::sort(left.begin(), left.end());
    CHECK(left == std::vector<int>{0, 5});
    CHECK(r.models.size() == 6);
    CHECK(survivorsStationarity(e, aliveWithout(8, {0, 5}), r.xMean) < 1e-8);
  }
  SECTION("a drop rate over many rounds: each drop costs its sender") {
    runtime::SimulateResult r;
    const auto e = experimentFrom(faultScenario(R"({"kind": "ring"})", kExact, 2500,
        R"({"on_peer_loss": "continue", "script": [{"drop": 0.0005, "to_round": 400}]})"));
    loggedRounds(e, &r);
    std::vector<int> left;
    for (const auto& c : r.changes) left.insert(left.end(), c.left.begin(), c.left.end());
    INFO(left.size() << " left");
    REQUIRE_FALSE(left.empty());
    CHECK(r.models.size() == 8 - left.size());
    CHECK(survivorsStationarity(e, aliveWithout(8, left), r.xMean) < 1e-8);
  }
}

TEST_CASE("a dropped message with on_peer_loss \"stop\" stops the run, naming the link",
          "[integration][faults]") {
  CHECK_THAT(simulateFailure(faultScenario(R"({"kind": "ring"})", kExact, 300,
                                           R"({"script": [{"drop": 1, "link": [6, 7],
                                                           "from_round": 25}]})")),
             Catch::Contains("the fault script dropped rank 6's model message to rank 7 in round 25 "
                      "(link 6-7)") &&
                 Catch::Contains("on_peer_loss is \"stop\""));
}

}  // namespace starling_faults_test

// AdaScale and Leader SGD on gossip (docs/algorithms.md §22, §24), run whole through `simulate`
// and checked against the update equations written out again here, by hand, on small graphs:
// every node's minibatch draws are replayed from its seed, and the test carries its own copy of
// the mixing weights, the consensus on AdaScale's statistics, the smoothed gain and its
// scale-invariant schedule, the running losses, the max-consensus election and the pulls.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <vector>

#include "core/rng.h"
#include "optim/problem.h"
#include "run_helpers.h"
#include "runtime/node_stack.h"
#include "scenario/scenario_writer.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_methods_gossip_test {

using namespace starling;
using namespace starling::testing;

namespace {

using Vec = std::vector<double>;

struct Nodes {
  std::vector<std::unique_ptr<optim::LocalObjective<double>>> f;
  std::vector<core::Rng> rng;
  std::vector<Vec> x;
};

Nodes nodesOf(const scenario::Experiment& e) {
  Nodes r;
  const int n = e.scenario.nodes;
  for (int i = 0; i < n; ++i) {
    r.f.push_back(optim::LocalObjective<double>::create(
        e.scenario.problem.spec, e.data.subset(e.parts[static_cast<size_t>(i)]),
        e.data.samples(), n));
    r.rng.emplace_back(runtime::gradientSeed(e.scenario, i));
    r.x.emplace_back(static_cast<size_t>(e.modelDim()), 0.0);
  }
  return r;
}

// Metropolis weights of a line 0 - 1 - ... - (n-1): w_ij = 1 / (1 + max(deg_i, deg_j)).
std::vector<Vec> lineWeights(int n) {
  std::vector<Vec> w(static_cast<size_t>(n), Vec(static_cast<size_t>(n), 0.0));
  const auto deg = [n](int i) { return (i == 0 || i == n - 1) ? 1 : 2; };
  for (int i = 0; i + 1 < n; ++i) {
    const double v = 1.0 / (1.0 + std::max(deg(i), deg(i + 1)));
    w[static_cast<size_t>(i)][static_cast<size_t>(i + 1)] = v;
    w[static_cast<size_t>(i + 1)][static_cast<size_t>(i)] = v;
  }
  return w;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t k = 0; k < a.size(); ++k) s += a[k] * b[k];
  return s;
}

void requireClose(const Vec& a, const Vec& b, double tol = 1e-11) {
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    INFO("coordinate " << k << ": " << a[k] << " vs " << b[k]);
    REQUIRE(std::abs(a[k] - b[k]) <= tol * (1.0 + std::abs(b[k])));
  }
}

std::string lineScenario(int nodes, int rounds, const std::string& batch,
                         const std::string& algorithm) {
  return R"({"schema_version": 1, "name": "methods_gossip", "nodes": )" + std::to_string(nodes) +
         R"(, "seed": 21, "rounds": )" + std::to_string(rounds) + R"(, "log_every": 1,
    "topology": {"kind": "line", "weights": "metropolis"},
    "problem": {"kind": "logistic", "l2": 0.01,
                "data": {"synthetic": {"samples": 240, "features": 6, "heterogeneity": 2.0}},
                "partition": "contiguous", "batch": )" + batch + R"(},
    "algorithm": )" + algorithm + "}";
}

double metric(const runtime::RoundMetrics& m, const std::string& name) {
  for (const auto& [k, v] : m.methods) {
    if (k == name) return v;
  }
  FAIL("no metric " << name);
  return 0;
}

}  // namespace

TEST_CASE("AdaScale on gossip: micro-batch statistics tracked by consensus, the smoothed gain "
          "and the schedule at floor(tau), as written by hand",
          "[integration][methods]") {
  constexpr int kNodes = 3, kRounds = 14, kMicro = 2, kBatch = 4;
  const double theta = 0.5, baseBatch = 1.0;
  const auto e = experimentFrom(lineScenario(kNodes, kRounds, std::to_string(kBatch), R"({
      "kind": "dsgd", "step_size": {"kind": "step", "value": 0.5, "every": 3, "factor": 0.5},
      "adascale": {"micro_batches": 2, "base_batch": 1, "smoothing": 0.5}})"));
  REQUIRE(e.scenario.algorithm.adascale);
  const double S = kNodes * kBatch / baseBatch;  // 12: the network's batch over the base batch
  REQUIRE(e.scenario.algorithm.adascale->scale == S);
  const double factor = (kBatch / kMicro) / baseBatch;  // sigma^2 of a micro-batch -> base batch

  std::vector<runtime::RoundMetrics> logged;
  runtime::SimulateOptions opt;
  opt.onLog = [&](const runtime::RoundMetrics& m) { logged.push_back(m); };
  const auto result = run(e, opt);

  Nodes ref = nodesOf(e);
  const size_t d = ref.x[0].size();
  const auto w = lineWeights(kNodes);
  struct Stat {
    double v = 0, m = 0;
  };
  std::vector<Stat> estimate(kNodes), previous(kNodes), mixed(kNodes), ema(kNodes);
  std::vector<double> emaWeight(kNodes, 0.0), tau(kNodes, 0.0), gain(kNodes, 1.0);
  for (int t = 0; t < kRounds; ++t) {
    std::vector<Vec> psi(kNodes, Vec(d));
    for (int i = 0; i < kNodes; ++i) {
      const auto u = static_cast<size_t>(i);
      std::vector<Vec> g(kMicro, Vec(d));
      for (auto& gc : g) ref.f[u]->stochasticGradient(ref.x[u], gc, kBatch / kMicro, ref.rng[u]);
      Vec mean(d, 0.0);
      for (size_t k = 0; k < d; ++k) mean[k] = (g[0][k] + g[1][k]) / 2.0;
      double spread = 0;
      for (const auto& gc : g) {
        for (size_t k = 0; k < d; ++k) spread += (gc[k] - mean[k]) * (gc[k] - mean[k]);
      }
      const double varMicro = spread / (kMicro - 1);
      const Stat s{factor * varMicro, dot(mean, mean) - varMicro / kMicro};
      estimate[u] = t == 0 ? s : Stat{mixed[u].v + s.v - previous[u].v, mixed[u].m + s.m - previous[u].m};
      previous[u] = s;
      ema[u].v = theta * ema[u].v + (1 - theta) * estimate[u].v;
      ema[u].m = theta * ema[u].m + (1 - theta) * estimate[u].m;
      emaWeight[u] = theta * emaWeight[u] + (1 - theta);
      const double v = std::max(ema[u].v / emaWeight[u], 0.0);
      const double m2 = std::max(ema[u].m / emaWeight[u], 0.0);
      gain[u] = v > 0 ? std::clamp((v + m2) / (v / S + m2), 1.0, S) : 1.0;
      const auto r = static_cast<uint64_t>(std::floor(tau[u]));
      const double eta = gain[u] * 0.5 * std::pow(0.5, static_cast<double>(r / 3));
      tau[u] += gain[u];
      for (size_t k = 0; k < d; ++k) psi[u][k] = ref.x[u][k] - eta * mean[k];
    }
    for (int i = 0; i < kNodes; ++i) {
      const auto u = static_cast<size_t>(i);
      ref.x[u] = psi[u];
      mixed[u] = estimate[u];
      for (int j = 0; j < kNodes; ++j) {
        const double wij = w[u][static_cast<size_t>(j)];
        if (wij == 0.0) continue;
        for (size_t k = 0; k < d; ++k) ref.x[u][k] += wij * (psi[static_cast<size_t>(j)][k] - psi[u][k]);
        mixed[u].v += wij * (estimate[static_cast<size_t>(j)].v - estimate[u].v);
        mixed[u].m += wij * (estimate[static_cast<size_t>(j)].m - estimate[u].m);
      }
    }
  }
  for (int i = 0; i < kNodes; ++i) {
    INFO("node " << i);
    requireClose(result.models[static_cast<size_t>(i)], ref.x[static_cast<size_t>(i)]);
  }
  // The gain really moved (the test would pass trivially at r = 1), and stays in [1, S].
  const double meanGain = (gain[0] + gain[1] + gain[2]) / 3.0;
  CHECK(meanGain > 1.5);
  REQUIRE(logged.size() == kRounds + 1);
  CHECK(metric(logged.back(), "adascale_gain") == Approx(meanGain).epsilon(1e-12));
  CHECK(metric(logged.back(), "adascale_tau") == Approx((tau[0] + tau[1] + tau[2]) / 3).epsilon(1e-12));
  for (const auto& m : logged) {
    CHECK(metric(m, "adascale_gain") >= 1.0);
    CHECK(metric(m, "adascale_gain") <= S);
  }
}

TEST_CASE("Leader SGD on gossip: running losses, the proximal and pulling steps, local leaders "
          "and a global leader elected by max-consensus over the diameter, as written by hand",
          "[integration][methods]") {
  constexpr int kNodes = 4, kRounds = 13, kBatch = 3, kWindow = 3;
  constexpr uint64_t kLocal = 2, kGlobal = 4, kDiameter = 3;  // a line of 4
  const double eta = 0.3, cL = 0.3, cG = 0.5, pL = 0.2, pG = 0.1;
  const auto e = experimentFrom(lineScenario(kNodes, kRounds, std::to_string(kBatch), R"({
      "kind": "dsgd", "step_size": 0.3,
      "leader": {"pull_local": 0.3, "pull_global": 0.5, "proximal_local": 0.2,
                 "proximal_global": 0.1, "local_period": 2, "global_period": 4,
                 "loss_window": 3}})"));
  REQUIRE(e.scenario.algorithm.diameter == kDiameter);
  std::vector<runtime::RoundMetrics> logged;
  runtime::SimulateOptions opt;
  opt.onLog = [&](const runtime::RoundMetrics& m) { logged.push_back(m); };
  const auto result = run(e, opt);

  Nodes ref = nodesOf(e);
  const size_t d = ref.x[0].size();
  const auto w = lineWeights(kNodes);
  const auto better = [](double a, int ra, double b, int rb) {
    return !std::isnan(a) && (std::isnan(b) || a < b || (a == b && ra < rb));
  };
  struct Candidate {
    double loss = NAN;
    int rank = -1;
    Vec model;
  };
  std::vector<std::deque<double>> window(kNodes);
  std::vector<double> L(kNodes);
  std::vector<Candidate> cand(kNodes);
  std::vector<Vec> xL(kNodes), xG(kNodes);  // empty: no leader (or the node itself)
  std::map<uint64_t, int> elected;          // rounds completed -> the expected global leader
  uint64_t start = 0;
  int globalArgmin = -1;
  bool electing = false;
  for (uint64_t t = 0; t < kRounds; ++t) {
    std::vector<Vec> psi(kNodes, Vec(d));
    if (t % kGlobal == 0) {
      start = t;
      electing = true;
    }
    for (int i = 0; i < kNodes; ++i) {
      const auto u = static_cast<size_t>(i);
      Vec g(d);
      const double loss = ref.f[u]->stochasticGradientWithLoss(ref.x[u], g, kBatch, ref.rng[u]);
      window[u].push_back(loss);
      if (window[u].size() > kWindow) window[u].pop_front();
      L[u] = 0;
      for (double l : window[u]) L[u] += l;
      L[u] /= static_cast<double>(window[u].size());
      if (t == start) cand[u] = {L[u], i, ref.x[u]};
      const double lamL = pL / (kLocal * eta), lamG = pG / (kGlobal * eta);
      for (size_t k = 0; k < d; ++k) {
        double dir = g[k];
        if (!xL[u].empty()) dir += lamL * (ref.x[u][k] - xL[u][k]);
        if (!xG[u].empty()) dir += lamG * (ref.x[u][k] - xG[u][k]);
        psi[u][k] = ref.x[u][k] - eta * dir;
      }
    }
    if (t == start) {  // whom the election must find: the lowest running loss of all nodes
      globalArgmin = 0;
      for (int i = 1; i < kNodes; ++i) {
        if (better(L[static_cast<size_t>(i)], i, L[static_cast<size_t>(globalArgmin)], globalArgmin)) globalArgmin = i;
      }
    }
    const std::vector<Candidate> sent = cand;
    for (int i = 0; i < kNodes; ++i) {
      const auto u = static_cast<size_t>(i);
      ref.x[u] = psi[u];
      for (int j = 0; j < kNodes; ++j) {
        const double wij = w[u][static_cast<size_t>(j)];
        for (size_t k = 0; k < d && wij != 0.0; ++k) ref.x[u][k] += wij * (psi[static_cast<size_t>(j)][k] - psi[u][k]);
      }
      if (electing) {
        for (int j = 0; j < kNodes; ++j) {
          const auto& c = sent[static_cast<size_t>(j)];
          if (w[u][static_cast<size_t>(j)] != 0.0 && better(c.loss, c.rank, cand[u].loss, cand[u].rank)) cand[u] = c;
        }
        if (t + 1 - start >= kDiameter) {
          if (cand[u].rank == i) {
            xG[u].clear();
          } else {
            xG[u] = cand[u].model;
            for (size_t k = 0; k < d; ++k) ref.x[u][k] += cG * (xG[u][k] - ref.x[u][k]);
          }
        }
      }
      if ((t + 1) % kLocal == 0) {
        int best = i;
        for (int j = 0; j < kNodes; ++j) {
          if (w[u][static_cast<size_t>(j)] != 0.0 && better(L[static_cast<size_t>(j)], j, L[static_cast<size_t>(best)], best)) best = j;
        }
        if (best == i) {
          xL[u].clear();
        } else {
          xL[u] = psi[static_cast<size_t>(best)];
          for (size_t k = 0; k < d; ++k) ref.x[u][k] += cL * (xL[u][k] - ref.x[u][k]);
        }
      }
    }
    if (electing && t + 1 - start >= kDiameter) {
      electing = false;
      for (int i = 0; i < kNodes; ++i) REQUIRE(cand[static_cast<size_t>(i)].rank == globalArgmin);
      elected[t + 1] = globalArgmin;
    }
  }
  for (int i = 0; i < kNodes; ++i) {
    INFO("node " << i);
    requireClose(result.models[static_cast<size_t>(i)], ref.x[static_cast<size_t>(i)]);
  }
  // Every node follows the global argmin after each election (a mean of equal ranks is that rank).
  REQUIRE(elected.size() == 3);  // elections at rounds 0, 4, 8 end after rounds 3, 7, 11
  for (const auto& [round, rank] : elected) {
    INFO("after round " << round);
    CHECK(metric(logged[round], "leader_global") == rank);
  }
  double meanL = 0;
  for (double l : L) meanL += l / kNodes;
  CHECK(metric(logged.back(), "leader_running_loss") == Approx(meanL).epsilon(1e-12));
}

TEST_CASE("the running loss an sgd estimator reports is the drawn samples' mean loss",
          "[integration][methods]") {
  // One sample per node: every draw is that sample, so the batch's mean loss is its loss,
  // (value(x) - (l2/2)||x||^2) / scale with scale = n/m = 1 here.
  const auto e = experimentFrom(lineScenario(2, 1, "1", R"({"kind": "dsgd", "step_size": 0.1})"));
  optim::ProblemSpec spec = e.scenario.problem.spec;
  const std::vector<size_t> first = {0};
  auto one = e.data.subset(first);
  auto f = optim::LocalObjective<double>::create(spec, std::move(one), 1, 1);
  Vec x = {0.3, -0.2, 0.5, 0.1, -0.4, 0.2};
  REQUIRE(x.size() == static_cast<size_t>(f->dim()));
  Vec g(x.size()), g2(x.size());
  core::Rng rng(5), rng2(5);
  const double loss = f->stochasticGradientWithLoss(x, g, 3, rng);
  f->stochasticGradient(x, g2, 3, rng2);
  CHECK(g == g2);  // the same estimate and the same draws as without the loss
  const double expected = f->value(x) - 0.5 * spec.l2 * dot(x, x);
  CHECK(loss == Approx(expected).epsilon(1e-12));
}

TEST_CASE("AdaScale and Leader SGD refuse what they cannot do, naming the JSON path",
          "[integration][methods]") {
  const auto errorOf = [](const std::string& json) {
    auto s = scenario::parseScenario(json, "test.json", ".");
    if (!s) return s.status().message();
    auto e = scenario::prepareExperiment(*s);
    return e ? std::string("accepted") : e.status().message();
  };
  const std::string ada = R"("adascale": {"micro_batches": 2})";
  const std::string leader = R"("leader": {"global_period": 4})";
  const auto alg = [](const std::string& kind, const std::string& extra) {
    return R"({"kind": ")" + kind + R"(", "step_size": 0.1, )" + extra + "}";
  };
  CHECK_THAT(errorOf(lineScenario(3, 5, "4", alg("choco", ada))),
             Catch::Contains("/algorithm/adascale") && Catch::Contains("dsgd"));
  CHECK_THAT(errorOf(lineScenario(3, 5, "0", alg("dsgd", ada))),
             Catch::Contains("/problem") && Catch::Contains("minibatch"));
  CHECK_THAT(errorOf(lineScenario(3, 5, "5", alg("dsgd", ada))),
             Catch::Contains("/algorithm/adascale/micro_batches"));
  CHECK_THAT(errorOf(lineScenario(3, 5, "4", alg("dsgd", R"("adascale": {"base_batch": 100})"))),
             Catch::Contains("/algorithm/adascale/base_batch"));
  CHECK_THAT(errorOf(lineScenario(3, 5, "4", alg("dsgd", ada + R"(, "local_optimizer": {"kind": "adam"})"))),
             Catch::Contains("/algorithm/local_optimizer/kind"));
  CHECK_THAT(errorOf(lineScenario(3, 5, "4", R"({"kind": "dsgd", "step_size": {"kind": "legw",
      "base_lr": 0.1, "base_batch": 4, "warmup_epochs": 1}, )" + ada + "}")),
             Catch::Contains("/algorithm/step_size/kind"));
  CHECK_THAT(errorOf(lineScenario(3, 5, "4", alg("dsgd", ada + ", " + leader))),
             Catch::Contains("/algorithm/leader"));
  CHECK_THAT(errorOf(lineScenario(3, 5, "4", alg("dsgd", R"("leader": {"pull_local": 2})"))),
             Catch::Contains("/algorithm/leader/pull_local"));
  CHECK_THAT(errorOf(lineScenario(3, 5, "4", alg("dsgd", R"("leader": {"speed": 2})"))),
             Catch::Contains("/algorithm/leader"));
  // A line of 6 has diameter 5: a global election every 4 rounds cannot finish.
  CHECK_THAT(errorOf(lineScenario(6, 5, "4", alg("dsgd", leader))),
             Catch::Contains("/algorithm/leader/global_period") && Catch::Contains("diameter (5"));
  std::string compressed = lineScenario(3, 5, "4", alg("dsgd", leader));
  compressed.insert(compressed.rfind('}'), R"(, "compression": {"kind": "qsgd"})");
  CHECK_THAT(errorOf(compressed), Catch::Contains("/compression/kind"));
  // Neither survives messages mixed out of their round.
  CHECK_THAT(errorOf(lineScenario(3, 5, "4", alg("dsgd", leader + R"(, "asynchronous": {"max_staleness": 2})"))),
             Catch::Contains("/algorithm/leader") && Catch::Contains("asynchronous"));
  CHECK_THAT(errorOf(lineScenario(3, 5, "4", alg("dsgd", ada + R"(, "asynchronous": {"max_staleness": 2})"))),
             Catch::Contains("/algorithm/adascale") && Catch::Contains("asynchronous"));
  CHECK(errorOf(lineScenario(3, 5, "4", alg("dsgd", leader))) == "accepted");
  CHECK(errorOf(lineScenario(3, 5, "4", alg("dsgd", ada))) == "accepted");
}

TEST_CASE("AdaScale and Leader SGD scenarios write back as they were read",
          "[integration][methods]") {
  for (const std::string extra :
       {R"("adascale": {"micro_batches": 2, "base_batch": 1, "smoothing": 0.3})",
        R"("adascale": {"micro_batches": 4})",
        R"("leader": {"pull_local": 0.2, "pull_global": 0.4, "proximal_local": 0.05,
                      "proximal_global": 0.01, "local_period": 3, "global_period": 9,
                      "loss_window": 5})"}) {
    INFO(extra);
    auto s = scenario::parseScenario(
        lineScenario(3, 5, "4", R"({"kind": "dsgd", "step_size": 0.1, )" + extra + "}"),
        "test.json", ".");
    REQUIRE(s.isOk());
    const std::string written = scenario::resolvedScenarioJson(*s);
    auto again = scenario::parseScenario(written, "test.json", ".");
    INFO(written);
    REQUIRE(again.isOk());
    CHECK(scenario::resolvedScenarioJson(*again) == written);
    CHECK(again->algorithm.adascale.has_value() == s->algorithm.adascale.has_value());
    if (s->algorithm.adascale) {
      CHECK(again->algorithm.adascale->microBatches == s->algorithm.adascale->microBatches);
      CHECK(again->algorithm.adascale->baseBatch == s->algorithm.adascale->baseBatch);
      CHECK(again->algorithm.adascale->smoothing == s->algorithm.adascale->smoothing);
      CHECK(again->algorithm.adascale->scale == s->algorithm.adascale->scale);
    }
    CHECK(again->algorithm.leader.has_value() == s->algorithm.leader.has_value());
    if (s->algorithm.leader) {
      const auto &a = *again->algorithm.leader, &b = *s->algorithm.leader;
      CHECK(a.pullLocal == b.pullLocal);
      CHECK(a.pullGlobal == b.pullGlobal);
      CHECK(a.proximalLocal == b.proximalLocal);
      CHECK(a.proximalGlobal == b.proximalGlobal);
      CHECK(a.localPeriod == b.localPeriod);
      CHECK(a.globalPeriod == b.globalPeriod);
      CHECK(a.lossWindow == b.lossWindow);
    }
  }
}

}  // namespace starling_methods_gossip_test

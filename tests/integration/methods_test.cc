// The seeds' training methods wired into scenarios (docs/algorithms.md §20-§21), run whole through
// `simulate` and checked against the update equations written out by hand here: a node's local
// optimizer (Adam, momentum) and the LEGW step-size schedule, on two nodes of DSGD.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "optim/problem.h"
#include "run_helpers.h"
#include "scenario/scenario_writer.h"

// Its own namespace: the integration tests compile several files per compiler run.
namespace starling_methods_test {

using namespace starling;
using namespace starling::testing;

namespace {

// Two nodes on a complete graph (Metropolis weights 1/2 each), logistic regression, full
// gradients, DSGD with gamma 1: x_i <- (psi_0 + psi_1) / 2, psi_j = x_j - eta_t u_j.
std::string twoNodes(const std::string& stepSize, const std::string& localOptimizer, int rounds) {
  return R"({"schema_version": 1, "name": "methods", "nodes": 2, "seed": 9, "rounds": )" +
         std::to_string(rounds) + R"(, "log_every": 1,
    "topology": {"kind": "complete", "weights": "metropolis"},
    "problem": {"kind": "logistic", "l2": 0.01,
                "data": {"synthetic": {"samples": 200, "features": 6, "heterogeneity": 1.0}},
                "partition": "contiguous", "batch": 0},
    "algorithm": {"kind": "dsgd", "step_size": )" +
         stepSize + (localOptimizer.empty() ? "" : R"(, "local_optimizer": )" + localOptimizer) +
         "}}";
}

struct Reference {
  std::vector<std::unique_ptr<optim::LocalObjective<double>>> f;
  std::vector<std::vector<double>> x;
};

Reference referenceOf(const scenario::Experiment& e) {
  Reference r;
  for (int i = 0; i < 2; ++i) {
    r.f.push_back(optim::LocalObjective<double>::create(
        e.scenario.problem.spec, e.data.subset(e.parts[static_cast<size_t>(i)]),
        e.data.samples(), 2));
    r.x.emplace_back(static_cast<size_t>(e.modelDim()), 0.0);
  }
  return r;
}

void requireClose(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    INFO("coordinate " << k << ": " << a[k] << " vs " << b[k]);
    REQUIRE(std::abs(a[k] - b[k]) <= 1e-12 * (1.0 + std::abs(b[k])));
  }
}

}  // namespace

TEST_CASE("DSGD with a local Adam is Adam's equations on each node, then the average",
          "[integration][methods]") {
  constexpr int kRounds = 25;
  const double eta = 0.05, b1 = 0.8, b2 = 0.99, eps = 1e-7;
  const auto e = experimentFrom(twoNodes(
      "0.05", R"({"kind": "adam", "beta1": 0.8, "beta2": 0.99, "eps": 1e-7})", kRounds));
  const auto result = run(e);
  REQUIRE(result.models.size() == 2);

  Reference ref = referenceOf(e);
  const size_t d = ref.x[0].size();
  std::vector<std::vector<double>> m(2, std::vector<double>(d, 0.0)), v = m;
  for (int t = 1; t <= kRounds; ++t) {
    std::vector<std::vector<double>> psi(2, std::vector<double>(d));
    for (int i = 0; i < 2; ++i) {
      std::vector<double> g(d);
      ref.f[static_cast<size_t>(i)]->gradient(ref.x[static_cast<size_t>(i)], g);
      for (size_t k = 0; k < d; ++k) {
        auto& mi = m[static_cast<size_t>(i)][k];
        auto& vi = v[static_cast<size_t>(i)][k];
        mi = b1 * mi + (1 - b1) * g[k];
        vi = b2 * vi + (1 - b2) * g[k] * g[k];
        const double mhat = mi / (1 - std::pow(b1, t)), vhat = vi / (1 - std::pow(b2, t));
        psi[static_cast<size_t>(i)][k] =
            ref.x[static_cast<size_t>(i)][k] - eta * mhat / (std::sqrt(vhat) + eps);
      }
    }
    for (int i = 0; i < 2; ++i) {
      for (size_t k = 0; k < d; ++k) ref.x[static_cast<size_t>(i)][k] = 0.5 * (psi[0][k] + psi[1][k]);
    }
  }
  requireClose(result.models[0], ref.x[0]);
  requireClose(result.models[1], ref.x[1]);
}

TEST_CASE("DSGD with heavy-ball momentum follows v = mu v + g, x -= eta v",
          "[integration][methods]") {
  constexpr int kRounds = 20;
  const double eta = 0.1, mu = 0.7;
  const auto e = experimentFrom(
      twoNodes("0.1", R"({"kind": "momentum", "momentum": 0.7})", kRounds));
  const auto result = run(e);
  Reference ref = referenceOf(e);
  const size_t d = ref.x[0].size();
  std::vector<std::vector<double>> buf(2, std::vector<double>(d, 0.0));
  for (int t = 1; t <= kRounds; ++t) {
    std::vector<std::vector<double>> psi(2, std::vector<double>(d));
    for (size_t i = 0; i < 2; ++i) {
      std::vector<double> g(d);
      ref.f[i]->gradient(ref.x[i], g);
      for (size_t k = 0; k < d; ++k) {
        buf[i][k] = mu * buf[i][k] + g[k];
        psi[i][k] = ref.x[i][k] - eta * buf[i][k];
      }
    }
    for (size_t i = 0; i < 2; ++i) {
      for (size_t k = 0; k < d; ++k) ref.x[i][k] = 0.5 * (psi[0][k] + psi[1][k]);
    }
  }
  requireClose(result.models[0], ref.x[0]);
  requireClose(result.models[1], ref.x[1]);
}

TEST_CASE("the LEGW schedule ramps to base_lr x sqrt(k) over k x warmup_epochs epochs",
          "[integration][methods]") {
  // 200 samples, full gradients: the network's batch is 200 and an epoch is one round; with
  // base_batch 50, k = 4: peak 0.02 x 2 = 0.04 and a warm-up of 2 x 4 = 8 rounds, then constant.
  constexpr int kRounds = 14;
  const auto e = experimentFrom(twoNodes(
      R"({"kind": "legw", "base_lr": 0.02, "base_batch": 50, "warmup_epochs": 2})", "", kRounds));
  const auto result = run(e);
  Reference ref = referenceOf(e);
  const size_t d = ref.x[0].size();
  for (int t = 0; t < kRounds; ++t) {
    const double eta = t < 8 ? 0.04 * (t + 1) / 8.0 : 0.04;
    std::vector<std::vector<double>> psi(2, std::vector<double>(d));
    for (size_t i = 0; i < 2; ++i) {
      std::vector<double> g(d);
      ref.f[i]->gradient(ref.x[i], g);
      for (size_t k = 0; k < d; ++k) psi[i][k] = ref.x[i][k] - eta * g[k];
    }
    for (size_t i = 0; i < 2; ++i) {
      for (size_t k = 0; k < d; ++k) ref.x[i][k] = 0.5 * (psi[0][k] + psi[1][k]);
    }
  }
  requireClose(result.models[0], ref.x[0]);
  requireClose(result.models[1], ref.x[1]);
  // The defaults LEGW took from the data do not change the scenario's hash (merge compares it).
  auto parsed = scenario::parseScenario(
      twoNodes(R"({"kind": "legw", "base_lr": 0.02, "base_batch": 50, "warmup_epochs": 2})", "",
               kRounds),
      "test.json", ".");
  REQUIRE(parsed);
  CHECK(scenario::scenarioHash(*parsed) == scenario::scenarioHash(e.scenario));
  CHECK(e.scenario.algorithm.stepSize.batch == 200.0);
}

TEST_CASE("local optimizers and LEGW refuse what they cannot do, naming the JSON path",
          "[integration][methods]") {
  const auto refuse = [](const std::string& json, const std::string& words) {
    auto s = scenario::parseScenario(json, "m.json", ".");
    REQUIRE_FALSE(s);
    INFO(s.status().message());
    CHECK(s.status().message().find(words) != std::string::npos);
  };
  std::string ed = twoNodes("0.1", R"({"kind": "adam"})", 5);
  ed.replace(ed.find("\"dsgd\""), 6, "\"exact_diffusion\"");
  refuse(ed, "/algorithm/local_optimizer/kind: adam changes the gradients exact_diffusion");
  refuse(twoNodes("0.1", R"({"kind": "adam", "beta1": 1.0})", 5), "/algorithm/local_optimizer/beta1");
  refuse(twoNodes("0.1", R"({"kind": "rmsprop"})", 5), "/algorithm/local_optimizer/kind");
  refuse(twoNodes(R"({"kind": "legw", "base_lr": 0.1, "warmup_epochs": 1})", "", 5),
         "/algorithm/step_size: missing required key \"base_batch\"");
  std::string adasum = twoNodes("0.1", "", 5);
  adasum.replace(adasum.find("\"dsgd\""), 6, "\"dsgd\", \"combine\": \"adasum\", \"gamma\": 0.5");
  refuse(adasum, "/algorithm/gamma: Adasum combines the updates itself");
  adasum = twoNodes("0.1", "", 5);
  adasum.replace(adasum.find("\"dsgd\""), 6, "\"dsgd\", \"combine\": \"adasum\"");
  adasum.insert(adasum.rfind('}'), R"(, "compression": {"kind": "fp16", "error_feedback": true})");
  refuse(adasum, "/compression/kind: \"combine\": \"adasum\" sends models and updates");
  std::string edAdasum = twoNodes("0.1", "", 5);
  edAdasum.replace(edAdasum.find("\"dsgd\""), 6, "\"exact_diffusion\", \"combine\": \"adasum\"");
  refuse(edAdasum, "combine");
}

namespace {

// Adasum of two vectors, written out: (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b.
std::vector<double> adasumByHand(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    ab += a[k] * b[k];
    aa += a[k] * a[k];
    bb += b[k] * b[k];
  }
  const double ca = aa == 0 ? 1.0 : 1.0 - ab / (2 * aa), cb = bb == 0 ? 1.0 : 1.0 - ab / (2 * bb);
  std::vector<double> out(a.size());
  for (size_t k = 0; k < a.size(); ++k) out[k] = ca * a[k] + cb * b[k];
  return out;
}

}  // namespace

TEST_CASE("combine adasum on a complete graph is centralized Adasum of the updates plus the "
          "average model", "[integration][methods]") {
  constexpr int kRounds = 15, kNodes = 4;
  const double eta = 0.3;
  const std::string json = R"({"schema_version": 1, "name": "adasum", "nodes": 4, "seed": 4,
    "rounds": 15, "log_every": 1, "topology": {"kind": "complete", "weights": "metropolis"},
    "problem": {"kind": "logistic", "l2": 0.01,
                "data": {"synthetic": {"samples": 240, "features": 5, "heterogeneity": 2.0}},
                "partition": "contiguous", "batch": 0},
    "algorithm": {"kind": "dsgd", "step_size": 0.3, "combine": "adasum"}})";
  const auto e = experimentFrom(json);
  const auto result = run(e);
  REQUIRE(result.models.size() == kNodes);
  std::vector<std::unique_ptr<optim::LocalObjective<double>>> f;
  const size_t d = e.modelDim();
  std::vector<std::vector<double>> x(kNodes, std::vector<double>(d, 0.0));
  for (size_t i = 0; i < kNodes; ++i) {
    f.push_back(optim::LocalObjective<double>::create(e.scenario.problem.spec,
                                                      e.data.subset(e.parts[i]), e.data.samples(),
                                                      kNodes));
  }
  for (int t = 0; t < kRounds; ++t) {
    std::vector<std::vector<double>> delta(kNodes, std::vector<double>(d));
    for (size_t i = 0; i < kNodes; ++i) {
      f[i]->gradient(x[i], delta[i]);
      for (auto& v : delta[i]) v *= -eta;
    }
    // The tree in peer order: (0, 1) and (2, 3), then the two results.
    const auto combined = adasumByHand(adasumByHand(delta[0], delta[1]),
                                       adasumByHand(delta[2], delta[3]));
    std::vector<double> mean(d, 0.0);
    for (size_t i = 0; i < kNodes; ++i) {
      for (size_t k = 0; k < d; ++k) mean[k] += 0.25 * x[i][k];
    }
    for (size_t i = 0; i < kNodes; ++i) {
      for (size_t k = 0; k < d; ++k) x[i][k] = mean[k] + combined[k];
    }
  }
  for (size_t i = 0; i < kNodes; ++i) requireClose(result.models[i], x[i]);
  // Adasum is not an average: with heterogeneous data the combined update is larger than the mean
  // update DSGD would take (orthogonal parts add up), so the runs differ.
  std::string dsgd = json;
  dsgd.replace(dsgd.find(R"(, "combine": "adasum")"), 21, "");
  const auto plain = run(experimentFrom(dsgd));
  CHECK(plain.models[0] != result.models[0]);
}

}  // namespace starling_methods_test

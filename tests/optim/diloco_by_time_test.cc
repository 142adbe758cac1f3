// DiLoCo's by_time inner steps (optim/diloco.h, docs/algorithms.md §29): each node takes its own
// number of inner steps a round (the emulated count that simulate derives from the node's speed
// stands for the clock here), the mix weighted by them; with fragments, overlap and noloco, and
// exact_diffusion's unweighted mix, which still reaches the optimum of the mean. Against the
// recursions written out with plain loops and the closed-form optimum of heterogeneous quadratics.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "diloco_testing.h"
#include "optim/algorithm.h"
#include "optim/diloco.h"

using namespace starling;
using namespace starling::optim;
using starling::optim::testing::randomVec;
using starling::optim::testing::Vec;

using namespace diloco_testing;

namespace {

// Nodes of `spec` with by_time inner steps, node i taking steps[i] a round.
Nodes byTimeNodes(const std::vector<Quadratic>& fs, DilocoSpec spec, const Vec& x0,
                  const std::vector<uint64_t>& steps) {
  Nodes ns;
  spec.seconds = 1;  // by_time; the emulated count stands for the clock
  for (size_t i = 0; i < fs.size(); ++i) {
    spec.emulatedSteps = steps[i];
    ns.oracles.push_back(std::make_unique<QuadraticOracle>(fs[i]));
    ns.algs.push_back(createDiloco<double>(spec, x0, *ns.oracles.back()));
  }
  return ns;
}

// x-bar_i's element k: sum_j w_ij h_j x_j / sum_j w_ij h_j, the step-weighted mix.
double weightedMix(const Matrix& w, size_t i, const std::vector<uint64_t>& h,
                   const std::vector<Vec>& x, size_t k) {
  double num = 0, den = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    num += w[i][j] * static_cast<double>(h[j]) * x[j][k];
    den += w[i][j] * static_cast<double>(h[j]);
  }
  return num / den;
}

}  // namespace

TEST_CASE("diloco by_time: each node's own number of inner steps, the mix weighted by them",
          "[diloco]") {
  const size_t n = 5, d = 4;
  const auto fs = problems(n, d, 91);
  const Vec x0 = randomVec(d, 1.0, 11);
  const double alpha = 0.05;
  const int rounds = 8;
  const std::vector<uint64_t> steps = {1, 2, 3, 4, 5};
  for (const bool complete : {false, true}) {
    INFO((complete ? "complete" : "ring"));
    const Matrix w = complete ? completeWeights(n) : ringWeights(n);
    Nodes ns;
    for (size_t i = 0; i < n; ++i) {
      DilocoSpec spec;
      spec.innerSteps = 100;  // the cap
      spec.seconds = 1;       // by_time; the emulated count below stands for the clock
      spec.emulatedSteps = steps[i];
      ns.oracles.push_back(std::make_unique<QuadraticOracle>(fs[i]));
      ns.algs.push_back(createDiloco<double>(spec, x0, *ns.oracles.back()));
    }
    REQUIRE(ns.algs[0]->messageSize() == d + 1);
    drive(ns.algs, w, alpha, rounds);
    for (size_t i = 0; i < n; ++i) CHECK(ns.oracles[i]->calls == static_cast<int>(steps[i]) * rounds);

    // x-bar_i = sum_j w_ij h_j x_j / sum_j w_ij h_j, then DiLoCo's Nesterov step (lr 0.7, 0.9).
    std::vector<Vec> theta(n, x0), m(n, Vec(d, 0.0));
    for (int r = 0; r < rounds; ++r) {
      std::vector<Vec> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = innerSteps(fs[i], theta[i], alpha, steps[i]);
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < d; ++k) {
          const double xbar = weightedMix(w, i, steps, x, k);
          const double delta = theta[i][k] - xbar;
          m[i][k] = 0.9 * m[i][k] + delta;
          theta[i][k] -= 0.7 * (delta + 0.9 * m[i][k]);
        }
      }
    }
    std::vector<MethodMetric> metrics;
    for (size_t i = 0; i < n; ++i) {
      INFO("node " << i);
      CHECK(relDiff(modelOf(*ns.algs[i]), theta[i]) < 1e-12);
      metrics.clear();
      ns.algs[i]->methodMetrics(metrics);
      CHECK(metrics[1].name == "inner_steps");
      CHECK(metrics[1].value == static_cast<double>(steps[i] * rounds));
    }
  }
}

TEST_CASE("diloco by_time in fragments with noloco: each fragment weighted by the steps since its "
          "last exchange, theta-bar unweighted", "[diloco]") {
  // 5 nodes on a ring, 5 parameters in 2 fragments (3 and 2), node i takes i + 1 steps a round.
  // Round r mixes fragment r mod 2: [theta, h x, h] with h the steps since that fragment's last
  // exchange (its first: since the start), so x-bar = sum_j w_ij h_j x_j / sum_j w_ij h_j and
  // theta-bar = sum_j w_ij theta_j; then NoLoCo's step, and the fragment restarts from theta.
  const size_t n = 5, d = 5, F = 2, width = 3;
  const auto fs = problems(n, d, 131);
  const Vec x0 = randomVec(d, 1.0, 17);
  const double alpha = 0.05;
  const int rounds = 7;
  const std::vector<uint64_t> steps = {1, 2, 3, 4, 5};
  const Matrix w = ringWeights(n);
  DilocoSpec spec;
  spec.innerSteps = 100;  // the cap (max_steps)
  spec.fragments = F;
  spec.outer = DilocoSpec::Outer::kNoloco;
  spec.outerLr = 0.7;
  spec.outerMomentum = 0.5;
  spec.pull = 0.3;
  auto ns = byTimeNodes(fs, spec, x0, steps);
  REQUIRE(ns.algs[0]->messageSize() == 2 * width + 1);
  drive(ns.algs, w, alpha, rounds);

  std::vector<Vec> theta(n, x0), x(n, x0), m(n, Vec(d, 0.0));
  std::vector<std::vector<double>> since(n, std::vector<double>(F, 0.0));
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < n; ++i) {
      x[i] = innerSteps(fs[i], x[i], alpha, steps[i]);
      for (double& s : since[i]) s += static_cast<double>(steps[i]);
    }
    const size_t f = static_cast<size_t>(r) % F, lo = f * width, hi = std::min(d, lo + width);
    std::vector<Vec> next = theta;
    for (size_t i = 0; i < n; ++i) {
      double total = 0;
      for (size_t j = 0; j < n; ++j) total += w[i][j] * since[j][f];
      for (size_t k = lo; k < hi; ++k) {
        double xbar = 0, tbar = 0;
        for (size_t j = 0; j < n; ++j) {
          xbar += w[i][j] * since[j][f] * x[j][k];
          tbar += w[i][j] * theta[j][k];
        }
        xbar /= total;
        m[i][k] = 0.5 * m[i][k] - 0.7 * (tbar - xbar) - 0.3 * (theta[i][k] - tbar);
        next[i][k] = theta[i][k] + m[i][k];
      }
    }
    theta = next;
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = lo; k < hi; ++k) x[i][k] = theta[i][k];
      since[i][f] = 0;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    INFO("node " << i);
    CHECK(relDiff(modelOf(*ns.algs[i]), theta[i]) < 1e-12);
    CHECK(ns.oracles[i]->calls == static_cast<int>(steps[i]) * rounds);
  }
  // The weight itself: the next round's message ends with the steps since its fragment's last
  // exchange (the ratios above would hold for any multiple of the node's steps).
  const size_t f = static_cast<size_t>(rounds) % F;
  for (size_t i = 0; i < n; ++i) {
    Vec msg(ns.algs[i]->messageSize());
    RoundInfo info;
    info.round = static_cast<uint64_t>(rounds);
    info.stepSize = alpha;
    info.self = static_cast<int>(i);
    info.selfWeight = w[i][i];
    ns.algs[i]->prepare(info, msg);
    CHECK(msg.back() == since[i][f] + static_cast<double>(steps[i]));
  }
}

TEST_CASE("diloco by_time with overlap: the steps taken while the last exchange travelled count "
          "toward the next", "[diloco]") {
  // Nesterov on a ring of 5, node i taking i + 1 steps a round: the first round's steps before the
  // send, then each round's during the exchange; the message is [h x, h] of the model as sent
  // (h the steps since the last send), and the outer step lands on the steps taken since.
  const size_t n = 5, d = 4;
  const auto fs = problems(n, d, 151);
  const Vec x0 = randomVec(d, 1.0, 19);
  const double alpha = 0.04;
  const int rounds = 6;
  const std::vector<uint64_t> steps = {1, 2, 3, 4, 5};
  const Matrix w = ringWeights(n);
  DilocoSpec spec;
  spec.innerSteps = 100;
  spec.overlap = true;
  auto ns = byTimeNodes(fs, spec, x0, steps);
  drive(ns.algs, w, alpha, rounds);

  std::vector<Vec> theta(n, x0), x(n, x0), m(n, Vec(d, 0.0));
  for (size_t i = 0; i < n; ++i) x[i] = innerSteps(fs[i], x[i], alpha, steps[i]);
  for (int r = 0; r < rounds; ++r) {
    const std::vector<Vec> sent = x;
    for (size_t i = 0; i < n; ++i) x[i] = innerSteps(fs[i], x[i], alpha, steps[i]);
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < d; ++k) {
        const double xbar = weightedMix(w, i, steps, sent, k);
        double y = 0;
        const double next = outerStep(spec, false, 0, theta[i][k], xbar, sent[i][k], m[i][k], y);
        x[i][k] = next + (x[i][k] - sent[i][k]);
        theta[i][k] = next;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    INFO("node " << i);
    CHECK(relDiff(modelOf(*ns.algs[i]), theta[i]) < 1e-12);
    CHECK(ns.oracles[i]->calls == static_cast<int>(steps[i]) * (rounds + 1));
  }
}

TEST_CASE("diloco by_time with exact_diffusion: an unweighted mix, and the optimum of the mean "
          "whatever each node's steps", "[diloco]") {
  // 8 nodes on a ring, node i taking 2 + i steps a round of at most 10 (max_steps: the
  // correction's H). The mix is the plain W (no step weights: the message is the local model),
  // y_i += (x_i - x-bar_i) / (2 alpha 10), theta = x-bar.
  const size_t n = 8, d = 6;
  const auto fs = problems(n, d, 41);
  const Vec opt = optimumOf(fs);
  const Vec x0(d, 0.0);
  const double alpha = 0.05;
  std::vector<uint64_t> steps(n);
  for (size_t i = 0; i < n; ++i) steps[i] = 2 + i;
  const Matrix w = ringWeights(n);
  const auto nodesOf = [&](DilocoSpec::Outer outer, double lr) {
    DilocoSpec spec;
    spec.innerSteps = 10;
    spec.outer = outer;
    spec.outerLr = lr;
    return byTimeNodes(fs, spec, x0, steps);
  };
  SECTION("the recursion") {
    auto ns = nodesOf(DilocoSpec::Outer::kExactDiffusion, 1.0);
    REQUIRE(ns.algs[0]->messageSize() == d);
    const int rounds = 5;
    drive(ns.algs, w, alpha, rounds);
    std::vector<Vec> theta(n, x0), y(n, Vec(d, 0.0));
    for (int r = 0; r < rounds; ++r) {
      std::vector<Vec> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = innerSteps(fs[i], theta[i], alpha, steps[i], &y[i]);
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < d; ++k) {
          double xbar = 0;
          for (size_t j = 0; j < n; ++j) xbar += w[i][j] * x[j][k];
          y[i][k] += (x[i][k] - xbar) / (2 * alpha * 10);
          theta[i][k] = xbar;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      INFO("node " << i);
      CHECK(relDiff(modelOf(*ns.algs[i]), theta[i]) < 1e-12);
    }
  }
  SECTION("the optimum, where nesterov's weighted mix stays biased") {
    const auto errorOf = [&](DilocoSpec::Outer outer, double lr) {
      auto ns = nodesOf(outer, lr);
      drive(ns.algs, w, alpha, 800);
      double worst = 0;
      for (const auto& a : ns.algs) worst = std::max(worst, relDiff(modelOf(*a), opt));
      return worst;
    };
    const double ed = errorOf(DilocoSpec::Outer::kExactDiffusion, 1.0);
    const double nesterov = errorOf(DilocoSpec::Outer::kNesterov, 0.7);
    INFO("exact_diffusion " << ed << ", nesterov " << nesterov);
    CHECK(ed < 1e-10);
    CHECK(nesterov > 1e-2);
  }
}

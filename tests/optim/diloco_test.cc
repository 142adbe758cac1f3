// DiLoCo over gossip (optim/diloco.h, docs/algorithms.md §29) against references written here
// with plain loops: all-reduce DiLoCo (the mean pseudo-gradient and PyTorch's Nesterov rule) on
// the complete graph, the gossip equations of §29 on a ring, DSGD for outer sgd with lr 1 and one
// inner step, and the closed-form optimum of heterogeneous quadratics for the exact_diffusion
// outer step.
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
using starling::optim::testing::MemoryVisitor;
using starling::optim::testing::randomVec;
using starling::optim::testing::Store;
using starling::optim::testing::Vec;

using namespace diloco_testing;

TEST_CASE("diloco on the complete graph is all-reduce DiLoCo with outer Nesterov", "[diloco]") {
  const size_t n = 4, d = 7;
  const auto fs = problems(n, d, 11);
  const Vec x0 = randomVec(d, 1.0, 99);
  DilocoSpec spec;
  spec.innerSteps = 5;
  spec.outer = DilocoSpec::Outer::kNesterov;
  spec.outerLr = 0.7;
  spec.outerMomentum = 0.9;
  const double alpha = 0.05;
  const int rounds = 12;
  auto ns = makeNodes(fs, spec, x0);
  drive(ns.algs, completeWeights(n), alpha, rounds);
  for (const auto& o : ns.oracles) CHECK(o->calls == rounds * 5);

  // All-reduce DiLoCo: one theta, delta = mean_i (theta - x_i), buf = mu buf + delta,
  // theta -= lr (delta + mu buf) (torch.optim.SGD with nesterov=True).
  Vec theta = x0, buf(d, 0.0);
  for (int r = 0; r < rounds; ++r) {
    Vec delta(d, 0.0);
    for (size_t i = 0; i < n; ++i) {
      const Vec x = innerSteps(fs[i], theta, alpha, 5);
      for (size_t k = 0; k < d; ++k) delta[k] += (theta[k] - x[k]) / static_cast<double>(n);
    }
    for (size_t k = 0; k < d; ++k) {
      buf[k] = 0.9 * buf[k] + delta[k];
      theta[k] -= 0.7 * (delta[k] + 0.9 * buf[k]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    INFO("node " << i);
    CHECK(relDiff(modelOf(*ns.algs[i]), theta) < 1e-12);
  }
}

TEST_CASE("diloco on a ring follows the gossip equations of its outer steps", "[diloco]") {
  const size_t n = 6, d = 5;
  const auto fs = problems(n, d, 21);
  const Vec x0 = randomVec(d, 1.0, 7);
  const double alpha = 0.04;
  const int rounds = 15;
  const uint64_t h = 3;
  const Matrix w = ringWeights(n);
  for (auto outer : {DilocoSpec::Outer::kSgd, DilocoSpec::Outer::kNesterov,
                     DilocoSpec::Outer::kExactDiffusion, DilocoSpec::Outer::kNoloco}) {
    INFO("outer " << dilocoOuterName(outer));
    DilocoSpec spec;
    spec.innerSteps = h;
    spec.outer = outer;
    spec.outerLr = outer == DilocoSpec::Outer::kNesterov ? 0.6 : 0.8;
    spec.outerMomentum = 0.5;
    spec.pull = 0.3;
    auto ns = makeNodes(fs, spec, x0);
    drive(ns.algs, w, alpha, rounds);

    std::vector<Vec> theta(n, x0), m(n, Vec(d, 0.0)), y(n, Vec(d, 0.0));
    const bool ed = outer == DilocoSpec::Outer::kExactDiffusion;
    for (int r = 0; r < rounds; ++r) {
      std::vector<Vec> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = innerSteps(fs[i], theta[i], alpha, h, ed ? &y[i] : nullptr);
      std::vector<Vec> next = theta;
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < d; ++k) {
          double xbar = 0, thetaBar = 0;
          for (size_t j = 0; j < n; ++j) xbar += w[i][j] * x[j][k];
          for (size_t j = 0; j < n; ++j) thetaBar += w[i][j] * theta[j][k];
          if (outer == DilocoSpec::Outer::kNoloco) {
            // NoLoCo: the neighbourhood's mean pseudo-gradient and a pull toward its outer models.
            m[i][k] = spec.outerMomentum * m[i][k] - spec.outerLr * (thetaBar - xbar) -
                      spec.pull * (theta[i][k] - thetaBar);
            next[i][k] = theta[i][k] + m[i][k];
            continue;
          }
          const double delta = theta[i][k] - xbar;
          double u = delta;
          if (outer == DilocoSpec::Outer::kNesterov) {
            m[i][k] = spec.outerMomentum * m[i][k] + delta;
            u = delta + spec.outerMomentum * m[i][k];
          }
          if (ed) y[i][k] += (x[i][k] - xbar) / (2 * alpha * static_cast<double>(h));
          next[i][k] = theta[i][k] - spec.outerLr * u;
        }
      }
      theta = next;
    }
    for (size_t i = 0; i < n; ++i) {
      INFO("node " << i);
      CHECK(relDiff(modelOf(*ns.algs[i]), theta[i]) < 1e-12);
    }
  }
}

TEST_CASE("diloco with outer sgd at lr 1 and one inner step is DSGD, bit for bit", "[diloco]") {
  const size_t n = 5, d = 9;
  const auto fs = problems(n, d, 31);
  const Vec x0 = randomVec(d, 1.0, 3);
  DilocoSpec spec;
  spec.innerSteps = 1;
  spec.outer = DilocoSpec::Outer::kSgd;
  spec.outerLr = 1.0;
  auto ns = makeNodes(fs, spec, x0);
  Nodes dsgd;
  AlgorithmSpec ds;
  ds.kind = AlgorithmKind::kDsgd;
  for (const auto& f : fs) {
    dsgd.oracles.push_back(std::make_unique<QuadraticOracle>(f));
    dsgd.algs.push_back(createAlgorithm<double>(ds, x0, *dsgd.oracles.back()));
  }
  const Matrix w = ringWeights(n);
  drive(ns.algs, w, 0.1, 20);
  drive(dsgd.algs, w, 0.1, 20);
  for (size_t i = 0; i < n; ++i) {
    const Vec a = modelOf(*ns.algs[i]), b = modelOf(*dsgd.algs[i]);
    for (size_t k = 0; k < d; ++k) REQUIRE(a[k] == b[k]);
  }
}

TEST_CASE("the exact_diffusion outer step reaches the optimum where nesterov stays biased",
          "[diloco]") {
  // Eight nodes on a ring, each with its own quadratic, ten inner steps a round.
  const size_t n = 8, d = 6;
  const auto fs = problems(n, d, 41);
  const Vec opt = optimumOf(fs);
  const Vec x0(d, 0.0);
  auto errorOf = [&](DilocoSpec::Outer outer, double lr, uint64_t fragments = 1) {
    DilocoSpec spec;
    spec.innerSteps = 10;
    spec.fragments = fragments;
    spec.outer = outer;
    spec.outerLr = lr;
    auto ns = makeNodes(fs, spec, x0);
    drive(ns.algs, ringWeights(n), 0.05, 600);
    double worst = 0;
    for (const auto& a : ns.algs) worst = std::max(worst, relDiff(modelOf(*a), opt));
    return worst;
  };
  const double ed = errorOf(DilocoSpec::Outer::kExactDiffusion, 1.0);
  const double nesterov = errorOf(DilocoSpec::Outer::kNesterov, 0.7);
  // In two fragments (5 inner steps a round, each fragment exchanged every 10).
  const double edFragments = errorOf(DilocoSpec::Outer::kExactDiffusion, 1.0, 2);
  INFO("exact_diffusion " << ed << " (in 2 fragments " << edFragments << "), nesterov "
                          << nesterov);
  CHECK(ed < 1e-10);
  CHECK(edFragments < 1e-10);
  CHECK(nesterov > 1e-2);
}

TEST_CASE("diloco's compressed differences: exact without loss, and the exact_diffusion outer "
          "step still reaches the optimum through a lossy codec",
          "[diloco]") {
  const size_t n = 6, d = 8;
  const auto fs = problems(n, d, 61);
  const Vec x0 = randomVec(d, 1.0, 8);
  const Matrix w = ringWeights(n);
  // Without loss the reference points are the local models, and the iterates those of the plain
  // message (to rounding: s_i is a running sum).
  // Reference points from 0 (after a restart) or from the common x0 (a run's first start).
  for (auto outer : {DilocoSpec::Outer::kNesterov, DilocoSpec::Outer::kExactDiffusion}) {
    for (bool shared : {false, true}) {
      DilocoSpec spec;
      spec.innerSteps = 3;
      spec.outer = outer;
      auto plain = makeNodes(fs, spec, x0);
      spec.compressedDifferences = true;
      spec.sharedStart = shared;
      auto diff = makeNodes(fs, spec, x0);
      drive(plain.algs, w, 0.05, 20);
      drive(diff.algs, w, 0.05, 20);
      for (size_t i = 0; i < n; ++i) {
        CHECK(relDiff(modelOf(*diff.algs[i]), modelOf(*plain.algs[i])) < 1e-12);
      }
    }
  }
  // Through top-half compression of every message: the optimum of the mean, to 1e-10.
  const Vec opt = optimumOf(fs);
  DilocoSpec spec;
  spec.innerSteps = 5;
  spec.outer = DilocoSpec::Outer::kExactDiffusion;
  spec.outerLr = 0.5;
  spec.compressedDifferences = true;
  auto ns = makeNodes(fs, spec, Vec(d, 0.0));
  drive(ns.algs, w, 0.05, 3000, 0, topHalf);
  double worst = 0;
  for (const auto& a : ns.algs) worst = std::max(worst, relDiff(modelOf(*a), opt));
  INFO("worst rel error " << worst);
  CHECK(worst < 1e-10);
}

TEST_CASE("diloco with fragments follows Streaming DiLoCo's schedule: one fragment a round, "
          "the others keep training", "[diloco]") {
  // Two nodes' worth of checks on a ring of 5: 7 values in 3 fragments of 3, 3 and 1; H = 6, so
  // 2 inner steps a round; nesterov and exact_diffusion.
  const size_t n = 5, d = 7, f = 3, len = 3;
  const uint64_t h = 6;
  const auto fs = problems(n, d, 71);
  const Vec x0 = randomVec(d, 1.0, 9);
  const Matrix w = ringWeights(n);
  const double alpha = 0.04;
  const int rounds = 10;
  for (auto outer : {DilocoSpec::Outer::kNesterov, DilocoSpec::Outer::kExactDiffusion}) {
    INFO("outer " << dilocoOuterName(outer));
    DilocoSpec spec;
    spec.innerSteps = h;
    spec.fragments = f;
    spec.outer = outer;
    spec.outerLr = 0.7;
    spec.outerMomentum = 0.6;
    auto ns = makeNodes(fs, spec, x0);
    REQUIRE(ns.algs[0]->messageSize() == len);
    drive(ns.algs, w, alpha, rounds);
    for (const auto& o : ns.oracles) CHECK(o->calls == rounds * 2);

    const bool ed = outer == DilocoSpec::Outer::kExactDiffusion;
    std::vector<Vec> theta(n, x0), x(n, x0), m(n, Vec(d, 0.0)), y(n, Vec(d, 0.0));
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < n; ++i) x[i] = innerSteps(fs[i], x[i], alpha, h / f, ed ? &y[i] : nullptr);
      const size_t lo = (static_cast<size_t>(r) % f) * len, hi = std::min(d, lo + len);
      std::vector<Vec> next = theta;
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = lo; k < hi; ++k) {
          double xbar = 0;
          for (size_t j = 0; j < n; ++j) xbar += w[i][j] * x[j][k];
          next[i][k] = outerStep(spec, ed, alpha * static_cast<double>(h), theta[i][k], xbar,
                                 x[i][k], m[i][k], y[i][k]);
        }
      }
      theta = next;
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = lo; k < hi; ++k) x[i][k] = theta[i][k];  // the fragment starts again
      }
    }
    for (size_t i = 0; i < n; ++i) {
      INFO("node " << i);
      CHECK(relDiff(modelOf(*ns.algs[i]), theta[i]) < 1e-12);
    }
  }
}

TEST_CASE("diloco with overlap takes the next round's inner steps during the exchange and lands "
          "the outer step on top of them (one-step delay)", "[diloco]") {
  const size_t n = 5, d = 6;
  const uint64_t h = 3;
  const auto fs = problems(n, d, 81);
  const Vec x0 = randomVec(d, 1.0, 10);
  const Matrix w = ringWeights(n);
  const double alpha = 0.04;
  const int rounds = 9;
  for (auto outer : {DilocoSpec::Outer::kNesterov, DilocoSpec::Outer::kExactDiffusion}) {
    INFO("outer " << dilocoOuterName(outer));
    DilocoSpec spec;
    spec.innerSteps = h;
    spec.outer = outer;
    spec.overlap = true;
    auto ns = makeNodes(fs, spec, x0);
    REQUIRE(ns.algs[0]->computesDuringExchange());
    drive(ns.algs, w, alpha, rounds);
    // H steps before the first send, then H during each of the 9 exchanges.
    for (const auto& o : ns.oracles) CHECK(o->calls == static_cast<int>(h) * (rounds + 1));

    const bool ed = outer == DilocoSpec::Outer::kExactDiffusion;
    std::vector<Vec> theta(n, x0), x(n, x0), m(n, Vec(d, 0.0)), y(n, Vec(d, 0.0));
    for (size_t i = 0; i < n; ++i) x[i] = innerSteps(fs[i], x[i], alpha, h, ed ? &y[i] : nullptr);
    for (int r = 0; r < rounds; ++r) {
      const std::vector<Vec> sent = x;
      // The next round's inner steps, during the exchange, with the correction as it stands.
      for (size_t i = 0; i < n; ++i) x[i] = innerSteps(fs[i], x[i], alpha, h, ed ? &y[i] : nullptr);
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < d; ++k) {
          double xbar = 0;
          for (size_t j = 0; j < n; ++j) xbar += w[i][j] * sent[j][k];
          const double next = outerStep(spec, ed, alpha * static_cast<double>(h), theta[i][k],
                                        xbar, sent[i][k], m[i][k], y[i][k]);
          x[i][k] = next + (x[i][k] - sent[i][k]);
          theta[i][k] = next;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      INFO("node " << i);
      CHECK(relDiff(modelOf(*ns.algs[i]), theta[i]) < 1e-12);
    }
  }
}

// DiLoCo's state beyond a round (optim/diloco.h, docs/algorithms.md §29): a checkpoint's round
// trip, and the outer momentum carried across a restart at a membership change.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "diloco_testing.h"
#include "optim/algorithm.h"
#include "optim/diloco.h"

using namespace starling;
using namespace starling::optim;
using namespace diloco_testing;
using starling::optim::testing::MemoryVisitor;
using starling::optim::testing::randomVec;
using starling::optim::testing::Store;
using starling::optim::testing::Vec;

TEST_CASE("diloco's state round-trips through a checkpoint", "[diloco]") {
  const size_t n = 3, d = 4;
  const auto fs = problems(n, d, 51);
  const Vec x0 = randomVec(d, 1.0, 5);
  for (auto outer : {DilocoSpec::Outer::kNesterov, DilocoSpec::Outer::kExactDiffusion}) {
    DilocoSpec spec;
    spec.innerSteps = 4;
    spec.outer = outer;
    auto a = makeNodes(fs, spec, x0);
    drive(a.algs, completeWeights(n), 0.05, 3);
    // Restore every node's state into fresh algorithms and continue both for 4 rounds.
    auto b = makeNodes(fs, spec, randomVec(d, 1.0, 6));
    for (size_t i = 0; i < n; ++i) {
      Store store;
      MemoryVisitor save(store, false);
      a.algs[i]->visitState(save);
      REQUIRE_FALSE(save.failed());
      MemoryVisitor load(store, true);
      b.algs[i]->visitState(load);
      REQUIRE_FALSE(load.failed());
    }
    drive(a.algs, completeWeights(n), 0.05, 4, 3);
    drive(b.algs, completeWeights(n), 0.05, 4, 3);
    std::vector<MethodMetric> ma, mb;
    for (size_t i = 0; i < n; ++i) {
      const Vec x = modelOf(*a.algs[i]), z = modelOf(*b.algs[i]);
      for (size_t k = 0; k < d; ++k) REQUIRE(x[k] == z[k]);
      a.algs[i]->methodMetrics(ma);
      b.algs[i]->methodMetrics(mb);
    }
    REQUIRE(ma.size() == 3 * n);
    for (size_t q = 0; q < ma.size(); ++q) {
      CHECK(ma[q].name == mb[q].name);
      CHECK(ma[q].value == mb[q].value);
    }
    CHECK(ma[0].name == "outer_round");
    CHECK(ma[0].value == 7);
    CHECK(ma[1].name == "inner_steps");
    CHECK(ma[1].value == 28);
  }
}

TEST_CASE("diloco carries its outer momentum across a restart; exact_diffusion's y restarts",
          "[diloco]") {
  // A restart builds the algorithm again from its model (theta) and hands it what the old one
  // carried: with nesterov and noloco, theta and the momentum are all the state between rounds
  // (x = theta), so the restarted nodes go on exactly as nodes that never restarted. Without the
  // momentum they would not.
  const size_t n = 4, d = 5;
  const auto fs = problems(n, d, 81);
  const Vec x0 = randomVec(d, 1.0, 8);
  for (auto outer : {DilocoSpec::Outer::kNesterov, DilocoSpec::Outer::kNoloco}) {
    DilocoSpec spec;
    spec.innerSteps = 3;
    spec.outer = outer;
    spec.outerMomentum = 0.8;
    auto kept = makeNodes(fs, spec, x0);
    auto restarted = makeNodes(fs, spec, x0);
    auto forgot = makeNodes(fs, spec, x0);
    for (auto* ns : {&kept, &restarted, &forgot}) drive(ns->algs, ringWeights(n), 0.05, 3);
    for (size_t i = 0; i < n; ++i) {
      auto* carrier = restarted.algs[i]->capabilities().carry;
      REQUIRE(carrier != nullptr);
      const std::vector<double> momentum = carrier->carried();
      REQUIRE(momentum.size() == d);
      CHECK(std::any_of(momentum.begin(), momentum.end(), [](double v) { return v != 0.0; }));
      const Vec theta = modelOf(*restarted.algs[i]);
      restarted.algs[i] = createDiloco<double>(spec, theta, *restarted.oracles[i]);
      REQUIRE(restarted.algs[i]->capabilities().carry->carry(momentum).isOk());
      forgot.algs[i] = createDiloco<double>(spec, modelOf(*forgot.algs[i]), *forgot.oracles[i]);
    }
    for (auto* ns : {&kept, &restarted, &forgot}) drive(ns->algs, ringWeights(n), 0.05, 3, 3);
    double apart = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const Vec a = modelOf(*kept.algs[i]), b = modelOf(*restarted.algs[i]);
      for (size_t k = 0; k < d; ++k) REQUIRE(a[k] == b[k]);
      apart = std::max(apart, relDiff(modelOf(*forgot.algs[i]), a));
    }
    CHECK(apart > 1e-6);  // the momentum matters
    // What does not fit is refused, and changes nothing.
    auto* carrier = restarted.algs[0]->capabilities().carry;
    const std::vector<double> before = carrier->carried();
    CHECK(carrier->carry(std::vector<double>(d + 1, 1.0)).code() ==
          core::StatusCode::kInvalidArgument);
    CHECK(carrier->carry(std::vector<double>(d, std::nan(""))).code() ==
          core::StatusCode::kInvalidArgument);
    CHECK(carrier->carried() == before);
  }
  // sgd keeps no momentum; exact_diffusion's y must restart at zero (sum_i y_i = 0 over the new
  // membership): nothing to carry.
  for (auto outer : {DilocoSpec::Outer::kSgd, DilocoSpec::Outer::kExactDiffusion}) {
    DilocoSpec spec;
    spec.outer = outer;
    auto ns = makeNodes(fs, spec, x0);
    CHECK(ns.algs[0]->capabilities().carry == nullptr);
  }
}

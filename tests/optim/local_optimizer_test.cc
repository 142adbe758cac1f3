// Local optimizers and LEGW (docs/algorithms.md §20-§21), each against a reference written here
// from the equations, never by calling the code under test. The other methods:
// training_methods_test.cc.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/state.h"
#include "optim/adascale.h"
#include "optim/adasum.h"
#include "optim/codistillation.h"
#include "optim/leader.h"
#include "optim/local_optimizer.h"
#include "optim/step_size.h"
#include "methods_testing.h"

namespace starling::optim {
namespace {

using Kind = LocalOptimizerSpec::Kind;
using testing::Vec;
using testing::checkClose;
using testing::randomVec;
using testing::join;
using testing::MemoryVisitor;
using testing::split;
using testing::Store;



// A gradient that depends on the point and the step: a separable quadratic plus a deterministic
// wobble, so that the moments see changing values.
Vec testGradient(const Vec& x, int step) {
  Vec g(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    const double kk = static_cast<double>(k);
    g[k] = (0.5 + 0.25 * kk) * x[k] - 0.3 * (kk - 2.0) + 0.2 * std::sin(3.0 * step + kk);
  }
  return g;
}


// Runs `steps` steps x <- x - lr u with the optimizer under test, from x0.
template <typename T>
std::vector<T> runOptimizer(const LocalOptimizerSpec& spec, const std::vector<size_t>& sizes,
                            const Vec& x0, double lr, int steps) {
  auto opt = LocalOptimizer<T>::create(spec, ParameterLayout{sizes}, x0.size());
  REQUIRE(opt.isOk());
  std::vector<T> x(x0.begin(), x0.end()), g(x0.size()), u(x0.size());
  for (int t = 1; t <= steps; ++t) {
    const Vec gd = testGradient(Vec(x.begin(), x.end()), t);
    std::copy(gd.begin(), gd.end(), g.begin());
    opt->direction(x, g, u);
    for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<T>(x[k] - lr * u[k]);
  }
  CHECK(opt->steps() == static_cast<uint64_t>(steps));
  return x;
}


template <typename T>
Vec widen(const std::vector<T>& v) {
  return Vec(v.begin(), v.end());
}

const std::vector<size_t> kSizes{3, 2, 4};

// ---------------------------------------------------------------- local optimizers

TEST_CASE("sgd, heavy-ball and Nesterov momentum against a hand-written loop", "[optim][methods]") {
  const Vec x0 = randomVec(9, 1.0, 11);
  const double lr = 0.05, mu = 0.9, wd = 0.01;
  for (int mode = 0; mode < 3; ++mode) {
    INFO("mode " << mode);
    // Reference: b_t = mu b_{t-1} + g_t (b_0 = 0); heavy ball steps along b_t, Nesterov along
    // g_t + mu b_t; decoupled decay adds wd x; plain SGD steps along g_t + wd x.
    Vec x = x0, b(9, 0.0);
    for (int t = 1; t <= 5; ++t) {
      const Vec g = testGradient(x, t);
      for (size_t k = 0; k < 9; ++k) {
        double step;
        if (mode == 0) {
          step = g[k];
        } else {
          b[k] = mu * b[k] + g[k];
          step = mode == 1 ? b[k] : g[k] + mu * b[k];
        }
        x[k] -= lr * (step + wd * x[k]);
      }
    }
    LocalOptimizerSpec spec;
    spec.kind = mode == 0 ? Kind::kSgd : Kind::kMomentum;
    spec.momentum = mu;
    spec.nesterov = mode == 2;
    spec.weightDecay = wd;
    checkClose(widen(runOptimizer<double>(spec, kSizes, x0, lr, 5)), x, 1e-13);
    checkClose(widen(runOptimizer<float>(spec, kSizes, x0, lr, 5)), x, 2e-5);
  }
}

// Adam (Kingma & Ba, Algorithm 1) with AdamW's decoupled decay, or LAMB (You et al., Algorithm 2)
// tensor by tensor, written on separate tensors.
Vec adamLambReference(bool lamb, bool biasCorrection, const Vec& x0, double lr, double b1,
                      double b2, double eps, double wd, int steps) {
  std::vector<Vec> x = split(x0, kSizes);
  std::vector<Vec> m, v;
  for (const auto& t : x) {
    m.emplace_back(t.size(), 0.0);
    v.emplace_back(t.size(), 0.0);
  }
  for (int t = 1; t <= steps; ++t) {
    const std::vector<Vec> g = split(testGradient(join(x), t), kSizes);
    for (size_t l = 0; l < x.size(); ++l) {
      Vec r(x[l].size());
      for (size_t k = 0; k < r.size(); ++k) {
        m[l][k] = b1 * m[l][k] + (1 - b1) * g[l][k];
        v[l][k] = b2 * v[l][k] + (1 - b2) * g[l][k] * g[l][k];
        const double mhat = biasCorrection ? m[l][k] / (1 - std::pow(b1, t)) : m[l][k];
        const double vhat = biasCorrection ? v[l][k] / (1 - std::pow(b2, t)) : v[l][k];
        r[k] = mhat / (std::sqrt(vhat) + eps) + wd * x[l][k];
      }
      double trust = 1.0;
      if (lamb) {
        double xn = 0, rn = 0;
        for (size_t k = 0; k < r.size(); ++k) {
          xn += x[l][k] * x[l][k];
          rn += r[k] * r[k];
        }
        xn = std::sqrt(xn);
        rn = std::sqrt(rn);
        trust = (xn > 0 && rn > 0) ? xn / rn : 1.0;
      }
      for (size_t k = 0; k < r.size(); ++k) x[l][k] -= lr * trust * r[k];
    }
  }
  return join(x);
}

TEST_CASE("Adam and LAMB steps against the papers' equations on three tensors",
          "[optim][methods]") {
  const Vec x0 = randomVec(9, 1.0, 12);
  for (bool lamb : {false, true}) {
    for (bool bias : {true, false}) {
      INFO((lamb ? "lamb" : "adam") << ", bias correction " << bias);
      LocalOptimizerSpec spec;
      spec.kind = lamb ? Kind::kLamb : Kind::kAdam;
      spec.beta1 = 0.8;
      spec.beta2 = 0.95;
      spec.eps = 1e-6;
      spec.weightDecay = 0.02;
      spec.biasCorrection = bias;
      const double lr = 0.01;
      const Vec want = adamLambReference(lamb, bias, x0, lr, 0.8, 0.95, 1e-6, 0.02, 6);
      checkClose(widen(runOptimizer<double>(spec, kSizes, x0, lr, 6)), want, 1e-12);
      checkClose(widen(runOptimizer<float>(spec, kSizes, x0, lr, 6)), want, 1e-5);
    }
  }
}

TEST_CASE("LAMB's trust ratio is per tensor, and 1 where a norm is zero", "[optim][methods]") {
  LocalOptimizerSpec spec;
  spec.kind = Kind::kLamb;
  auto opt = LocalOptimizer<double>::create(spec, ParameterLayout{{2, 2, 2}}, 6);
  REQUIRE(opt.isOk());
  // Tensor 0: zero model, nonzero gradient. Tensor 1: nonzero model, zero gradient (r = 0).
  // Tensor 2: both nonzero.
  const Vec x{0, 0, 3, 4, 1, 0};
  const Vec g{1, -2, 0, 0, 0.5, 0.5};
  Vec u(6);
  opt->direction(x, g, u);
  // First step with bias correction: m^ = g, v^ = g^2, so r = g / (|g| + eps) ~ sign(g).
  const double eps = spec.eps;
  CHECK(u[0] == Approx(1 / (1 + eps)));
  CHECK(u[1] == Approx(-2 / (2 + eps)));
  CHECK(u[2] == 0.0);
  CHECK(u[3] == 0.0);
  const double rn = std::sqrt(2.0) * 0.5 / (0.5 + eps);  // ||r_2||
  CHECK(u[4] == Approx(1.0 / rn * 0.5 / (0.5 + eps)));
  CHECK(u[5] == Approx(1.0 / rn * 0.5 / (0.5 + eps)));
  const auto trust = opt->lastTrustRatios();
  REQUIRE(trust.size() == 3);
  CHECK(trust[0] == 1.0);
  CHECK(trust[1] == 1.0);
  CHECK(trust[2] == Approx(1.0 / rn));
  for (double v : u) CHECK(std::isfinite(v));
}

TEST_CASE("local optimizer validation", "[optim][methods]") {
  CHECK(checkParameterLayout(ParameterLayout{{3, 4}}, 7).isOk());
  CHECK(checkParameterLayout(ParameterLayout{{3, 4}}, 8).code() == StatusCode::kInvalidArgument);
  CHECK(!checkParameterLayout(ParameterLayout{}, 0).isOk());
  CHECK(!checkParameterLayout(ParameterLayout{{3, 0, 4}}, 7).isOk());
  CHECK(LocalOptimizer<float>::create({}, ParameterLayout{{3, 4}}, 8).status().code() ==
        StatusCode::kInvalidArgument);

  const auto bad = [](auto edit) {
    LocalOptimizerSpec s;
    s.kind = Kind::kLamb;
    edit(s);
    return checkLocalOptimizerSpec(s);
  };
  CHECK(bad([](LocalOptimizerSpec&) {}).isOk());
  CHECK(!bad([](LocalOptimizerSpec& s) { s.beta1 = 1.0; }).isOk());
  CHECK(!bad([](LocalOptimizerSpec& s) { s.beta2 = -0.1; }).isOk());
  CHECK(!bad([](LocalOptimizerSpec& s) { s.eps = 0.0; }).isOk());
  CHECK(!bad([](LocalOptimizerSpec& s) { s.weightDecay = -1.0; }).isOk());
  CHECK(!bad([](LocalOptimizerSpec& s) {
           s.kind = Kind::kMomentum;
           s.momentum = 1.0;
         }).isOk());
  // Betas do not matter to momentum.
  CHECK(bad([](LocalOptimizerSpec& s) {
          s.kind = Kind::kMomentum;
          s.beta1 = 7.0;
        }).isOk());
}

TEST_CASE("mlpLayout is W_l then b_l per layer", "[optim][methods]") {
  const ParameterLayout layout = mlpLayout({784, 64, 10});
  CHECK(layout.sizes == std::vector<size_t>{784 * 64, 64, 64 * 10, 10});
  CHECK(layout.dim() == 784 * 64 + 64 + 64 * 10 + 10);
  CHECK(ParameterLayout::single(5).sizes == std::vector<size_t>{5});
}

// A stateful fake oracle: the test gradient at x, with its call counter as the step.
class FakeOracle final : public GradientOracle<float> {
 public:
  void gradient(std::span<const float> x, std::span<float> out) override {
    const Vec g = testGradient(Vec(x.begin(), x.end()), static_cast<int>(++calls));
    std::copy(g.begin(), g.end(), out.begin());
  }
  void visitState(core::StateVisitor& v) override { v.scalar("calls", calls); }
  uint64_t calls = 0;
};

TEST_CASE("LocalOptimizerOracle hands out the optimizer's direction and checkpoints",
          "[optim][methods]") {
  LocalOptimizerSpec spec;
  spec.kind = Kind::kLamb;
  spec.weightDecay = 0.01;
  const ParameterLayout layout{kSizes};
  const Vec x0 = randomVec(9, 1.0, 13);
  std::vector<float> x(x0.begin(), x0.end());

  FakeOracle inner;
  auto made = LocalOptimizer<float>::create(spec, layout, 9);
  REQUIRE(made.isOk());
  LocalOptimizerOracle<float> oracle(inner, std::move(made).value());

  // The same steps by hand: the fake's gradient, then an optimizer of our own.
  FakeOracle innerRef;
  auto ref = LocalOptimizer<float>::create(spec, layout, 9);
  REQUIRE(ref.isOk());
  std::vector<float> u(9), g(9), uRef(9);
  for (int t = 0; t < 3; ++t) {
    oracle.gradient(x, u);
    innerRef.gradient(x, g);
    ref->direction(x, g, uRef);
    CHECK(u == uRef);
    for (size_t k = 0; k < 9; ++k) x[k] -= 0.1f * u[k];
  }
  CHECK(oracle.optimizer().steps() == 3);

  Store store;
  MemoryVisitor saver(store, false);
  oracle.visitState(saver);
  REQUIRE(saver.status().isOk());
  CHECK(store.words.count("inner/calls") == 1);
  CHECK(store.texts.at("local_optimizer/kind") == "lamb");

  // Three more steps from here, then the same three from a fresh wrapper loaded from the store.
  const std::vector<float> xSaved = x;
  std::vector<std::vector<float>> after;
  for (int t = 0; t < 3; ++t) {
    oracle.gradient(x, u);
    after.push_back(u);
    for (size_t k = 0; k < 9; ++k) x[k] -= 0.1f * u[k];
  }
  FakeOracle inner2;
  LocalOptimizerOracle<float> loaded(inner2,
                                     LocalOptimizer<float>::create(spec, layout, 9).value());
  MemoryVisitor loader(store, true);
  loaded.visitState(loader);
  REQUIRE(loader.status().isOk());
  CHECK(loaded.optimizer().steps() == 3);
  x = xSaved;
  for (int t = 0; t < 3; ++t) {
    loaded.gradient(x, u);
    CHECK(u == after[static_cast<size_t>(t)]);
    for (size_t k = 0; k < 9; ++k) x[k] -= 0.1f * u[k];
  }

  // A checkpoint of another kind does not load.
  LocalOptimizerSpec adam = spec;
  adam.kind = Kind::kAdam;
  auto other = LocalOptimizer<float>::create(adam, layout, 9).value();
  MemoryVisitor loader2(store, true);
  core::StateVisitor::Scope scope(loader2, "local_optimizer");
  other.visitState(loader2);
  CHECK(!loader2.status().isOk());
}

// ---------------------------------------------------------------- LEGW

TEST_CASE("LEGW: square-root peak, warm-up lengthened in epochs, then the base schedule",
          "[optim][methods]") {
  StepSizeSchedule s;
  s.kind = StepSizeSchedule::Kind::kLegw;
  s.baseLr = 0.1;
  s.baseBatch = 64;
  s.batch = 256;  // k = 4: peak 0.2, warm-up 2 * 4 epochs of 10 rounds = 80 rounds
  s.warmupEpochs = 2;
  s.roundsPerEpoch = 10;
  REQUIRE(s.check().isOk());
  CHECK(s.legwPeak() == Approx(0.2));
  CHECK(s.legwWarmupRounds() == 80);
  CHECK(s.at(0) == Approx(0.2 / 80));
  CHECK(s.at(39) == Approx(0.1));
  CHECK(s.at(79) == Approx(0.2));
  CHECK(s.at(80) == Approx(0.2));
  CHECK(s.at(100000) == Approx(0.2));

  s.decay = StepSizeSchedule::Kind::kStep;  // halve every 30 rounds after warm-up
  s.every = 30;
  s.factor = 0.5;
  REQUIRE(s.check().isOk());
  CHECK(s.at(79) == Approx(0.2));
  CHECK(s.at(109) == Approx(0.2));
  CHECK(s.at(110) == Approx(0.1));
  CHECK(s.at(140) == Approx(0.05));

  s.decay = StepSizeSchedule::Kind::kInverseTime;
  s.tau = 10;
  CHECK(s.at(80) == Approx(0.2));
  CHECK(s.at(90) == Approx(0.1));

  // k = 1.5: peak 0.1 sqrt(1.5), warm-up round(2 * 1.5 * 10) = 30 rounds.
  s.decay = StepSizeSchedule::Kind::kConstant;
  s.batch = 96;
  CHECK(s.legwWarmupRounds() == 30);
  CHECK(s.at(14) == Approx(0.1 * std::sqrt(1.5) * 15 / 30));
  CHECK(s.at(30) == Approx(0.1 * std::sqrt(1.5)));
  // No warm-up: the peak from round 0.
  s.warmupEpochs = 0;
  CHECK(s.at(0) == Approx(0.1 * std::sqrt(1.5)));

  const auto bad = [&](auto edit) {
    StepSizeSchedule b = s;
    edit(b);
    return b.check();
  };
  CHECK(!bad([](StepSizeSchedule& b) { b.decay = StepSizeSchedule::Kind::kLegw; }).isOk());
  CHECK(!bad([](StepSizeSchedule& b) { b.baseBatch = 0; }).isOk());
  CHECK(!bad([](StepSizeSchedule& b) { b.batch = -1; }).isOk());
  CHECK(!bad([](StepSizeSchedule& b) { b.warmupEpochs = -1; }).isOk());
  CHECK(!bad([](StepSizeSchedule& b) { b.roundsPerEpoch = 0; }).isOk());
  CHECK(!bad([](StepSizeSchedule& b) {
           b.decay = StepSizeSchedule::Kind::kStep;
           b.every = 0;
         }).isOk());

  // The other kinds are as before.
  StepSizeSchedule c;
  c.value = 0.3;
  CHECK(c.at(7) == 0.3);
  c.kind = StepSizeSchedule::Kind::kStep;
  c.every = 5;
  c.factor = 0.5;
  CHECK(c.at(10) == Approx(0.075));
  c.kind = StepSizeSchedule::Kind::kInverseTime;
  c.tau = 2;
  CHECK(c.at(2) == Approx(0.15));
  CHECK(c.check().isOk());
}

// ---------------------------------------------------------------- AdaScale

}  // namespace
}  // namespace starling::optim

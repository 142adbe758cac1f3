// The training methods of docs/algorithms.md §20-§25 (local optimizers, LEGW, AdaScale, Adasum,
// Leader SGD, codistillation), each against a reference written here from the equations, never
// by calling the code under test.
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

namespace starling::optim {
namespace {

using Kind = LocalOptimizerSpec::Kind;
using Vec = std::vector<double>;

// A state store in memory: a saving visitor fills it, a loading one reads it back, checking the
// names and the sizes the object asks for.
struct Store {
  std::map<std::string, std::vector<double>> reals;  // floats widened (exactly)
  std::map<std::string, std::vector<uint64_t>> words;
  std::map<std::string, std::string> texts;
};

class MemoryVisitor final : public core::StateVisitor {
 public:
  MemoryVisitor(Store& store, bool loading) : store_(store), loading_(loading) {}
  bool loading() const override { return loading_; }
  void values(std::string_view n, std::span<float> v) override { fixedValues(n, v); }
  void values(std::string_view n, std::span<double> v) override { fixedValues(n, v); }
  void sized(std::string_view n, std::vector<float>& v) override { sizedValues(n, v); }
  void sized(std::string_view n, std::vector<double>& v) override { sizedValues(n, v); }
  void sized(std::string_view n, std::vector<uint64_t>& v) override {
    if (failed()) return;
    if (!loading_) {
      store_.words[qualified(n)] = v;
    } else if (auto it = store_.words.find(qualified(n)); it != store_.words.end()) {
      v = it->second;
    } else {
      fail("missing " + qualified(n));
    }
  }
  void scalar(std::string_view n, uint64_t& v) override {
    std::vector<uint64_t> w{v};
    sized(n, w);
    if (loading_ && !failed()) {
      if (w.size() != 1) return fail("not a scalar: " + qualified(n));
      v = w[0];
    }
  }
  void scalar(std::string_view n, double& v) override { fixedValues(n, std::span<double>(&v, 1)); }
  void text(std::string_view n, std::string& s) override {
    if (failed()) return;
    if (!loading_) {
      store_.texts[qualified(n)] = s;
    } else if (auto it = store_.texts.find(qualified(n)); it != store_.texts.end()) {
      s = it->second;
    } else {
      fail("missing " + qualified(n));
    }
  }
  using core::StateVisitor::scalar;

 private:
  template <typename E>
  void fixedValues(std::string_view n, std::span<E> v) {
    if (failed()) return;
    if (!loading_) {
      store_.reals[qualified(n)].assign(v.begin(), v.end());
      return;
    }
    auto it = store_.reals.find(qualified(n));
    if (it == store_.reals.end()) return fail("missing " + qualified(n));
    if (it->second.size() != v.size()) return fail("size of " + qualified(n));
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<E>(it->second[k]);
  }
  template <typename E>
  void sizedValues(std::string_view n, std::vector<E>& v) {
    if (failed()) return;
    if (!loading_) {
      store_.reals[qualified(n)].assign(v.begin(), v.end());
      return;
    }
    auto it = store_.reals.find(qualified(n));
    if (it == store_.reals.end()) return fail("missing " + qualified(n));
    v.assign(it->second.begin(), it->second.end());
  }

  Store& store_;
  bool loading_;
};

Vec randomVec(size_t d, double scale, uint64_t seed) {
  core::Rng rng(seed);
  Vec v(d);
  for (double& x : v) x = scale * rng.normal();
  return v;
}

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

// Splits a flat vector into tensors of the given sizes (the references work on tensors).
std::vector<Vec> split(const Vec& flat, const std::vector<size_t>& sizes) {
  std::vector<Vec> out;
  size_t at = 0;
  for (size_t s : sizes) {
    out.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(at),
                     flat.begin() + static_cast<std::ptrdiff_t>(at + s));
    at += s;
  }
  return out;
}
Vec join(const std::vector<Vec>& tensors) {
  Vec out;
  for (const auto& t : tensors) out.insert(out.end(), t.begin(), t.end());
  return out;
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

void checkClose(const Vec& got, const Vec& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("k = " << k);
    CHECK(got[k] == Approx(want[k]).epsilon(rel).margin(rel));
  }
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

std::vector<std::span<const double>> spans(const std::vector<Vec>& vs) {
  return std::vector<std::span<const double>>(vs.begin(), vs.end());
}

TEST_CASE("AdaScale's gain is 1 for identical gradients", "[optim][methods]") {
  const Vec g = randomVec(100, 1.0, 21);
  const std::vector<Vec> same(8, g);
  const AdaScaleSample s = adascaleSample<double>(spans(same));
  CHECK(s.variance == 0.0);
  CHECK(adascaleGain(s, 8.0) == 1.0);
  std::vector<std::vector<float>> samef(5, std::vector<float>(g.begin(), g.end()));
  std::vector<std::span<const float>> sf(samef.begin(), samef.end());
  CHECK(adascaleGain(adascaleSample<float>(sf), 5.0) == 1.0);
}

TEST_CASE("AdaScale's gain tends to S for pure zero-mean noise, and its estimates are unbiased",
          "[optim][methods]") {
  // k gradients of d independent N(0, s^2) entries: sigma^2 = d s^2, mu^2 = 0. The estimate
  // mu^2^ = (1/(k(k-1))) sum_{c != e} g_c.g_e has mean 0 and standard deviation
  // s^2 sqrt(2 d / (k (k - 1))); r >= S / (1 + S mu^2^ / sigma^2^).
  const size_t d = 16384, k = 64;
  const double s2 = 0.25, scale = 8.0;
  core::Rng rng(22);
  std::vector<Vec> gs(k, Vec(d));
  for (auto& g : gs) {
    for (double& v : g) v = std::sqrt(s2) * rng.normal();
  }
  const AdaScaleSample est = adascaleSample<double>(spans(gs));
  const double sd = s2 * std::sqrt(2.0 * d / (k * (k - 1.0)));
  CHECK(std::abs(est.squaredMean) < 5 * sd);
  // sigma^2^ is a mean of d k chi-square terms: relative sd about sqrt(2 / (d k)).
  CHECK(est.variance == Approx(d * s2).epsilon(5 * std::sqrt(2.0 / (d * k))));
  const double r = adascaleGain(est, scale);
  const double lower = scale / (1 + scale * 5 * sd / (0.95 * d * s2));
  CHECK(r <= scale);
  CHECK(r >= lower);
  CHECK(lower > 0.99 * scale);

  // With a mean: g_c = mu + noise. mu^2^ is unbiased for ||mu||^2 within its noise
  // (sd of the cross term 2 mu.gbar_noise: 2 ||mu|| s / sqrt(k), plus the pure-noise part).
  const Vec mu = randomVec(d, 0.05, 23);
  double mu2 = 0;
  for (double v : mu) mu2 += v * v;
  for (auto& g : gs) {
    for (size_t j = 0; j < d; ++j) g[j] += mu[j];
  }
  const AdaScaleSample est2 = adascaleSample<double>(spans(gs));
  const double sd2 = sd + 2 * std::sqrt(mu2 * s2 / k);
  CHECK(std::abs(est2.squaredMean - mu2) < 5 * sd2);
  CHECK(est2.variance == Approx(est.variance).epsilon(1e-9));  // a shift leaves the spread
  // And the moments form gives the same estimates.
  double a = 0, b = 0;
  Vec mean(d, 0.0);
  for (const auto& g : gs) {
    for (size_t j = 0; j < d; ++j) {
      a += g[j] * g[j] / k;
      mean[j] += g[j] / k;
    }
  }
  for (double v : mean) b += v * v;
  const AdaScaleSample fromMoments = adascaleSampleFromMoments(a, b, static_cast<double>(k));
  CHECK(fromMoments.variance == Approx(est2.variance).epsilon(1e-9));
  CHECK(fromMoments.squaredMean == Approx(est2.squaredMean).epsilon(1e-6));
  // The gain by the formula, between 1 and S.
  const double v = est2.variance, m = est2.squaredMean;
  CHECK(adascaleGain(est2, scale) == Approx((v + m) / (v / scale + m)));
}

TEST_CASE("AdaScale's gain clamps, and tau accumulates the gains", "[optim][methods]") {
  CHECK(adascaleGain({3.0, 1.0}, 4.0) == Approx(16.0 / 7.0));
  CHECK(adascaleGain({3.0, -1.0}, 4.0) == 4.0);  // mu^2 clamped at 0
  CHECK(adascaleGain({-3.0, 1.0}, 4.0) == 1.0);  // no variance
  CHECK(adascaleGain({0.0, 0.0}, 4.0) == 1.0);
  CHECK(adascaleGain({3.0, 1.0}, 1.0) == 1.0);

  AdaScaleSpec spec;
  spec.scale = 4.0;
  spec.smoothing = 0.0;
  auto ada = AdaScale::create(spec);
  REQUIRE(ada.isOk());
  StepSizeSchedule sched;
  sched.kind = StepSizeSchedule::Kind::kStep;
  sched.value = 1.0;
  sched.every = 5;
  sched.factor = 0.5;
  // r = 16/7 every step: tau_t = 16 t / 7 = 0, 2.29, 4.57, 6.86, 9.14, 11.43.
  const double r = 16.0 / 7.0;
  const double lr[] = {1.0, 1.0, 1.0, 0.5, 0.5, 0.25};
  for (int t = 0; t < 6; ++t) {
    INFO("t = " << t);
    const AdaScale::Step st = ada->step({3.0, 1.0}, sched);
    CHECK(st.gain == Approx(r));
    CHECK(st.tau == Approx(t * r));
    CHECK(st.stepSize == Approx(r * lr[t]));
  }
  CHECK(ada->tau() == Approx(6 * r));
  CHECK(ada->steps() == 6);

  // Debiased smoothing with theta = 0.5: after samples s1, s2 the estimate is
  // (0.25 s1 + 0.5 s2) / 0.75.
  spec.smoothing = 0.5;
  auto smooth = AdaScale::create(spec).value();
  smooth.step({3.0, 1.0}, sched);
  CHECK(smooth.smoothed().variance == Approx(3.0));
  const AdaScale::Step st = smooth.step({6.0, 0.5}, sched);
  const double v = (0.25 * 3 + 0.5 * 6) / 0.75, m = (0.25 * 1 + 0.5 * 0.5) / 0.75;
  CHECK(st.gain == Approx((v + m) / (v / 4 + m)));
  // A non-finite sample leaves the estimates.
  smooth.step({std::nan(""), 1.0}, sched);
  CHECK(smooth.smoothed().variance == Approx(v));

  // Checkpoint round trip.
  Store store;
  MemoryVisitor saver(store, false);
  smooth.visitState(saver);
  auto copy = AdaScale::create(spec).value();
  MemoryVisitor loader(store, true);
  copy.visitState(loader);
  REQUIRE(loader.status().isOk());
  const AdaScale::Step a1 = smooth.step({2.0, 2.0}, sched), a2 = copy.step({2.0, 2.0}, sched);
  CHECK(a1.gain == a2.gain);
  CHECK(a1.tau == a2.tau);
  CHECK(a1.stepSize == a2.stepSize);

  // Default smoothing and validation.
  AdaScaleSpec dflt;
  dflt.scale = 8;
  CHECK(AdaScale::create(dflt)->smoothing() == Approx(0.992));
  dflt.scale = 0.5;
  CHECK(!AdaScale::create(dflt).isOk());
  dflt.scale = 2;
  dflt.smoothing = 1.0;
  CHECK(!checkAdaScaleSpec(dflt).isOk());
}

// ---------------------------------------------------------------- Adasum

// Adasum of two tensors, as the paper writes it.
Vec adasumRef(const Vec& a, const Vec& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    ab += a[k] * b[k];
    aa += a[k] * a[k];
    bb += b[k] * b[k];
  }
  Vec out(a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    out[k] = (aa > 0 ? 1 - ab / (2 * aa) : 1) * a[k] + (bb > 0 ? 1 - ab / (2 * bb) : 1) * b[k];
  }
  return out;
}

Vec adasum(const Vec& a, const Vec& b) {
  Vec out(a.size());
  adasumPair<double>(a, b, out);
  return out;
}

TEST_CASE("Adasum identities", "[optim][methods]") {
  const Vec a{1, 2, 0, -1}, b{2, -1, 3, 0};  // a.b = 0
  CHECK(adasum(a, b) == Vec{3, 1, 3, -1});
  CHECK(adasum(a, a) == a);
  const Vec minusA{-1, -2, 0, 1};
  CHECK(adasum(a, minusA) == Vec{0, 0, 0, 0});
  const Vec zero(4, 0.0);
  CHECK(adasum(a, zero) == a);
  CHECK(adasum(zero, b) == b);
  CHECK(adasum(zero, zero) == zero);
  // Tiny vectors are not treated as zero (no absolute threshold).
  const Vec tiny{1e-6, 0, 0, 0};
  CHECK(adasum(tiny, tiny)[0] == Approx(1e-6));
  // In general, the paper's formula.
  const Vec c = randomVec(4, 1.0, 31), e = randomVec(4, 1.0, 32);
  checkClose(adasum(c, e), adasumRef(c, e), 1e-14);
  // In place.
  Vec inPlace = c;
  adasumPair<double>(inPlace, e, inPlace);
  CHECK(inPlace == adasum(c, e));
  // float.
  const std::vector<float> af{1, 2, 0, -1}, bf{2, -1, 3, 0};
  std::vector<float> of(4);
  adasumPair<float>(af, bf, of);
  CHECK(of == std::vector<float>{3, 1, 3, -1});
}

TEST_CASE("Adasum per layer: each tensor gets its own coefficients", "[optim][methods]") {
  // Tensor 0: orthogonal parts (sum); tensor 1: identical parts (the vector).
  const Vec a{1, 0, 0, 2, 3, 4}, b{0, 5, 0, 2, 3, 4};
  const ParameterLayout layout{{3, 3}};
  Vec out(6);
  adasumPair<double>(layout, a, b, out);
  CHECK(out == Vec{1, 5, 0, 2, 3, 4});
  // As one tensor the coefficients mix: a.b = 29, not the per-layer result.
  const Vec whole = adasum(a, b);
  checkClose(whole, adasumRef(a, b), 1e-14);
  CHECK(whole != out);
  const auto [ca, cb] = adasumCoefficients(29.0, 30.0, 54.0);
  CHECK(ca == Approx(1 - 29.0 / 60));
  CHECK(cb == Approx(1 - 29.0 / 108));
}

TEST_CASE("Adasum of many vectors: a binary tree in the order given", "[optim][methods]") {
  const ParameterLayout layout{{2, 3}};
  std::vector<Vec> vs;
  for (uint64_t s = 0; s < 7; ++s) vs.push_back(randomVec(5, 1.0, 40 + s));
  const auto combine = [&](size_t n) {
    Vec out(5);
    const std::vector<std::span<const double>> in(vs.begin(), vs.begin() + static_cast<long>(n));
    adasumCombine<double>(in, layout, out);
    return out;
  };
  const auto ref = [&](const Vec& a, const Vec& b) {  // per layer
    const auto ta = split(a, layout.sizes), tb = split(b, layout.sizes);
    return join({adasumRef(ta[0], tb[0]), adasumRef(ta[1], tb[1])});
  };
  CHECK(combine(1) == vs[0]);
  checkClose(combine(2), ref(vs[0], vs[1]), 1e-14);
  checkClose(combine(3), ref(ref(vs[0], vs[1]), vs[2]), 1e-14);
  checkClose(combine(4), ref(ref(vs[0], vs[1]), ref(vs[2], vs[3])), 1e-14);
  // 5: ((01)(23)) then 4; 7: ((01)(23)) with ((45)6).
  checkClose(combine(5), ref(ref(ref(vs[0], vs[1]), ref(vs[2], vs[3])), vs[4]), 1e-14);
  checkClose(combine(7),
             ref(ref(ref(vs[0], vs[1]), ref(vs[2], vs[3])), ref(ref(vs[4], vs[5]), vs[6])), 1e-14);

  // Eight identical vectors give the vector; eight orthonormal ones their sum (squared norm 8).
  const Vec v = vs[0];
  std::vector<std::span<const double>> same(8, std::span<const double>(v));
  Vec out(5);
  adasumCombine<double>(same, ParameterLayout::single(5), out);
  checkClose(out, v, 1e-15);
  std::vector<Vec> basis(8, Vec(8, 0.0));
  for (size_t i = 0; i < 8; ++i) basis[i][i] = 1.0;
  Vec sum(8);
  adasumCombine<double>(spans(basis), ParameterLayout::single(8), sum);
  CHECK(sum == Vec(8, 1.0));
}

// ---------------------------------------------------------------- Leader SGD

TEST_CASE("Leader SGD: the proximal direction, the pull and the choice of leader",
          "[optim][methods]") {
  LeaderSpec spec;  // p = 0.1, tau_L = 4, tau_G = 16
  REQUIRE(checkLeaderSpec(spec).isOk());
  const double eta = 0.05;
  const LeaderStrengths lam = leaderProximalStrengths(spec, eta);
  CHECK(lam.local == Approx(0.1 / (4 * 0.05)));
  CHECK(lam.global == Approx(0.1 / (16 * 0.05)));
  const Vec x{1, 2, 3}, u{0.5, -1, 0}, local{0, 0, 0}, global{2, 2, 2};
  Vec out(3);
  leaderDirection<double>(x, u, local, global, lam.local, lam.global, out);
  // By hand: u + 0.5 (x - 0) + 0.125 (x - 2).
  checkClose(out, Vec{0.5 + 0.5 - 0.125, -1 + 1 + 0, 0 + 1.5 + 0.125}, 1e-15);
  // The step moves x by p/tau of its distance to each leader: x - eta u - 0.025 (x - xL) -
  // 0.00625 (x - xG).
  for (size_t k = 0; k < 3; ++k) {
    CHECK(x[k] - eta * out[k] ==
          Approx(x[k] - eta * u[k] - 0.025 * (x[k] - local[k]) - 0.00625 * (x[k] - global[k])));
  }
  // No leader yet: the direction is u.
  leaderDirection<double>(x, u, {}, {}, lam.local, lam.global, out);
  CHECK(out == u);
  // Pulling: (1 - c) x + c leader.
  Vec y = x;
  leaderPull<double>(y, global, 0.1);
  checkClose(y, Vec{1.1, 2.0, 2.9}, 1e-15);
  leaderPull<double>(y, global, 1.0);
  CHECK(y == global);

  // The leader: lowest running loss, ties to the lowest rank, NaN never.
  const LeaderCandidate cs[] = {{5, 0.4}, {2, 0.3}, {7, std::nan("")}, {1, 0.3}, {3, 0.9}};
  CHECK(chooseLeader(cs) == 3);  // rank 1
  const LeaderCandidate nan[] = {{0, std::nan("")}};
  CHECK(chooseLeader(nan) == -1);
  CHECK(chooseLeader({}) == -1);

  RunningLoss loss(3);
  CHECK(std::isnan(loss.value()));
  loss.add(1.0);
  loss.add(2.0);
  CHECK(loss.value() == 1.5);
  loss.add(3.0);
  loss.add(7.0);  // window: 2, 3, 7
  CHECK(loss.value() == 4.0);
  Store store;
  MemoryVisitor saver(store, false);
  loss.visitState(saver);
  RunningLoss copy(3);
  MemoryVisitor loader(store, true);
  copy.visitState(loader);
  REQUIRE(loader.status().isOk());
  loss.add(1.0);
  copy.add(1.0);
  CHECK(copy.value() == loss.value());

  LeaderSpec bad = spec;
  bad.pullLocal = 1.5;
  CHECK(!checkLeaderSpec(bad).isOk());
  bad = spec;
  bad.localPeriod = 0;
  CHECK(!checkLeaderSpec(bad).isOk());
}

// ---------------------------------------------------------------- codistillation

// The distillation value written directly: alpha/m sum_j sum_c q (log q - log p) for kl, or
// -alpha/m sum_j sum_c q log p for cross-entropy, with softmax by its definition.
double distillRef(const CodistillationSpec& spec, size_t classes, const Vec& z, const Vec& q) {
  const size_t m = z.size() / classes;
  double total = 0;
  for (size_t j = 0; j < m; ++j) {
    double sum = 0;
    for (size_t c = 0; c < classes; ++c) sum += std::exp(z[j * classes + c]);
    for (size_t c = 0; c < classes; ++c) {
      const double p = std::exp(z[j * classes + c]) / sum;
      const double qq = q[j * classes + c];
      total += -qq * std::log(p);
      if (spec.distance == CodistillationSpec::Distance::kKl && qq > 0) total += qq * std::log(qq);
    }
  }
  return spec.alpha * total / static_cast<double>(m);
}

Vec softmaxRows(const Vec& z, size_t classes) {
  Vec p(z.size());
  for (size_t j = 0; j < z.size() / classes; ++j) {
    double sum = 0;
    for (size_t c = 0; c < classes; ++c) sum += std::exp(z[j * classes + c]);
    for (size_t c = 0; c < classes; ++c) p[j * classes + c] = std::exp(z[j * classes + c]) / sum;
  }
  return p;
}

TEST_CASE("codistillation: value, and the gradient by central differences", "[optim][methods]") {
  const size_t m = 3, classes = 4;
  const Vec z = randomVec(m * classes, 2.0, 51);
  const std::vector<Vec> nbrs{randomVec(m * classes, 2.0, 52), randomVec(m * classes, 2.0, 53),
                              randomVec(m * classes, 2.0, 54)};
  for (auto distance :
       {CodistillationSpec::Distance::kCrossEntropy, CodistillationSpec::Distance::kKl}) {
    CodistillationSpec spec;
    spec.alpha = 0.7;
    spec.distance = distance;
    INFO("kl " << (distance == CodistillationSpec::Distance::kKl));
    // The three forms, each as a function of the own logits.
    const auto single = [&](const Vec& own, std::span<double> grad) {
      return codistillationLoss<double>(spec, classes, own, nbrs[0], grad);
    };
    const Vec q0 = softmaxRows(nbrs[0], classes);
    const auto fromProb = [&](const Vec& own, std::span<double> grad) {
      return codistillationLossFromProbabilities<double>(spec, classes, own, q0, grad);
    };
    const auto averaged = [&](const Vec& own, std::span<double> grad) {
      return codistillationLossAveraged<double>(spec, classes, own, spans(nbrs), grad);
    };

    CHECK(single(z, {}) == Approx(distillRef(spec, classes, z, q0)).epsilon(1e-12));
    CHECK(fromProb(z, {}) == Approx(distillRef(spec, classes, z, q0)).epsilon(1e-12));
    double avgRef = 0;
    for (const auto& n : nbrs) avgRef += distillRef(spec, classes, z, softmaxRows(n, classes)) / 3;
    CHECK(averaged(z, {}) == Approx(avgRef).epsilon(1e-12));

    const std::function<double(const Vec&, std::span<double>)> forms[] = {single, fromProb,
                                                                          averaged};
    for (const auto& f : forms) {
      // The gradient is added to what grad holds.
      Vec grad(m * classes, 1.0);
      f(z, grad);
      const double h = 1e-5;
      for (size_t i = 0; i < z.size(); ++i) {
        Vec zp = z, zm = z;
        zp[i] += h;
        zm[i] -= h;
        const double fd = (f(zp, {}) - f(zm, {})) / (2 * h);
        INFO("i = " << i);
        CHECK(grad[i] - 1.0 == Approx(fd).margin(1e-9));
      }
    }
    // The closed form alpha (p - qbar) / m.
    Vec grad(m * classes, 0.0);
    averaged(z, grad);
    const Vec p = softmaxRows(z, classes);
    for (size_t i = 0; i < z.size(); ++i) {
      double qbar = 0;
      for (const auto& n : nbrs) qbar += softmaxRows(n, classes)[i] / 3;
      CHECK(grad[i] == Approx(spec.alpha * (p[i] - qbar) / m).margin(1e-15));
    }
  }

  // Agreeing predictions: kl 0 with a zero gradient, cross-entropy the entropy.
  CodistillationSpec kl;
  kl.distance = CodistillationSpec::Distance::kKl;
  Vec grad(m * classes, 0.0);
  CHECK(codistillationLoss<double>(kl, classes, z, z, grad) == Approx(0).margin(1e-14));
  for (double g : grad) CHECK(g == Approx(0).margin(1e-16));
  const Vec p = softmaxRows(z, classes);
  double entropy = 0;
  for (double v : p) entropy -= v * std::log(v);
  CHECK(codistillationLoss<double>({}, classes, z, z, {}) == Approx(entropy / m));
  // Shifting a row of logits changes nothing; large logits stay finite.
  Vec shifted = z;
  for (size_t c = 0; c < classes; ++c) shifted[c] += 1000.0;
  CHECK(codistillationLoss<double>({}, classes, shifted, nbrs[0], {}) ==
        Approx(codistillationLoss<double>({}, classes, z, nbrs[0], {})));
  // float.
  const std::vector<float> zf(z.begin(), z.end()), nf(nbrs[0].begin(), nbrs[0].end());
  std::vector<float> gf(m * classes, 0.0f);
  CHECK(codistillationLoss<float>({}, classes, zf, nf, gf) ==
        Approx(codistillationLoss<double>({}, classes, z, nbrs[0], {})).epsilon(1e-6));

  CodistillationSpec badAlpha;
  badAlpha.alpha = -1;
  CHECK(!checkCodistillationSpec(badAlpha).isOk());
  CHECK(checkCodistillationSpec({}).isOk());
}

}  // namespace
}  // namespace starling::optim

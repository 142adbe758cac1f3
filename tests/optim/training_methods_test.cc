// The training methods of docs/algorithms.md §22-§25 (AdaScale, Adasum, Leader SGD,
// codistillation), each against a reference written here from the equations, never by calling
// the code under test. Local optimizers and LEGW (§20-§21): local_optimizer_test.cc.
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

using testing::checkClose;
using testing::randomVec;
using testing::join;
using testing::MemoryVisitor;
using testing::split;
using testing::Store;
using testing::Vec;

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
